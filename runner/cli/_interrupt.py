"""Ctrl-C outside the run's own signal handling: exit 130 with a sentence saying what was kept, never a traceback.

`execute_snapshot` records a signal that lands while the model runs (an `interrupted`, sealed
snapshot). A signal before that (re-verifying the plan, just after `planned ...`) reaches the
command as `RunInterrupted` (genrun's handlers, installed by `main`) or `KeyboardInterrupt`; the
commands catch it here and say where the plan is.
"""

import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from genrun.runner.interrupts import EXIT_CODES
from genrun.schemas import layout

from ._output import print_error

SIGINT_EXIT = 130  # 128 + SIGINT, as for an interrupted run


def report_interrupt(snapshot: Path | None, signal_name: str = "SIGINT") -> int:
    """Say what the signal left behind; returns the exit code (130 for SIGINT, 143 for SIGTERM)."""
    if snapshot is None:
        print_error(f"interrupted by {signal_name} before a snapshot was made; nothing was written")
    elif not any((snapshot / name).exists() for name in (layout.PROGRESS, layout.RESULT, layout.MANIFEST)):
        print_error(f"interrupted before execution; the plan is kept at {snapshot} (genrun execute {snapshot})")
    else:
        print_error(f"interrupted as execution started; {snapshot} holds what was written (genrun verify {snapshot})")
    return EXIT_CODES.get(signal_name, SIGINT_EXIT)


SNAPSHOT_MAKERS = frozenset({"run", "plan", "execute", "sweep", "rerun"})
"""Commands that plan or run snapshots: a signal there is about what the plan kept."""


def stopped_message(command: str | None, signal_name: str) -> str:
    """What a command stopped by a signal outside its own handling says: a snapshot maker, where its plan stands;
    any other command (verify, report, ls, ...), that it stopped."""
    if command in SNAPSHOT_MAKERS or command is None:
        return (f"interrupted by {signal_name}: no run was executed "
                "(a plan frozen before the signal is intact, an unfinished one was removed)")
    return f"interrupted by {signal_name}: genrun {command} stopped before it finished"


def exit_with_on_late_signal(code: Callable[[], int | None]) -> None:
    """From now until the process ends, SIGINT/SIGTERM end it at once with `code()`: the command's own exit code once it
    returned (before that, 128 + the signal's number). A signal during interpreter shutdown (exit hooks such as torch's) is then neither a death by SIGTERM (-15)
    nor a KeyboardInterrupt printed from an exit hook. genrun's gate replaces these handlers while a command runs."""
    if threading.current_thread() is not threading.main_thread():
        return

    def finish(signum: int, frame: object) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed or broken stream must not change the exit code
                pass
        returned = code()
        os._exit(128 + signum if returned is None else returned)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, finish)
