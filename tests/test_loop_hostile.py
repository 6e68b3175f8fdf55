"""Hostile loops (issue 42): threads left running, forked children that return into genrun, values the recorder cannot
write, and claims that contradict what genrun recorded itself. Each loop is a module beside its request, run by the
real CLI; verify is the real verify."""

import json
import textwrap
import threading
from pathlib import Path

import pytest

from _loop_helpers import read, run, verify, write_loop
from conftest import run_cli

HEADER = "import os, threading, time\nfrom pathlib import Path\n"


def _loop(tmp_path: Path, body: str, **kw: str) -> Path:
    return write_loop(tmp_path, HEADER + "def generate(model_dir, inputs, generation, rec, **kwargs):\n" + body, **kw)


def _no_fail(snapshot: Path) -> None:
    code, findings = verify(snapshot)
    failed = {n: f["message"] for n, f in findings.items() if f["status"] == "FAIL"}
    assert code == 0 and not failed, failed


# -- a thread the loop leaves running -------------------------------------------------------------------------


def test_a_loop_that_returns_with_its_thread_running_fails_naming_the_thread(tmp_path: Path) -> None:
    release = tmp_path / "release"
    body = f"""\
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, [5, 6])
        lm.stop(0, "completed")

    def late():
        while not Path({str(release)!r}).exists():
            time.sleep(0.01)
    threading.Thread(target=late, name="late-writer").start()
"""
    try:
        done, snapshot = run(_loop(tmp_path, body), tmp_path / "store")
    finally:
        release.touch()
        for thread in threading.enumerate():
            if thread.name == "late-writer":
                thread.join()
    assert done.returncode == 1 and snapshot is not None, done.stderr
    exception = read(snapshot, "result.json")["exception"]
    assert exception["type"].endswith("RecorderMisuse") and "thread(s) it started still run ('late-writer')" in exception["message"]
    assert read(snapshot, "stage-ids.json")["ids"] == {"lm": [[5, 6]]}  # what was recorded is written
    _no_fail(snapshot)  # the rows ended, then the run failed: the evidence says so


SWEEP_LOOP = '''\
import threading, time
from pathlib import Path


def generate(model_dir, inputs, generation, rec, item, marks):
    marks = Path(marks)
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, [5, 6])
        lm.stop(0, "completed")
    outputs = rec.outputs_dir
    if item == 0:  # a thread that writes "its" outputs once the next item runs
        def stray():
            while not (marks / "item-1-runs").exists():
                time.sleep(0.01)
            try:
                (outputs / "planted.txt").write_text("written by item 0's thread")
                outcome = "written"
            except OSError as exc:
                outcome = type(exc).__name__
            (marks / "stray-done").write_text(outcome)
        threading.Thread(target=stray, name="stray").start()
    else:
        (marks / "item-1-runs").write_text("")
        while not (marks / "stray-done").exists():
            time.sleep(0.01)
'''


def test_a_sweep_items_leftover_thread_never_writes_into_the_next_items_outputs(tmp_path: Path) -> None:
    """Item 0's thread keeps item 0's outputs path (`/proc/self/fd/N`); item 1 runs in the same worker and used to get
    the same descriptor number, so the thread's file landed in item 1's outputs, listed, hashed and passing verify."""
    marks = tmp_path / "marks"
    marks.mkdir()
    request = write_loop(tmp_path, SWEEP_LOOP, kwargs=f'{{ item = 0, marks = "{marks}" }}')
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(textwrap.dedent(f"""\
        [sweep]
        name = "strays"
        request = "{request.name}"
        [sweep.grid]
        "loop.kwargs.item" = [0, 1]
        [sweep.executor]
        kind = "local"
        workers = 1
        """))
    done = run_cli("sweep", sweep, "--store", tmp_path / "store", "--json")
    assert done.returncode == 1, done.stderr  # item 0 failed
    items = sorted(p for p in (tmp_path / "store").iterdir() if "-strays-0" in p.name)
    first, second = (read(p, "result.json") for p in items)
    assert first["status"] == "failed" and "('stray')" in first["exception"]["message"]
    assert (marks / "stray-done").read_text() == "FileNotFoundError"  # its path reaches a removed directory now
    assert second["status"] == "succeeded" and second["outputs"] == []
    assert list((items[1] / "outputs").iterdir()) == []
    _no_fail(items[1])


# -- a forked child that returns into genrun ------------------------------------------------------------------


