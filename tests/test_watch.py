"""`genrun watch`: following real `genrun run` subprocesses (to the end, SIGKILLed), `--json`, refusals, the ETA.

The runs use a slow entry point (every decoding step sleeps) so that there is something to follow;
`watch` runs as its own process, as an operator's second terminal would. Nothing asserts on
elapsed time: only on the updates `watch` printed and on its exit code.
"""

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from genrun.analysis.watch import INCOMPLETE_EXIT, ProgressTail, WatchUpdate, assess, estimate_eta
from genrun.runner.cli import main
from genrun.schemas import FirstTokenEvent, ProgressEvent, StartEvent, layout

from _forked import ForkedProcess, run_cli_forked, spawn_cli
from _analysis_helpers import REPO, SLOW_ENTRYPOINT, TINY_LM, copy_snapshot, request_toml, snapshots  # noqa: F401 - fixture
from conftest import EXAMPLES, PROCESS_TIMEOUT_S, run_cli


def start_slow_run(work: Path, countdown: int = 40, every_seconds: float = 0.5) -> tuple[ForkedProcess, Path]:
    """`genrun run` on the slow entry point in a subprocess; returns it and its store."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "slow_entry.py").write_text(SLOW_ENTRYPOINT)
    request = work / "request.toml"
    request.write_text(request_toml("watched", TINY_LM, f"count down from {countdown} :", {"max_new_tokens": 64, "do_sample": False},
                                    entrypoint={"callable": "slow_entry:generate_slowly"},
                                    progress={"every_units": 2, "every_seconds": every_seconds}))
    store = work / "store"
    run = spawn_cli("run", request, "--store", store, stdout=subprocess.DEVNULL)
    return run, store


def wait_for_snapshot(run: ForkedProcess, store: Path) -> Path:
    """The snapshot directory, as soon as planning has renamed it into the store."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        found = [p for p in store.glob("2*") if p.is_dir()] if store.is_dir() else []
        if found:
            return found[0]
        assert run.poll() is None, run.stderr.read()[-2000:]
        time.sleep(0.05)
    raise AssertionError("no snapshot appeared within 180 s")


def start_watch(snapshot: Path, *extra: str) -> ForkedProcess:
    return spawn_cli("watch", snapshot, "--json", "--interval", "0.1", *extra)


def updates(lines: str) -> list[WatchUpdate]:
    """Every stdout line of `watch --json` is one WatchUpdate."""
    return [WatchUpdate.model_validate_json(line) for line in lines.splitlines() if line.strip()]


