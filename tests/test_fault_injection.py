"""Crash consistency: stop a real `genrun run` of the tiny model before each of its filesystem calls in turn.

`tests/_fault_server.py` imports genrun once and forks one real process per point; an audit hook
counts the calls Python audits inside the store (open, mkstemp, rename/replace, mkdir, chmod, ...)
and sends the process SIGKILL, SIGTERM or SIGINT just before call number N. After every point the
store must obey the state rules of `genrun.schemas.layout`:

- SIGTERM / SIGINT: exit 143 / 130 and no traceback, and the store holds nothing (no `.tmp-*`), an
  intact plan that can still be executed, or a sealed `interrupted` snapshot that verifies; a signal
  after generation ended is counted, not acted on: the snapshot is sealed with its real result and
  the exit code is that result's.
- SIGKILL: anything may be left, but an unsealed snapshot is never shown as `succeeded` (`genrun ls`),
  a plan is intact or still in its temporary directory, and a sealed snapshot verifies.

Points: every call that creates, renames, removes or changes a file, and the first read after each
of them (a read-only stretch such as hashing is one phase). Each point is stopped by one signal,
rotating SIGKILL, SIGTERM, SIGINT (about 60 runs of ~1-2 s); `GENRUN_FAULTS_ALL=1` stops every
point with all three signals.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import PROCESS_TIMEOUT_S, run_cli

from _lm_helpers import REPO, TINY_LM, request_text
from genrun.runner.execute import refuse_executed, verify_plan_files
from genrun.runner.store import snapshot_state
from genrun.schemas import layout
from genrun.snapshot_dir import SnapshotDir

SERVER = Path(__file__).with_name("_fault_server.py")
SIGNALS = ("SIGKILL", "SIGTERM", "SIGINT")
EXIT_OF = {"SIGTERM": 143, "SIGINT": 130}
MUTATING = {"open-write", "tempfile.mkdtemp", "tempfile.mkstemp", "os.mkdir", "os.rename", "os.remove", "os.rmdir", "os.chmod", "shutil.rmtree"}


def _serve(jobs: list[dict[str, Any]], work: Path) -> list[dict[str, Any]]:
    jobs_file = work / "jobs.json"
    jobs_file.write_text(json.dumps(jobs))
    timeout = PROCESS_TIMEOUT_S + 30 * len(jobs)
    done = subprocess.run([sys.executable, str(SERVER), str(jobs_file)], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def _job(work: Path, request: Path, label: str, at: int | None, signal: str | None) -> dict[str, Any]:
    store = work / f"store-{label}"
    return {"argv": ["run", str(request), "--store", str(store)], "store": str(store), "at": at, "signal": signal,
            "stdout": str(work / f"{label}.out"), "stderr": str(work / f"{label}.err"),
            "calls_out": str(work / f"{label}.calls.json") if at is None else None,
            "modules_out": str(work / f"{label}.modules.json") if at is None else None}


def fault_points(calls: list[list[str]]) -> list[int]:
    """1-based call numbers: every mutating call, and the first read after each (plus the very first call)."""
    points = []
    for number, (event, _) in enumerate(calls, start=1):
        previous = calls[number - 2][0] if number > 1 else None
        if event in MUTATING or previous is None or (previous in MUTATING and event not in MUTATING):
            points.append(number)
    return points


@pytest.fixture(scope="module")
def enumerated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[list[str]]]:
    """One clean run that records its filesystem calls: the points to stop at."""
    work = tmp_path_factory.mktemp("faults")
    request = work / "tiny.toml"
    # No memory margin: the faults are the point, and a busy machine's free memory must not refuse a run (exit 3).
    request.write_text(request_text(TINY_LM, name="fault", generation={"max_new_tokens": 8}) + "[budget]\nmemory_margin_fraction = 0.0\n")
    (clean,) = _serve([_job(work, request, "clean", None, None)], work)
    assert clean["returncode"] == 0, (work / "clean.err").read_text()
    calls = json.loads((work / "clean.calls.json").read_text())
    events = {event for event, _ in calls}
    assert {"tempfile.mkdtemp", "os.rename", "open-write", "open"} <= events, events  # the hook saw the store (atomic writes create their temporary files with open)
    return work, request, calls


def _plan_points(calls: list[list[str]]) -> list[tuple[int, str]]:
    points = fault_points(calls)
    if os.environ.get("GENRUN_FAULTS_ALL"):
        return [(n, sig) for n in points for sig in SIGNALS]
    return [(n, SIGNALS[i % len(SIGNALS)]) for i, n in enumerate(points)]


def test_enumeration_covers_every_phase(enumerated: tuple[Path, Path, list[list[str]]]) -> None:
    """The points reach planning (temporary dir), the rename into place, execution files, result and the seal."""
    _, _, calls = enumerated
    points = fault_points(calls)
    named = [calls[n - 1][1] for n in points]
    assert any(name.startswith(".tmp-") for name in named)
    for artifact in (layout.PROGRESS, layout.TOKEN_IDS, layout.RESULT, layout.MANIFEST):
        assert any(artifact in name for name in named), artifact
    # The hook resolves the directory-descriptor writes (temporary file, rename) of every atomic write since they replaced
    # mkstemp; that and backend.json grew the points from ~80: the bound keeps the module's cost in check.
    assert 30 <= len(points) <= 120, len(points)


def test_stopped_at_every_filesystem_call(enumerated: tuple[Path, Path, list[list[str]]]) -> None:
    work, request, calls = enumerated
    planned = _plan_points(calls)
    jobs = [_job(work, request, f"p{n}-{sig}", n, sig) for n, sig in planned]
    results = _serve([_job(work, request, "warm", None, None), *jobs], work)[1:]  # the first run warms the imports
    assert len(results) == len(jobs)
    outcomes: dict[str, int] = {}
    for (n, sig), job, got in zip(planned, jobs, results):
        where = f"{sig} before call {n} ({calls[n - 1][0]} {calls[n - 1][1]})"
        outcome = _assert_state_rules(Path(job["store"]), sig, got["returncode"], Path(job["stderr"]).read_text(), where)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    # every kind of ending was reached by some point
    assert {"nothing", "plan", "interrupted", "sealed-after-generation"} <= outcomes.keys(), outcomes
    print(f"{len(jobs)} fault points: {outcomes}")


PLANNING_READS = (
    ("/tiny.toml", "SIGINT"),  # the request
    ("/tiny-lm/config.json", "SIGTERM"),  # the backend's checks
    ("/hashes-v1/", "SIGINT"),  # hashing the model (the first run filled the hash cache)
    ("/tiny-lm/tokenizer.json", "SIGTERM"),  # the budget's prompt
    ("/proc/meminfo", "SIGINT"),  # the budget's memory fit: issue 42 saw such a run exit 3, the budget refusal's code
    ("/proc/meminfo", "SIGTERM"),
)
"""Reads of planning before it touches the store, which the store-only points above never stop at."""


def test_stopped_while_planning_reads(tmp_path: Path) -> None:
    """A signal at any read of planning exits 130 / 143 saying nothing was written, and the store holds nothing: an
    interruption is never taken for a refusal (exit 2 or 3) nor leaves a temporary directory."""
    request = tmp_path / "tiny.toml"
    request.write_text(request_text(TINY_LM, name="fault", generation={"max_new_tokens": 8}) + "[budget]\nmemory_margin_fraction = 0.0\n")
    jobs = [{**_job(tmp_path, request, f"read{i}-{sig}", None, sig), "at_path": path, "calls_out": None, "modules_out": None}
            for i, (path, sig) in enumerate(PLANNING_READS)]
    results = _serve([_job(tmp_path, request, "warm", None, None), *jobs], tmp_path)
    assert results[0]["returncode"] == 0, (tmp_path / "warm.err").read_text()
    for (path, sig), job, got in zip(PLANNING_READS, jobs, results[1:]):
        stderr = Path(job["stderr"]).read_text()
        where = f"{sig} before reading {path}"
        assert "Traceback" not in stderr, f"{where}: {stderr[-2000:]}"
        assert got["returncode"] == EXIT_OF[sig], f"{where}: exit {got['returncode']}, {stderr}"
        assert f"interrupted by {sig} before a snapshot was made; nothing was written" in stderr, f"{where}: {stderr}"
        store = Path(job["store"])
        assert not store.exists() or not list(store.iterdir()), f"{where}: left {list(store.iterdir())}"


def _assert_state_rules(store: Path, sig: str, returncode: int, stderr: str, where: str) -> str:
    """The rules of the module docstring for one point; returns what the point left."""
    assert "Traceback" not in stderr, f"{where}: {stderr[-2000:]}"
    entries = sorted(store.iterdir()) if store.is_dir() else []
    temporary = [p for p in entries if p.name.startswith(".")]
    snapshots = [p for p in entries if not p.name.startswith(".")]
    assert len(snapshots) <= 1, f"{where}: {entries}"
    _assert_ls_never_succeeded_unsealed(store, where)
    if sig == "SIGKILL":
        assert returncode == -9, f"{where}: exit {returncode}"
        if not snapshots:
            if temporary:
                listed = json.loads(run_cli("ls", "--store", store, "--json").stdout)["snapshots"]
                # a leftover is shown as abandoned (its planner is dead), not hidden, and `gc --yes` removes it
                assert [row["state"] for row in listed] == ["abandoned"], f"{where}: {listed}"
                assert run_cli("gc", "--store", store, "--yes").returncode == 0, where
                assert not list(store.iterdir()), where  # `ls` writes nothing in the store
            return "nothing" if not temporary else "planning"
        return _kill_left(snapshots[0], where)
    assert not temporary, f"{where}: left {temporary}"
    if not snapshots:
        assert returncode == EXIT_OF[sig], f"{where}: exit {returncode}, {stderr}"
        return "nothing"
    snapshot = snapshots[0]
    state = snapshot_state(snapshot)
    if state is layout.SnapshotState.PLANNED:
        assert returncode == EXIT_OF[sig], f"{where}: exit {returncode}"
        refuse_executed(SnapshotDir(snapshot))  # still executable
        verify_plan_files(SnapshotDir(snapshot))  # intact
        return "plan"
    assert state is layout.SnapshotState.SEALED, f"{where}: {state.value}"
    result = json.loads((snapshot / layout.RESULT).read_text())
    _assert_verifies(snapshot, where)
    assert returncode == result["exit_code"], f"{where}: exit {returncode}, result.json says {result['exit_code']}"
    if result["status"] == "interrupted":
        assert (result["signal"], returncode) == (sig, EXIT_OF[sig]), f"{where}: {result['signal']}"
        return "interrupted"
    assert result["status"] == "succeeded" and returncode == 0, f"{where}: {result['status']}"
    return "sealed-after-generation"


def _kill_left(snapshot: Path, where: str) -> str:
    state = snapshot_state(snapshot)
    if state is layout.SnapshotState.PLANNED:
        verify_plan_files(SnapshotDir(snapshot))
        return "plan"
    if state is layout.SnapshotState.SEALED:
        _assert_verifies(snapshot, where)
        return "sealed"
    assert state in (layout.SnapshotState.RUNNING, layout.SnapshotState.INCOMPLETE), f"{where}: {state.value}"
    return state.value


def _assert_verifies(snapshot: Path, where: str) -> None:
    done = run_cli("verify", snapshot, "--json")
    report = json.loads(done.stdout)
    failed = [f for f in report["findings"] if f["status"] == "FAIL"]
    assert done.returncode == 0 and not failed, f"{where}: {failed}"


def _assert_ls_never_succeeded_unsealed(store: Path, where: str) -> None:
    listed = run_cli("ls", "--store", store, "--json")
    assert listed.returncode == 0, listed.stderr
    for row in json.loads(listed.stdout)["snapshots"]:
        assert row["sealed"] or row["state"] in ("planning", "abandoned", "planned", "running", "incomplete"), f"{where}: {row}"
        assert row["state"] not in ("planning", "abandoned") or row["id"].startswith(".tmp-"), f"{where}: {row}"
