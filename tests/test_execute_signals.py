"""SIGINT and SIGTERM during generation: real signals to a real `genrun` process.

The model is a random Llama without EOS asked for 6,000 tokens, so it is still generating when
the signal arrives (sent as soon as `progress.ndjson` shows a `progress` record).
"""

import signal
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from _forked import ForkedProcess, spawn_cli
from conftest import PROCESS_TIMEOUT_S, run_cli

from _lm_helpers import FixtureModels, assert_counts_agree, read_ids, read_json, read_progress, request_text
from genrun.runner.store import is_sealed

MAX_NEW = 6000


@pytest.fixture(scope="module")
def endless(fixture_models: FixtureModels) -> Path:
    return fixture_models.get("random-no-eos")


def _snapshot_in(store: Path) -> Path | None:
    found = [p for p in store.iterdir() if not p.name.startswith(".")] if store.is_dir() else []
    return found[0] if found else None


def _wait_for_progress(store: Path, proc: ForkedProcess, timeout: float = PROCESS_TIMEOUT_S) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        snapshot = _snapshot_in(store)
        progress = snapshot / "progress.ndjson" if snapshot else None
        if progress is not None and progress.is_file() and b'"event":"progress"' in progress.read_bytes():
            return snapshot
        if proc.poll() is not None:
            raise AssertionError(f"genrun exited early ({proc.returncode}): {proc.stderr.read()}")
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("no progress record appeared")


def _interrupt(args: list[str], store: Path, sig: signal.Signals) -> tuple[subprocess.CompletedProcess, Path]:
    proc = spawn_cli(*args)
    snapshot = _wait_for_progress(store, proc)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=PROCESS_TIMEOUT_S)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), snapshot


def _assert_interrupted(snapshot: Path, name: str, code: int) -> None:
    assert is_sealed(snapshot)
    result = read_json(snapshot, "result.json")
    assert (result["status"], result["exit_code"], result["signal"]) == ("interrupted", code, name)
    (stop,) = read_json(snapshot, "generation-stop.json")["sequences"]
    evidence = stop["evidence"]
    assert stop["reason"] == "interrupted" and (evidence["reason"], evidence["signal"]) == ("interrupted", name) and "steps" not in evidence
    ids = read_ids(snapshot)["sequence_0"]
    assert 0 < len(ids) < MAX_NEW  # partial ids kept
    assert evidence["last_token_id"] == int(ids[-1])  # the language-model facts of the partial row
    events = read_progress(snapshot)
    assert events[-1]["event"] == "interrupted" and events[-1]["signal"] == name
    assert_counts_agree(snapshot)


def test_sigint_during_genrun_run(tmp_path: Path, endless: Path) -> None:
    request = tmp_path / "endless.toml"
    request.write_text(request_text(endless, name="endless", generation={"max_new_tokens": MAX_NEW}, progress={"every_units": 1}))
    store = tmp_path / "store"
    proc, snapshot = _interrupt(["run", str(request), "--store", str(store), "--json"], store, signal.SIGINT)
    assert proc.returncode == 130, proc.stderr
    assert orjson.loads(proc.stdout)["result"]["status"] == "interrupted"  # --json still prints one document
    _assert_interrupted(snapshot, "SIGINT", 130)


def test_sigterm_during_genrun_execute(tmp_path: Path, endless: Path) -> None:
    request = tmp_path / "endless.toml"
    request.write_text(request_text(endless, name="endless", generation={"max_new_tokens": MAX_NEW}, progress={"every_units": 1}))
    store = tmp_path / "store"
    planned = run_cli("plan", request, "--store", store, "--json")
    assert planned.returncode == 0, planned.stderr
    snapshot_path = orjson.loads(planned.stdout)["snapshot"]
    proc, snapshot = _interrupt(["execute", snapshot_path], store, signal.SIGTERM)
    assert proc.returncode == 143, proc.stderr
    assert "interrupted" in proc.stderr and "SIGTERM" in proc.stderr
    _assert_interrupted(snapshot, "SIGTERM", 143)


def test_gate_raises_once_defers_in_critical_sections_and_restores_handlers() -> None:
    """Real signals to this process: the first raises, later ones are counted, handlers come back."""
    import os

    from genrun.runner import interrupts

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with interrupts.interrupt_gate():
        with pytest.raises(interrupts.RunInterrupted) as caught:
            with interrupts.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)  # delivered here, held until the block ends
                reached_end_of_block = True
        assert reached_end_of_block and caught.value.signal_name == "SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)  # after the first: counted, not raised
        time.sleep(0.05)
        assert interrupts.first_signal() == "SIGTERM" and interrupts.later_signals() == ("SIGINT",)
    assert {s: signal.getsignal(s) for s in before} == before
