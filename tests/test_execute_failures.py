"""Every exception once execution has begun seals a `failed` snapshot: never one left `running`, whatever step raised.

Each case plans a loop snapshot (torch-free, fast), then makes one step of the real execute path raise once (a
monkeypatched step, the rest real) and checks the evidence: sealed, `failed`, the exception in `result.json` and in the
progress stream's terminal event, verify consistent, `report` naming the exception, and the terminal one line.
"""

import contextlib
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from _loop_helpers import write_loop
from conftest import REPO, run_cli
from genrun.analysis import verify_snapshot
from genrun.runner import execute as execute_module
from genrun.runner.backends.loop.backend import LoopBackend, LoopRun
from genrun.runner.plan import plan_request
from genrun.runner.run_log import RunLog
from genrun.runner.runtime import Runtime
from genrun.schemas import EVENT_ADAPTER, layout
from genrun.snapshot_dir import SnapshotDir

LOOP = """\
def generate(model_dir, inputs, generation, rec, **kwargs):
    rec.config({"eos_token_ids": [2]})
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, [5, 2])
        lm.stop(0, "eos", eos_token_id=2)
"""


class Injected(Exception):
    """The exception a test makes one step raise."""


def _raising_once(original: Callable[..., Any], step: str) -> Callable[..., Any]:
    """`original`, except that its first call raises `Injected(step)`."""
    calls = []

    def patched(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise Injected(f"injected at {step}")
        return original(*args, **kwargs)
    return patched


@contextlib.contextmanager
def _raising_deterministic_mode(self: Runtime, request: Any, device: str) -> Iterator[Any]:
    raise Injected("injected at determinism")
    yield


def _write_refusing(name: str) -> Callable[..., Any]:
    original = SnapshotDir.write

    def write(self: SnapshotDir, artifact: str, model: Any) -> Path:
        if artifact == name and not getattr(write, "raised", False):
            write.raised = True  # type: ignore[attr-defined]
            raise Injected(f"injected at {name}")
        return original(self, artifact, model)
    return write


STEPS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "imports": lambda mp: mp.setattr(execute_module, "get_backend", _raising_once(execute_module.get_backend, "imports")),
    "device": lambda mp: mp.setattr(Runtime, "resolve_device", _raising_once(Runtime.resolve_device, "device")),
    "unit": lambda mp: mp.setattr(LoopBackend, "progress_unit", _raising_once(LoopBackend.progress_unit, "unit")),
    "run log": lambda mp: mp.setattr(RunLog, "open", _raising_once(RunLog.open, "run log")),
    "context": lambda mp: mp.setattr(execute_module, "load_context", _raising_once(execute_module.load_context, "context")),
    "determinism": lambda mp: mp.setattr(Runtime, "deterministic_mode", _raising_deterministic_mode),
    "start": lambda mp: mp.setattr(LoopBackend, "start", _raising_once(LoopBackend.start, "start")),
    "load": lambda mp: mp.setattr(LoopBackend, "load", _raising_once(LoopBackend.load, "load")),
    "generate": lambda mp: mp.setattr(LoopRun, "generate", _raising_once(LoopRun.generate, "generate")),
    "finish": lambda mp: mp.setattr(LoopRun, "finish", _raising_once(LoopRun.finish, "finish")),
    "sampling": lambda mp: mp.setattr(execute_module, "with_sampling", _raising_once(execute_module.with_sampling, "sampling")),
    "determinism.json": lambda mp: mp.setattr(SnapshotDir, "write", _write_refusing(layout.DETERMINISM)),
    "generation-stop.json": lambda mp: mp.setattr(SnapshotDir, "write", _write_refusing(layout.STOP)),
    "result": lambda mp: mp.setattr(execute_module, "build_result", _raising_once(execute_module.build_result, "result")),
    "terminal event": lambda mp: mp.setattr(execute_module, "write_terminal_event",
                                            _raising_once(execute_module.write_terminal_event, "terminal event")),
}


AFTER_THE_TERMINAL_EVENT = ("determinism.json", "generation-stop.json")
"""Writes come after the terminal event (it needs no inode: a store that cannot take the files still shows the run ended)."""


@pytest.fixture
def planned(tmp_path: Path) -> Path:
    return plan_request(write_loop(tmp_path, LOOP), store=tmp_path / "store")


