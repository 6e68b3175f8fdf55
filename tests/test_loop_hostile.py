"""Hostile loops (issue 42): threads left running, forked children that return into genrun, values the recorder cannot
write, and claims that contradict what genrun recorded itself. Each loop is a module beside its request, run by the
real CLI; verify is the real verify."""

import json
import re
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
    items = sorted(p for p in (tmp_path / "store").iterdir() if re.search(r"-strays-\d{4}-", p.name))  # not the sweep's own
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


# -- claims held against what genrun recorded itself ----------------------------------------------------------


def test_an_eos_claim_outside_the_declared_eos_set_fails_verify(tmp_path: Path) -> None:
    """The stop's own `eos_token_ids` used to replace the set the loop declared in rec.config: claiming [7] passed."""
    body = """\
    rec.config({"eos_token_ids": [2]})
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, [5, 6, 7])
        lm.stop(0, "eos", eos_token_id=7, eos_token_ids=[7])
"""
    done, snapshot = run(_loop(tmp_path, body), tmp_path / "store")
    assert done.returncode == 0 and snapshot is not None, done.stderr
    code, findings = verify(snapshot)
    assert code != 0 and findings["stages"]["status"] == "FAIL"
    assert "claims eos with the set [7], but the run declared eos_token_ids [2] in its call config" in findings["stages"]["message"]


LIAR = '''\
"""The counter backend, reporting a count its recorder never counted."""
import dataclasses

from genrun.examples import counter_backend


class LyingRun(counter_backend.CounterRun):
    def finish(self, end):
        return dataclasses.replace(super().finish(end), generated=1000)


class LyingBackend(counter_backend.CounterBackend):
    def start(self, ctx):
        return LyingRun(ctx)


def create_backend():
    return LyingBackend()
'''


def _installed_plugin(tmp_path: Path, module: str, source: str) -> dict[str, str]:
    """The environment of a process that discovers `module`'s `create_backend` (written from `source`) as a backend."""
    from test_backend_plugin import install_counter

    (tmp_path / "site").mkdir()
    (tmp_path / "site" / f"{module}.py").write_text(source)
    return install_counter(tmp_path / "site", target=f"{module}:create_backend")