def test_a_forked_child_returning_into_genrun_exits_untouched_and_fails_the_run(tmp_path: Path) -> None:
    status = tmp_path / "child-exit"
    body = f"""\
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, [5, 6])
        child = os.fork()
        if child == 0:
            return  # the child returns into genrun, which would write the evidence and seal a second time
        Path({str(status)!r}).write_text(str(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])))
        lm.emit(0, [7])
        lm.stop(0, "completed")
"""
    done, snapshot = run(_loop(tmp_path, body), tmp_path / "store")
    assert done.returncode == 1 and snapshot is not None, done.stderr
    assert status.read_text() == "70"  # the child ended in genrun's guard, before any write
    result = read(snapshot, "result.json")
    assert result["exception"]["type"].endswith("ForkedChildReturned") and "os._exit()" in result["exception"]["message"]
    assert read(snapshot, "stage-ids.json")["ids"] == {"lm": [[5, 6, 7]]}
    events = [json.loads(line) for line in (snapshot / "stage-progress.ndjson").read_text().splitlines()]
    assert [e["seq"] for e in events] == list(range(len(events)))  # one writer: no record of the child's
    _no_fail(snapshot)


# -- values the recorder cannot write are refused at the call -------------------------------------------------


@pytest.mark.parametrize(("call", "expected"), [
    pytest.param("lm.emit(0, [2**70])", "emit(row 0, ...): id 1180591620717411303424 is outside 0..2**63-1", id="id-beyond-int64"),
    pytest.param("lm.emit(0, [-3])", "emit(row 0, ...): id -3 is outside 0..2**63-1", id="negative-id"),
    pytest.param('lm.emit(0, b"hello")', "emit(row 0, b'hello'): a bytes is text or bytes, not ids", id="bytes"),
    pytest.param("dec.consume(2.5)", "stage 'dec': consume(2.5): n is a whole number of 'lm' units read", id="fractional-consume"),
    pytest.param("dec.consume(10**30)", "consume(1000000000000000000000000000000): n is a whole number", id="huge-consume"),
    pytest.param("dec.consume(-100)", "consume(-100): n is a whole number of 'lm' units read, >= 0", id="negative-consume"),
    pytest.param('lm.stop(0, "max_time", limit_s=float("nan"))', "evidence must be finite numbers: limit_s is NaN", id="nan-evidence"),
    pytest.param('lm.stop(0, "budget", spent=[1.0, float("inf")])', "spent.1 is NaN or infinite", id="inf-in-a-list"),
    pytest.param('lm.stop(0, "eos", eos_token_id="two")', "the evidence does not fit its stop record: eos_token_id", id="eos-id-a-string"),
    pytest.param('lm.stop(0, "max_new_tokens", limit=2**70)', "must be JSON values", id="limit-beyond-int64"),
])
def test_what_the_recorder_cannot_write_is_refused_at_the_call_and_the_rest_is_written(tmp_path: Path, call: str, expected: str) -> None:
    """These used to be accepted and fail the write at finish (stage-ids.json, stages.json and the stop record lost, and
    genrun's own verify failing the snapshot), or be kept as something else (bytes as ids 104, 101, ...)."""
    stage, _, rest = call.partition(".")
    body = """\
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, [5, 6])
"""
    if stage == "lm":
        body += f"        {call}\n"
    else:
        body += """\
        lm.stop(0, "completed")
    with rec.stage("dec", unit="window", rows=1, consumes="lm") as dec:
        dec.advance(0, 1, consumed=1)
""" + f"        {call}\n"
    done, snapshot = run(_loop(tmp_path, body), tmp_path / "store")
    assert done.returncode == 1 and snapshot is not None, done.stderr
    exception = read(snapshot, "result.json")["exception"]
    assert exception["type"].endswith("RecorderMisuse") and expected in exception["message"], exception["message"]
    assert read(snapshot, "stage-ids.json")["ids"]["lm"] == [[5, 6]]  # what was recorded before the refusal is written
    assert read(snapshot, "generation-stop.json")["sequences"][0]["evidence"]["stage"] == "lm"
    _no_fail(snapshot)


def test_a_non_finite_config_value_or_rate_is_refused_at_the_call(tmp_path: Path) -> None:
    for call, expected in (('rec.config({"temperature": float("nan")})', "rec.config(...): values must be finite numbers: temperature"),
                           ('rec.stage("ar", unit="frame", per_second=float("inf"), rows=1)', "per_second=inf must be a positive number")):
        case = tmp_path / call[:10].replace(".", "_").replace("(", "")
        case.mkdir()
        done, snapshot = run(_loop(case, f"    {call}\n"), case / "store")
        assert done.returncode == 1 and snapshot is not None, done.stderr
        assert expected in read(snapshot, "result.json")["exception"]["message"]
