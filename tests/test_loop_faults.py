"""The `loop` backend when things go wrong: loops that lie, raise, are interrupted, misuse the recorder, or do not fit.

Each loop is a module written beside its request and run by the real CLI (in-process; the signal test
in a real forked process); verify is the real verify.
"""

import json
import signal
import time
from pathlib import Path

import pytest

from _forked import spawn_cli
from _loop_helpers import read, run, verify, write_loop
from conftest import PROCESS_TIMEOUT_S, run_cli

from genrun.snapshot_dir import SnapshotDir

HEADER = "import time\nfrom pathlib import Path\n"


def _loop(tmp_path: Path, body: str, **kw: str) -> Path:
    return write_loop(tmp_path, HEADER + "def generate(model_dir, inputs, generation, rec, **kwargs):\n" + body, **kw)


# -- loops that lie fail verify ---------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "expected"), [
    pytest.param("""\
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, [5, 6, 7])
        lm.stop(0, "eos", eos_token_id=2)
""", "stage 'lm' row 0: claims eos (id 2, declared set [2]) but its last id is 7", id="eos-without-eos-id"),
    pytest.param("""\
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, [5, 6])
        lm.advance(0, 3)
        lm.stop(0, "max_new_tokens", limit=5)
""", "stage 'lm' row 0: 5 units counted but 2 ids saved", id="fewer-ids-than-counted"),
    pytest.param("""\
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, [5, 6, 7])
        lm.stop(0, "max_new_tokens", limit=8)
""", "claims max_new_tokens (limit 8) but has 3 units", id="max-new-tokens-short"),
])
def test_a_lying_loop_fails_verify(tmp_path: Path, body: str, expected: str) -> None:
    done, snapshot = run(_loop(tmp_path, body), tmp_path / "store")
    assert done.returncode == 0 and snapshot is not None, done.stderr  # the run itself succeeds: the lie is in its evidence
    code, findings = verify(snapshot)
    assert code != 0 and findings["stages"]["status"] == "FAIL"
    assert expected in findings["stages"]["message"]


def test_rows_without_a_stop_and_short_consumption_are_warned_by_name(tmp_path: Path) -> None:
    body = """\
    with rec.stage("ar", unit="token", rows=2) as ar:
        ar.emit(0, [3, 4, 5, 6])
        ar.emit(1, [3])
        ar.stop(1, "budget_frames", budget=1)
    with rec.stage("decode", unit="window", rows=1, consumes="ar") as dec:
        dec.advance(0, 1, consumed=4)
        dec.stop(0, "completed")
"""
    done, snapshot = run(_loop(tmp_path, body), tmp_path / "store")
    assert done.returncode == 0 and snapshot is not None, done.stderr
    code, findings = verify(snapshot)
    stages = findings["stages"]
    assert code == 0 and stages["status"] == "WARN", stages
    assert "stage 'ar' row 0: unknown: the run returned without saying why the row stopped" in stages["message"]
    assert "stage 'decode' consumed 4 of the 5 'ar' units its source produced" in stages["message"]
    custom = read(snapshot, "generation-stop.json")["sequences"][1]
    assert (custom["reason"], custom["evidence"]["loop_reason"], custom["evidence"]["budget"]) == ("custom", "budget_frames", 1)


# -- faults seal the snapshot with every id so far --------------------------------------------------------


def test_a_raising_loop_seals_failed_with_its_traceback_and_ids(tmp_path: Path) -> None:
    body = """\
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, [5, 6, 7])
        raise ZeroDivisionError("the engine fell over")
"""
    done, snapshot = run(_loop(tmp_path, body), tmp_path / "store")
    assert done.returncode != 0 and snapshot is not None
    result = read(snapshot, "result.json")
    assert result["status"] == "failed" and result["generated"] == 3
    (stop,) = read(snapshot, "generation-stop.json")["sequences"]
    assert stop["reason"] == "exception" and "the engine fell over" in stop["exception"]["traceback"] and "myloop.py" in stop["exception"]["traceback"]
    assert read(snapshot, "stage-ids.json")["ids"] == {"lm": [[5, 6, 7]]}
    code, findings = verify(snapshot)
    assert not [f for f in findings.values() if f["status"] == "FAIL"], findings