def test_a_plugins_count_beyond_what_genrun_counted_fails_the_run_and_is_not_recorded(tmp_path: Path) -> None:
    from test_backend_plugin import findings_of, plan_and_execute

    snapshot, executed = plan_and_execute(tmp_path, _installed_plugin(tmp_path, "liar_backend", LIAR))
    assert executed.returncode == 1, executed.stderr
    result = json.loads(executed.stdout)
    assert (result["status"], result["generated"]) == ("failed", 4)  # the recorder's count, not the claim
    assert result["exception"]["type"].endswith("BackendContractError")
    assert "reported generated=1,000 steps, but genrun's recorder counted 4" in result["exception"]["message"]
    assert "1,000 steps" not in executed.stderr and "1000" not in json.dumps(result["units_per_s"])
    assert not [f for f in findings_of(snapshot).values() if f.status == "FAIL"]

    # A result.json that claims the count (written by a genrun without the check) fails verify, naming both counts.
    for path in (snapshot, snapshot / "result.json"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    (snapshot / "result.json").write_text(json.dumps({**result, "generated": 1000, "status": "succeeded", "exit_code": 0,
                                                       "exception": None}))
    (snapshot / "progress.ndjson").chmod(0o644)
    lines = (snapshot / "progress.ndjson").read_text().splitlines()
    last = json.loads(lines[-1])
    terminal = {k: last[k] for k in ("seq", "t", "generated", "rss_bytes")} | {"event": "end", "units_per_s": 1.0, "last_ids": []}
    (snapshot / "progress.ndjson").write_text("\n".join([*lines[:-1], json.dumps(terminal)]) + "\n")
    stream = findings_of(snapshot)["progress_stream"]
    assert stream.status == "FAIL" and "result.json says generated 1,000 steps, but genrun's recorder counted 4" in stream.message


# -- declared schemas: applied without backtracking, hostile ones refused at plan ----------------------------

LABELLED = '''\
"""The counter backend with a stop-evidence field constrained by a pattern that backtracks catastrophically in a
backtracking regex engine."""
from pydantic import Field

from genrun.examples import counter_backend


class Labelled(counter_backend.CountedAll):
    label: str = Field("a", pattern=r"^(a+)+$")


class LabelledBackend(counter_backend.CounterBackend):
    evidence = counter_backend.EvidenceDeclaration(
        kinds=("call_config", "stop_records"), stop_evidence=(Labelled, counter_backend.CountInterrupted, counter_backend.CountFailed),
        call_config_name=counter_backend.CALL_CONFIG, call_config_model=counter_backend.CounterCall)


def create_backend():
    return LabelledBackend()
'''


def test_a_declared_pattern_that_backtracks_catastrophically_is_checked_in_linear_time(tmp_path: Path) -> None:
    """With the `jsonschema` package, `verify` and `report --html` never finished on this value."""
    import subprocess

    from test_backend_plugin import genrun, plan_and_execute

    env = _installed_plugin(tmp_path, "labelled_backend", LABELLED)
    snapshot, executed = plan_and_execute(tmp_path, env)
    assert executed.returncode == 0, executed.stderr
    stop_file = snapshot / "generation-stop.json"
    for path in (snapshot, stop_file):
        path.chmod(0o755 if path.is_dir() else 0o644)
    stops = json.loads(stop_file.read_bytes())
    stops["sequences"][0]["evidence"]["label"] = "a" * 34 + "!"
    stop_file.write_text(json.dumps(stops))
    try:
        verified = genrun("verify", str(snapshot), "--json", env=env, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail("verify did not finish: the declared pattern backtracked")
    findings = {f["name"]: f for f in json.loads(verified.stdout)["findings"]}
    assert findings["stop_evidence"]["status"] == "FAIL", findings["stop_evidence"]
    assert "label" in findings["stop_evidence"]["message"] and "does not match" in findings["stop_evidence"]["message"]


HOSTILE_SCHEMA = '''\
"""The counter backend whose call-config model gives a schema verify cannot apply safely."""
import os

from genrun.examples import counter_backend


def _schema():
    if os.environ["HOSTILE_SCHEMA"] == "deep":
        schema = {"type": "object"}
        for _ in range(200):
            schema = {"type": "object", "properties": {"x": schema}}
        return schema
    return {"type": "object", "properties": {"start": {"type": "string", "pattern": "(a+)\\\\1"}}}


class HostileCall(counter_backend.CounterCall):
    @classmethod
    def model_json_schema(cls, *args, **kwargs):
        return _schema()


class HostileBackend(counter_backend.CounterBackend):
    evidence = counter_backend.EvidenceDeclaration(
        kinds=("call_config", "stop_records"), stop_evidence=counter_backend.CounterBackend.evidence.stop_evidence,
        call_config_name=counter_backend.CALL_CONFIG, call_config_model=HostileCall)


def create_backend():
    return HostileBackend()
'''


@pytest.mark.parametrize(("kind", "expected"), [
    ("deep", "levels deep; a declared schema may nest at most 64"),
    ("backreference", "cannot be applied: \"(a+)\\\\1\" is not a \"regex\""),
])
def test_a_declared_schema_verify_cannot_apply_safely_is_refused_at_plan(tmp_path: Path, kind: str, expected: str) -> None:
    from test_backend_plugin import counter_request, genrun

    env = _installed_plugin(tmp_path, "hostile_backend", HOSTILE_SCHEMA) | {"HOSTILE_SCHEMA": kind}
    planned = genrun("plan", str(counter_request(tmp_path)), "--store", str(tmp_path / "store"), env=env, cwd=tmp_path)
    assert planned.returncode == 2, planned.stderr
    assert "the 'counter' backend's declared evidence is refused: the call-config schema hostile_backend:HostileCall" in planned.stderr
    assert expected in planned.stderr and "Traceback" not in planned.stderr
    assert not (tmp_path / "store").exists() or not [p for p in (tmp_path / "store").iterdir() if not p.name.startswith(".")]


# -- smaller: consumption beyond the source, files nobody declares --------------------------------------------


def test_consuming_more_than_the_source_produced_fails_verify(tmp_path: Path) -> None:
    """Both counts are genrun's own (stages.json): reading 1,000 of 3 units is a contradiction, not a warning."""
    body = "".join(f"    {line}\n" for line in (
        'with rec.stage("ar", unit="token", rows=1) as ar:', '    ar.emit(0, [3, 4, 5])',
        'with rec.stage("decode", unit="window", rows=1, consumes="ar") as dec:', '    dec.advance(0, 1, consumed=1000)'))
    done, snapshot = run(_loop(tmp_path, body), tmp_path / "store")
    assert done.returncode == 0 and snapshot is not None, done.stderr
    code, findings = verify(snapshot)
    assert code != 0 and findings["stages"]["status"] == "FAIL", findings["stages"]
    assert "stage 'decode' consumed 1000 of the 3 'ar' units its source produced" in findings["stages"]["message"]


def test_a_file_neither_the_format_nor_the_backend_declares_is_named_by_verify(tmp_path: Path) -> None:
    body = """\
    (Path(os.readlink(rec.outputs_dir)).parent / "extra-evidence.bin").write_bytes(b"unchecked")
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, [5])
        lm.stop(0, "completed")
"""
    done, snapshot = run(_loop(tmp_path, body), tmp_path / "store")
    assert done.returncode == 0 and snapshot is not None, done.stderr
    _, findings = verify(snapshot)
    artifacts = findings["artifacts_valid"]
    assert artifacts["status"] == "WARN" and "neither genrun's format nor the 'loop' backend's declaration names" in artifacts["message"]
    assert "extra-evidence.bin" in artifacts["message"] and artifacts["evidence"]["undeclared"] == ["extra-evidence.bin"]


def test_a_store_inside_the_model_directory_is_refused_at_plan_naming_both(tmp_path: Path) -> None:
    """`[model] path = "."` with the default `./snapshots` beside the request: every snapshot changed the model's files, and
    every execute refused with "model files changed since planning", for ever."""
    request = _loop(tmp_path, "    pass\n")
    request.write_text(request.read_text().replace('path = "model"', 'path = "."'))
    planned = run_cli("plan", request, cwd=tmp_path)
    assert planned.returncode == 2, planned.stderr
    assert f"the store {tmp_path / 'snapshots'} is inside the model directory {tmp_path} ([model] path)" in planned.stderr
    assert not (tmp_path / "snapshots").exists()
    elsewhere = run_cli("run", request, "--store", tmp_path.parent / f"{tmp_path.name}-store", cwd=tmp_path)
    assert elsewhere.returncode == 0, elsewhere.stderr


# -- an executor that is gone: ls and verify say so, from the execution lock ----------------------------------


@pytest.mark.parametrize(("action", "exit_code"), [
    pytest.param("os._exit(0)", 0, id="os-exit"),  # the process ends there: nothing of genrun's can change its exit code
    pytest.param("os.closerange(3, 4096)", 1, id="closed-descriptors"),
])
def test_a_loop_that_kills_its_executor_leaves_a_snapshot_called_incomplete(tmp_path: Path, action: str, exit_code: int) -> None:
    """Such a snapshot stayed `running` for ever in ls; closing genrun's descriptors also ended in an execution_lock
    traceback. A subprocess: the loop takes its process down with it."""
    from _forked import run_cli_forked
    from conftest import PROCESS_TIMEOUT_S, run_cli_subprocess
    from genrun.analysis.watch import INCOMPLETE_EXIT

    body = f"""\
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, [5, 6])
        {action}
        lm.emit(0, [7])
        lm.stop(0, "completed")
"""
    store = tmp_path / "store"
    done = run_cli_subprocess("run", _loop(tmp_path, body), "--store", store)
    assert done.returncode == exit_code, done.stderr
    assert "Traceback" not in done.stderr
    if exit_code:
        assert "the snapshot is left unsealed (incomplete)" in done.stderr
    (snapshot,) = [p for p in store.iterdir() if not p.name.startswith(".")]
    listed = run_cli("ls", "--store", store, "--json")
    assert [row["state"] for row in json.loads(listed.stdout)["snapshots"]] == ["incomplete"], listed.stdout
    # watch says so at once, not after --stall-after (an hour here); a watch that waited is stopped by the timeout
    watched = run_cli_forked("watch", snapshot, "--json", "--stall-after", "3600", "--interval", "0.05", timeout=PROCESS_TIMEOUT_S)
    assert watched.returncode == INCOMPLETE_EXIT, watched.stderr
    assert "no process holds its execution lock" in json.loads(watched.stdout.splitlines()[-1])["message"]
    _, findings = verify(snapshot)
    completeness = findings["completeness"]
    assert completeness["status"] == "FAIL" and "no process holds its execution lock: the executor is gone" in completeness["message"]
