"""Ctrl-C outside the run's own signal handling: exit 130 with a sentence saying what was kept, never a traceback.

`execute_snapshot` records a signal that lands while the model runs (an `interrupted`, sealed
snapshot). A signal before that (re-verifying the plan, just after `planned ...`) reaches the
command as `RunInterrupted` (genrun's handlers, installed by `main`) or `KeyboardInterrupt`; the
commands catch it here and say where the plan is.
"""

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
