"""Signals at the edges of a command: during interpreter shutdown (after the command's own output), and during an
analysis command, which says that it stopped, not what a stopped run would have kept."""

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from _analysis_helpers import copy_snapshot, run_genrun, snapshots  # noqa: F401
from conftest import PROCESS_TIMEOUT_S

LATE_SIGNAL_AT_EXIT = """
import atexit, os, signal, sys, time
from genrun.runner.cli import main
# registered first, so it runs last among the exit hooks (torch's and the others' run before it): the process is shutting down
atexit.register(lambda: (os.kill(os.getpid(), signal.{name}), time.sleep(5)))
sys.exit(main())
"""


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_signal_during_interpreter_shutdown_exits_with_the_commands_code(name: str, snapshots) -> None:  # noqa: F811
    """The console script's `sys.exit(main())`, with the signal sent from an exit hook: the command's code (0), not -15,
    and no 'Exception ignored in atexit callback ... KeyboardInterrupt'."""
    snapshot = snapshots.get("eos")
    done = subprocess.run([sys.executable, "-c", LATE_SIGNAL_AT_EXIT.format(name=name), "verify", str(snapshot)],
                          capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "checks:" in done.stdout and "Exception ignored" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr


def _signal_first(function: Callable[..., Any]) -> Callable[..., Any]:
    def with_signal(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)  # genrun's handler raises at the next line: the command is stopped mid-way
        return function(*args, **kwargs)
    return with_signal


@pytest.mark.parametrize("command", ["verify", "ls"])
def test_an_analysis_command_stopped_by_a_signal_says_that_it_stopped(command: str, snapshots, tmp_path: Path,  # noqa: F811
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import genrun.analysis
    import genrun.runner.listing

    snapshot = copy_snapshot(snapshots.get("eos"), tmp_path / "store")  # a new store: ls describes it from the files
    if command == "verify":
        monkeypatch.setattr(genrun.analysis, "verify_snapshot", _signal_first(genrun.analysis.verify_snapshot))
        done = run_genrun("verify", snapshot)
    else:
        monkeypatch.setattr(genrun.runner.listing, "describe", _signal_first(genrun.runner.listing.describe))
        done = run_genrun("ls", "--store", snapshot.parent)
    assert done.returncode == 143, done.stderr
    assert f"interrupted by SIGTERM: genrun {command} stopped before it finished" in done.stderr, done.stderr
    assert "no run was executed" not in done.stderr