def test_sigint_reaches_the_loop_and_seals_interrupted_with_its_ids(tmp_path: Path) -> None:
    body = """\
    rec.config({"forever": True})
    with rec.stage("lm", unit="token", rows=1) as lm:
        while True:
            lm.emit(0, [7])
            time.sleep(0.005)
"""
    store = tmp_path / "store"
    proc = spawn_cli("run", _loop(tmp_path, body), "--store", store, "--json")
    deadline = time.monotonic() + PROCESS_TIMEOUT_S
    snapshot = None
    while time.monotonic() < deadline:
        found = [p for p in store.iterdir() if not p.name.startswith(".")] if store.is_dir() else []
        progress = found[0] / "stage-progress.ndjson" if found else None
        if progress is not None and progress.is_file() and b'"event":"progress"' in progress.read_bytes():
            snapshot = found[0]
            break
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.02)
    assert snapshot is not None, "no stage progress record appeared"
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=PROCESS_TIMEOUT_S)
    assert proc.returncode == 130
    result = read(snapshot, "result.json")
    assert (result["status"], result["signal"]) == ("interrupted", "SIGINT")
    (stop,) = read(snapshot, "generation-stop.json")["sequences"]
    assert (stop["reason"], stop["evidence"]["signal"]) == ("interrupted", "SIGINT")
    ids = read(snapshot, "stage-ids.json")["ids"]["lm"][0]
    assert len(ids) >= 2 and set(ids) == {7} and stop["generated"] == len(ids) == result["generated"]
    code, findings = verify(snapshot)
    assert not [f for f in findings.values() if f["status"] == "FAIL"], findings


def _wait_for(proc, marker: Path) -> None:
    """Until the loop wrote `marker` (it is then inside its `try`), never by timing."""
    deadline = time.monotonic() + PROCESS_TIMEOUT_S
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, f"{marker.name} never appeared"
        time.sleep(0.02)


SWALLOWS = """\
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, [5])
        try:
            Path(MARK).write_text("in the try")
            time.sleep(120)
        except BaseException:
            Path(SWALLOWED).write_text("swallowed")
"""
SWALLOWING_LOOPS = {
    # the loop swallows the signal and returns as if nothing happened: genrun's check after generate stops the run
    "returns": SWALLOWS,
    # the loop swallows it and goes on generating: the recorder's next step stops the run
    "goes-on": SWALLOWS + """\
        for _ in range(1000):
            lm.emit(0, [6])
        lm.stop(0, "max_new_tokens", limit=1001)
""",
}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("loop", sorted(SWALLOWING_LOOPS))
def test_a_signal_the_loop_swallows_still_seals_interrupted(tmp_path: Path, loop: str, sig: signal.Signals) -> None:
    mark, swallowed = tmp_path / "mark", tmp_path / "swallowed"
    body = f"    MARK, SWALLOWED = {str(mark)!r}, {str(swallowed)!r}\n" + SWALLOWING_LOOPS[loop]
    store = tmp_path / "store"
    proc = spawn_cli("run", _loop(tmp_path, body), "--store", store, "--json")
    _wait_for(proc, mark)
    proc.send_signal(sig)
    proc.communicate(timeout=PROCESS_TIMEOUT_S)
    assert swallowed.exists(), "the loop did not swallow the signal: this test would not test anything"
    assert proc.returncode == 128 + sig
    (snapshot,) = [p for p in store.iterdir() if not p.name.startswith(".")]
    result = read(snapshot, "result.json")
    assert (result["status"], result["signal"]) == ("interrupted", sig.name)
    (stop,) = read(snapshot, "generation-stop.json")["sequences"]
    assert (stop["reason"], stop["evidence"]["signal"]) == ("interrupted", sig.name)
    code, findings = verify(snapshot)
    assert not [f for f in findings.values() if f["status"] == "FAIL"], findings


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_swallowed_by_an_import_while_planning_still_refuses_the_plan(tmp_path: Path, sig: signal.Signals) -> None:
    """The loop's module is imported at plan time (to check its callable); one that catches `BaseException` around its
    own work there swallowed genrun's interrupt, and `genrun run` went on to run and seal the request with exit 0."""
    mark, swallowed = tmp_path / "mark", tmp_path / "swallowed"
    module_top = (f"MARK, SWALLOWED = Path({str(mark)!r}), Path({str(swallowed)!r})\n"
                  "if not MARK.exists():  # once: a later import (execution's) must not wait again\n"
                  "    try:\n"
                  "        MARK.write_text('in the try')\n"
                  "        time.sleep(120)\n"
                  "    except BaseException:\n"
                  "        SWALLOWED.write_text('swallowed')\n")
    body = """\
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, [5])
        lm.stop(0, "max_new_tokens", limit=1)
"""
    request = write_loop(tmp_path, HEADER + module_top + "def generate(model_dir, inputs, generation, rec, **kwargs):\n" + body)
    store = tmp_path / "store"
    proc = spawn_cli("run", request, "--store", store, "--json")
    _wait_for(proc, mark)
    proc.send_signal(sig)
    proc.communicate(timeout=PROCESS_TIMEOUT_S)
    assert swallowed.exists(), "the import did not swallow the signal: this test would not test anything"
    assert proc.returncode == 128 + sig
    assert not store.exists() or [p.name for p in store.iterdir() if not p.name.startswith(".")] == []