@pytest.mark.parametrize("step", list(STEPS))
def test_an_exception_at_each_step_of_execute_seals_a_failed_snapshot(step: str, planned: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    STEPS[step](monkeypatch)
    done = run_cli("execute", planned)
    monkeypatch.undo()
    assert done.returncode == 1, done.stderr
    snapshot = SnapshotDir(planned)
    assert snapshot.state() is layout.SnapshotState.SEALED  # never `running`
    result = snapshot.read_json(layout.RESULT)
    assert (result["status"], result["exception"]["message"]) == ("failed", f"injected at {step}")
    assert result["exception"]["type"].endswith("Injected")
    terminal = EVENT_ADAPTER.validate_json(snapshot.read_bytes(layout.PROGRESS).splitlines()[-1])
    if step in AFTER_THE_TERMINAL_EVENT:  # the stream had already said how generation ended
        assert terminal.event == "end"
    else:
        assert (terminal.event, getattr(terminal, "message", None)) == ("exception", f"injected at {step}")
    failed = {f.name: f.message for f in verify_snapshot(planned).findings if f.status == "FAIL"}
    if step == "finish":  # the backend's own evidence (stop records, stage files) was never written: verify says so
        assert set(failed) == {"stop_evidence", "stages"}, failed
    else:
        assert not failed, failed
    headline = " ".join(run_cli("report", planned).stdout.split()[:40])  # the report wraps at the terminal's width
    assert f"raised test_execute_failures.Injected: injected at {step}" in headline, headline
    # One line names it on the terminal; no traceback.
    assert "Traceback" not in done.stderr and f"injected at {step}" in done.stderr


def test_an_unexpected_error_outside_a_run_is_one_line_and_the_traceback_is_there_when_asked(tmp_path: Path) -> None:
    """A crash of genrun itself (here: `report` of a snapshot whose reader is made to raise) prints one line naming the
    exception; GENRUN_TRACEBACK=1 prints the traceback too."""
    script = tmp_path / "crash.py"
    script.write_text(textwrap.dedent("""\
        import sys
        from genrun.runner.cli import main, report

        def crash(args):
            raise RuntimeError("the reader broke")

        report.handle = crash
        sys.exit(main(["report", "nothing"]))
        """))
    done = subprocess.run([sys.executable, script], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "genrun: error: RuntimeError: the reader broke (genrun failed unexpectedly; GENRUN_TRACEBACK=1 shows where)"]
    shown = subprocess.run([sys.executable, script], capture_output=True, text=True, cwd=REPO,
                           env={"GENRUN_TRACEBACK": "1", "PATH": "/usr/bin:/bin"})
    assert shown.returncode == 1 and "Traceback (most recent call last)" in shown.stderr and "the reader broke" in shown.stderr


def test_a_loop_run_never_imports_torch(tmp_path: Path) -> None:
    """Where torch is installed, a loop example planned, executed, verified and reported in one process never imports it;
    its determinism.json claims no torch setting and its report lists the packages its environment recorded."""
    pytest.importorskip("torch")  # the point is a machine where torch could be imported
    store = tmp_path / "store"
    probe = textwrap.dedent(f"""\
        import sys
        from pathlib import Path
        from genrun.runner.cli import main
        assert main(["run", "tiny-onnx-loop.toml", "--store", {str(store)!r}, "--quiet"]) == 0
        (snapshot,) = [p for p in Path({str(store)!r}).iterdir() if p.is_dir() and not p.name.startswith(".")]
        assert main(["verify", str(snapshot)]) == 0
        assert main(["report", str(snapshot)]) == 0
        print("SNAPSHOT", snapshot, "TORCH", sorted(m for m in sys.modules if m.split(".")[0] == "torch"))
        """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO / "examples")
    assert done.returncode == 0, done.stderr
    marker, path, torch_word, modules = done.stdout.splitlines()[-1].split(" ", 3)
    assert (marker, torch_word, modules) == ("SNAPSHOT", "TORCH", "[]")
    seen = {"snapshot": path, "report": done.stdout}
    snapshot = SnapshotDir(seen["snapshot"])
    determinism = snapshot.read_json(layout.DETERMINISM)
    torch_fields = ("deterministic_algorithms", "deterministic_warn_only", "torch_threads", "torch_interop_threads")
    assert [determinism[name] for name in torch_fields] == [None] * len(torch_fields)
    packages = snapshot.read_json(layout.ENVIRONMENT)["packages"]
    assert "torch" not in packages and packages["onnxruntime"] is not None
    assert f"onnxruntime {packages['onnxruntime']}" in seen["report"] and "torch" not in seen["report"]
