"""Concurrent `execute`s of one plan: one runs, the others are refused naming the running one's PID."""

import signal
import time
from pathlib import Path

from _forked import spawn_cli
from conftest import PROCESS_TIMEOUT_S, run_cli

from _lm_helpers import FixtureModels, plan, request_text
from genrun.schemas import layout


def test_second_execute_is_refused_naming_the_running_pid(tmp_path: Path, fixture_models: FixtureModels) -> None:
    text = request_text(fixture_models.get("random-no-eos"), name="lock", generation={"max_new_tokens": 6000}, progress={"every_units": 1})
    snapshot = plan(tmp_path, text, store=tmp_path / "store")
    first = spawn_cli("execute", snapshot)
    try:
        deadline = time.monotonic() + PROCESS_TIMEOUT_S
        progress = snapshot / layout.PROGRESS
        while not (progress.is_file() and b'"event":"progress"' in progress.read_bytes()):
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read() if first.stderr else ""
            time.sleep(0.02)
        second = run_cli("execute", snapshot)
        assert second.returncode == 1, second.stderr
        assert f"already being executed by PID {first.pid}" in second.stderr, second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=PROCESS_TIMEOUT_S)
    assert first.returncode == 143