def test_a_signal_landing_in_a_progress_write_never_counts_units_twice(tmp_path: Path) -> None:
    """A SIGINT raised inside the run's progress record (after the recorder counted the units it was told) used to leave
    the stage believing they were still untold: the stage's exit told them again, and progress.ndjson went backwards
    (6 -> 4, seen under load). The signal is simulated where it landed (its timing cannot be arranged): the loop makes the
    recorder's next progress write raise KeyboardInterrupt, as the gate's SIGINT does."""
    body = """\
    with rec.stage("lm", unit="token", rows=1) as lm:
        write = rec.core._write

        def signal_lands_here(event):
            if event.__class__.__name__ == "ProgressEvent":
                rec.core._write = write
                raise KeyboardInterrupt
            write(event)

        rec.core._write = signal_lands_here
        for _ in range(50):
            lm.emit(0, [7])
"""
    done, snapshot = run(_loop(tmp_path, body), tmp_path / "store")
    assert snapshot is not None, done.stderr
    result = read(snapshot, "result.json")
    assert result["status"] == "interrupted", result
    ids = read(snapshot, "stage-ids.json")["ids"]["lm"][0]
    counts = [json.loads(line)["generated"] for line in (snapshot / "progress.ndjson").read_text().splitlines()]
    assert counts == sorted(counts) and counts[-1] == len(ids) == result["generated"], counts
    code, findings = verify(snapshot)
    assert not [f for f in findings.values() if f["status"] == "FAIL"], findings


# -- a loop that misuses the recorder gets an error naming the call ---------------------------------------