@contextlib.contextmanager
def _executing(snapshot: Path) -> Iterator[None]:
    """Hold the execution lock `genrun execute` holds on the snapshot from before its progress stream exists to its seal."""
    fd = os.open(snapshot / layout.FROZEN_MANIFEST, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def test_follows_a_real_run_to_its_end(tmp_path: Path) -> None:
    run, store = start_slow_run(tmp_path)
    try:
        snapshot = wait_for_snapshot(run, store)
        watch = start_watch(snapshot, "--stall-after", "120")
        out, err = watch.communicate(timeout=300)
        assert run.wait(timeout=60) == 0
    finally:
        run.kill()
    seen = updates(out)
    assert watch.returncode == 0, err
    final = seen[-1]
    assert final.state == "sealed" and final.status == "succeeded" and final.exit_code == 0 and final.stop_reasons == ("eos",)
    running = [u for u in seen if u.state == "running" and u.records > 0]
    assert running, f"watch never saw the run in progress: {[u.state for u in seen]}"
    counts = [u.generated for u in running if u.generated is not None]
    assert counts == sorted(counts) and counts[-1] > 0
    assert all(u.rss_bytes for u in running if u.last_event == "progress")
    assert any(u.eta_s is not None and u.planned_units == 64 for u in running)
    assert final.generated == 41  # "count down from 40 :" -> 39 … 0 <eos>: 40 numbers and EOS


def test_sigkilled_run_is_reported_incomplete_at_once(tmp_path: Path) -> None:
    """Once no process holds the execution lock the verdict comes at once, not after --stall-after (an hour here)."""
    run, store = start_slow_run(tmp_path, countdown=63)
    try:
        snapshot = wait_for_snapshot(run, store)
        watch = start_watch(snapshot, "--stall-after", "3600")
        deadline = time.monotonic() + 180
        while b'"event":"progress"' not in ((snapshot / "progress.ndjson").read_bytes() if (snapshot / "progress.ndjson").exists() else b""):
            assert time.monotonic() < deadline and run.poll() is None, "the run ended before it could be killed"
            time.sleep(0.02)
        run.send_signal(signal.SIGKILL)
        assert run.wait(timeout=60) == -signal.SIGKILL
        out, err = watch.communicate(timeout=120)
    finally:
        run.kill()
    seen = updates(out)
    assert watch.returncode == INCOMPLETE_EXIT, err
    states = [u.state for u in seen]
    assert states[-1] == "incomplete" and "stalled" not in states, states
    assert seen[-1].writer == "gone" and "no process holds its execution lock" in seen[-1].message
    assert "incomplete" in err  # the verdict also reaches a person reading stderr


def test_watch_on_a_killed_snapshot_exits_incomplete(snapshots, capsys) -> None:  # noqa: F811
    code = main(["watch", str(snapshots.killed()), "--stall-after", "0.5", "--interval", "0.05"])
    out = capsys.readouterr().out
    assert code == INCOMPLETE_EXIT
    assert "STALL" not in out and "incomplete: the writer is gone (no process holds its execution lock" in out


@pytest.mark.parametrize("planted", ["fifo", "device link"])
def test_watch_refuses_a_progress_stream_that_is_not_a_regular_file(snapshots, tmp_path: Path, planted: str) -> None:  # noqa: F811
    """A FIFO would block a plain read forever and `/dev/zero` would fill memory: watch names the file and exits 1."""
    snapshot = copy_snapshot(snapshots.killed(), tmp_path)
    (snapshot / layout.PROGRESS).unlink()
    if planted == "fifo":
        os.mkfifo(snapshot / layout.PROGRESS)
    else:
        os.symlink("/dev/zero", snapshot / layout.PROGRESS)
    done = run_cli_forked("watch", snapshot, "--interval", "0.05", timeout=PROCESS_TIMEOUT_S)  # a hang fails here, bounded
    assert done.returncode == 1, done.stderr
    what = "is a FIFO, not a regular file" if planted == "fifo" else "is a symbolic link (to '/dev/zero')"
    assert f"{layout.PROGRESS}: {what}" in done.stderr and "a snapshot holds regular files only" in done.stderr


def test_watch_refuses_a_50_gb_sparse_progress_stream_without_reading_it(snapshots, tmp_path: Path) -> None:  # noqa: F811
    snapshot = copy_snapshot(snapshots.killed(), tmp_path)
    (snapshot / layout.PROGRESS).chmod(0o644)
    os.truncate(snapshot / layout.PROGRESS, 50 << 30)  # sparse: no disk used
    done = run_cli_forked("watch", snapshot, "--interval", "0.05", timeout=PROCESS_TIMEOUT_S,
                          limits={"address_space_headroom": 2 << 30})  # a whole read dies at the limit instead of the machine
    assert done.returncode == 1, done.stderr
    assert f"{layout.PROGRESS}: is {50 << 30:,} bytes, more than the" in done.stderr, done.stderr


def test_watch_on_a_sealed_snapshot_returns_the_runs_exit_code(snapshots, capsys) -> None:  # noqa: F811
    assert main(["watch", str(snapshots.get("exception"))]) == 1
    assert "sealed: failed (exit 1)" in capsys.readouterr().out
    assert main(["watch", str(snapshots.get("eos")), "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["stop_reasons"] == ["eos"]


def test_watch_on_a_plan_nobody_executes_says_so_and_exits_5(snapshots, capsys) -> None:  # noqa: F811
    """No progress stream and no process holding the execution lock: not "waiting forever"."""
    from genrun.analysis.watch import NOT_EXECUTING_EXIT

    planned = snapshots.planned_only()
    assert main(["watch", str(planned), "--stall-after", "0.3", "--interval", "0.05"]) == NOT_EXECUTING_EXIT == 5
    out = capsys.readouterr().out
    assert "planned, not executing: no process holds its execution lock" in out and f"genrun execute {planned}" in out


def test_watch_says_at_once_that_nobody_executes_the_plan(snapshots) -> None:  # noqa: F811
    """It said nothing about it for --stall-after (3 x every_seconds, 90 s by default) (issue 41, item 11)."""
    from genrun.analysis.watch import ProgressTail, assess

    planned = snapshots.planned_only()
    update = assess(planned, ProgressTail(planned), stall_after=90.0, waited_s=0.0)
    assert update.state == "waiting" and update.exit_code is None
    assert update.message == (f"waiting: no process is executing this plan yet (start it with 'genrun execute {planned}'); "
                              "watch gives up if none has after 90 s")


def test_a_plan_being_executed_is_not_called_abandoned(snapshots, tmp_path: Path) -> None:  # noqa: F811
    """While a process holds the executor's lock (as `genrun execute` does while weights load), watch keeps waiting."""
    from genrun.analysis.watch import ProgressTail, assess, execution_lock_held
    from genrun.runner.execute import execution_lock

    planned = copy_snapshot(snapshots.planned_only(), tmp_path)
    assert execution_lock_held(planned) is False
    with execution_lock(planned):
        assert execution_lock_held(planned) is True
        update = assess(planned, ProgressTail(planned), stall_after=0.1, waited_s=5.0)
        assert update.state == "waiting" and update.exit_code is None
    assert assess(planned, ProgressTail(planned), stall_after=0.1, waited_s=5.0).state == "not_executing"


def test_a_watchers_ctrl_c_is_the_watchers(snapshots, tmp_path: Path) -> None:  # noqa: F811
    """SIGINT to `watch` stops the watcher with its own message, never the planner's "no run was executed"."""
    snapshot = copy_snapshot(snapshots.killed(), tmp_path)
    with _executing(snapshot):  # a live executor: the watcher stays in its loop
        watcher = subprocess.Popen([sys.executable, "-m", "genrun.runner.cli", "watch", str(snapshot), "--stall-after", "3600",
                                    "--interval", "0.05"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = watcher.stdout.readline()  # the first update: the watcher is in its loop
        assert first, watcher.stderr.read()
        watcher.send_signal(signal.SIGINT)
        out, err = watcher.communicate(timeout=PROCESS_TIMEOUT_S)
    assert watcher.returncode == 130, err
    assert "stopped watching (SIGINT); the run itself is not affected" in err and "no run was executed" not in err


def test_watch_never_imports_torch(snapshots) -> None:  # noqa: F811
    probe = (f"import sys; from genrun.runner.cli import main; code = main(['watch', {str(snapshots.get('eos'))!r}]); "
             "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch imported'; sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("argv, message, code", [  # 2: a usage error, found before the snapshot is read
    (["{tmp}"], "is not a genrun snapshot", 1),
    (["{snapshot}", "--interval", "0"], "--interval 0 must be a positive number", 2),
    (["{snapshot}", "--stall-after", "-1"], "--stall-after -1 must be a positive number", 2),
])
def test_refusals(snapshots, tmp_path: Path, capsys, argv, message, code) -> None:  # noqa: F811
    values = {"tmp": str(tmp_path), "snapshot": str(snapshots.get("eos"))}
    assert main(["watch", *(a.format(**values) for a in argv)]) == code
    assert message in capsys.readouterr().err


# -- the ETA ------------------------------------------------------------------------------------------------------


def _events(seconds_per_unit) -> list:
    """A start record and progress records every 100 units, each unit taking `seconds_per_unit(n)`."""
    events = [StartEvent(seq=0, t=0.0, generated=0, wall_time="2026-12-01T00:00:00+00:00", unit="token", planned_units=1000, rows=1),
              FirstTokenEvent(seq=1, t=0.0, generated=0)]
    t = 0.0
    for n in range(100, 600, 100):
        t += sum(seconds_per_unit(k) for k in range(n - 100, n))
        events.append(ProgressEvent(seq=len(events), t=t, generated=n, units_per_s=n / t, window_units_per_s=100 / (t - events[-1].t)))
    return events


def test_eta_follows_the_recent_pace_and_its_growth() -> None:
    constant = estimate_eta(_events(lambda n: 0.01), 1000, "token")
    assert constant.seconds == pytest.approx(500 * 0.01, rel=1e-6) and "recent windowed rate" in constant.basis
    growing = estimate_eta(_events(lambda n: 0.01 + 0.0001 * n), 1000, "token")
    exact = sum(0.01 + 0.0001 * n for n in range(500, 1000))
    assert growing.seconds == pytest.approx(exact, rel=0.01) and "growing with position" in growing.basis
    cumulative_guess = 500 / (500 / _events(lambda n: 0.01 + 0.0001 * n)[-1].t)
    assert cumulative_guess < 0.5 * exact  # the constant-rate ETA would have been badly optimistic
    assert estimate_eta(_events(lambda n: 0.01), None, "token").seconds is None


def test_human_line_names_rates_per_row_memory_and_eta() -> None:
    from genrun.runner.cli.watch import format_update

    update = WatchUpdate(snapshot_id="s", state="running", unit="token", generated=4096, planned_units=65536, rows=2, records=17,
                         last_event="progress", window_units_per_s=2.9, recent_units_per_s=2.94, cumulative_units_per_s=3.1,
                         rss_bytes=7 * 2**30, cuda_allocated_bytes=None, cuda_reserved_bytes=None, seconds_since_last_record=12.0,
                         eta_s=6 * 3600 + 12 * 60, eta_basis="recent windowed rate over the last 8 records", stall_after_s=90.0,
                         stalled=False, writer="alive")
    assert format_update(update) == ("running  4,096/65,536 tokens × 2 rows  window 2.9/s  recent 2.9/s  cum 3.1/s per row  "
                                     "RSS 7.00 GiB  last record 12 s ago  ETA 6 h 12 min")


def test_a_live_run_still_loading_is_waiting_not_stalled(snapshots, tmp_path: Path) -> None:  # noqa: F811
    """Before the start record (weights loading) the progress cadence does not apply: a live writer is 'loading', never STALL;
    once the writer is gone, the same silence is a stall."""
    snapshot = copy_snapshot(snapshots.killed(), tmp_path)
    (snapshot / layout.PROGRESS).write_bytes(b"")  # created, nothing recorded yet: the recorder is waiting for the weights
    tail = ProgressTail(snapshot)
    tail.poll()
    fd = os.open(snapshot / layout.PROGRESS, os.O_RDONLY)
    with _executing(snapshot):  # the executor lives through both assessments: only the writer goes
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # what the recorder holds while its run lives
            loading = assess(snapshot, tail, stall_after=1.0, waited_s=30.0)
        finally:
            os.close(fd)
        gone = assess(snapshot, tail, stall_after=1.0, waited_s=30.0)
    assert (loading.state, loading.stalled, loading.writer) == ("waiting", False, "alive"), loading
    assert loading.message.startswith("loading: no start record yet after 30 s") and "STALL" not in loading.message
    assert (gone.state, gone.stalled, gone.writer) == ("stalled", True, "gone") and "STALL" in gone.message, gone


def test_before_the_start_record_watch_names_the_planned_unit_and_claims_no_count(tmp_path: Path) -> None:
    """watch said "running  — tokens" before any start record, whatever the run counts (issue 41, item 11): the unit comes
    from the plan (this loop's budget counts frames) and, until the start record, the line is the message alone."""
    from genrun.runner.cli.watch import format_update

    planned = run_cli("plan", EXAMPLES / "tiny-song-loop.toml", "--store", tmp_path / "store", "--json")
    assert planned.returncode == 0, planned.stderr
    snapshot = Path(json.loads(planned.stdout)["snapshot"])
    (snapshot / layout.PROGRESS).write_bytes(b"")  # opened by the recorder, nothing recorded yet
    tail = ProgressTail(snapshot)
    tail.poll()
    fd = os.open(snapshot / layout.PROGRESS, os.O_RDONLY)
    with _executing(snapshot):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # the recorder's lock: its process lives
            early = assess(snapshot, tail, stall_after=60.0, waited_s=0.5)
            loading = assess(snapshot, tail, stall_after=1.0, waited_s=30.0)
        finally:
            os.close(fd)
        gone = assess(snapshot, tail, stall_after=1.0, waited_s=30.0)
    assert (early.state, loading.state, gone.state) == ("waiting", "waiting", "stalled")
    assert early.message.startswith("loading: no start record yet") and "STALL" in gone.message
    for update in (early, loading, gone):
        assert (update.unit, update.generated, update.planned_units) == ("frame", None, None), update
        line = format_update(update)
        assert line == update.message and "token" not in line, line