@pytest.mark.parametrize(("body", "expected"), [
    pytest.param("""\
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.stop(0, "completed")
        lm.emit(0, [1])
""", "stage 'lm': emit(row 0) after stop(row 0, 'completed')", id="emit-after-stop"),
    pytest.param("""\
    with rec.stage("lm", unit="token", rows=2) as lm:
        lm.emit(2, [1])
""", "stage 'lm': emit(row 2): row out of range; the stage has rows 0..1", id="row-out-of-range"),
    pytest.param("""\
    with rec.stage("decode", unit="window", rows=1, consumes="ar") as dec:
        pass
""", "rec.stage('decode'): consumes='ar' is not an earlier stage (stages so far: none yet)", id="unknown-stage"),
    pytest.param("""\
    with rec.stage("lm", unit="token", rows=1) as lm:
        rec.config({"late": True})
""", "rec.config(...) called after its first stage began", id="config-after-first-unit"),
    pytest.param("""\
    rec.config({"a": 1})
    rec.config({"a": 2})
""", "rec.config(...) called a second time", id="config-twice"),
    pytest.param("""\
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.stop(0, "eos")
""", "stage 'lm': stop(row 0, 'eos') needs eos_token_id=...", id="eos-without-its-id"),
    pytest.param("""\
    with rec.stage("lm", unit="bar", rows=1) as lm:
        pass
""", "rec.stage('lm'): unit='bar' is not one of token, frame, window, step, sample", id="unknown-unit"),
])
def test_recorder_misuse_fails_the_run_naming_the_call(tmp_path: Path, body: str, expected: str) -> None:
    done, snapshot = run(_loop(tmp_path, body), tmp_path / "store")
    assert done.returncode != 0 and snapshot is not None
    assert read(snapshot, "result.json")["status"] == "failed"
    exception = read(snapshot, "result.json")["exception"]
    assert exception["type"].endswith("RecorderMisuse") and expected in exception["message"], exception


# -- plan-time refusals -----------------------------------------------------------------------------------


def test_budget_callable_refuses_with_exit_3_and_the_fix(tmp_path: Path) -> None:
    request = _loop(tmp_path, "    pass\n", kwargs='{ frames = 750 }\nbudget = "myloop:budget"')
    with (tmp_path / "myloop.py").open("a") as module:
        module.write("\ndef budget(model_dir, inputs, generation, frames):\n    return {'frames': {'needed': frames, 'limit': 500}}\n")
    planned = run_cli("plan", request, "--store", tmp_path / "store")
    assert planned.returncode == 3, planned.stderr
    assert "[loop] budget 'myloop:budget': frames needs 750 but the limit is 500" in planned.stderr and "--force" in planned.stderr
    assert not (tmp_path / "store").exists() or not [p for p in (tmp_path / "store").iterdir() if not p.name.startswith(".")]
    forced = run_cli("plan", request, "--store", tmp_path / "store", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "forced past: [loop] budget 'myloop:budget': frames needs 750" in forced.stderr and "--force" not in forced.stderr


@pytest.mark.parametrize(("change", "expected"), [
    (('callable = "myloop:generate"', 'calable = "myloop:generate"'), "unknown key 'calable' in [loop]; did you mean 'callable'?"),
    (('callable = "myloop:generate"', 'callable = "myloop"'), '[loop] callable = \'myloop\' must be "module:function"'),
    (('callable = "myloop:generate"', 'callable = "myloop:nothing"'), "module 'myloop' has no callable 'nothing'"),
])
def test_bad_loop_tables_are_refused_at_plan(tmp_path: Path, change: tuple[str, str], expected: str) -> None:
    request = _loop(tmp_path, "    pass\n")
    request.write_text(request.read_text().replace(*change))
    planned = run_cli("plan", request, "--store", tmp_path / "store")
    assert planned.returncode == 2 and expected in planned.stderr, planned.stderr


def test_the_recorder_is_cheap_enough_to_call_per_unit() -> None:
    """Not a timing assertion: the hot path writes no record between cadence points (counted, not timed)."""
    import os
    import tempfile

    from genrun.runner.backends.loop.recorder import LoopRecorder
    from genrun.runner.recorder import ProgressRecorder

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        core = ProgressRecorder(SnapshotDir(out, writable=True).open_stream("progress.ndjson"), origin=time.monotonic(), unit="token", every_units=10_000, every_seconds=3600)
        fd = os.open(out / "stage-progress.ndjson", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        rec = LoopRecorder(core=core, progress_fd=fd, every_units=1_000, every_seconds=3600, on_config=lambda c: None, outputs_dir=out)
        with rec.stage("lm", unit="token", rows=1) as lm:
            for i in range(5_000):
                lm.emit(0, [i])
        os.close(fd)
        core.close()
        lines = (out / "stage-progress.ndjson").read_bytes().splitlines()
        assert len(lines) == 1 + 5 + 1  # start, one record per 1,000 units, end
        assert lm.units() == (5_000,) and core.steps == 5_000

