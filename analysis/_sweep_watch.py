"""`genrun watch SWEEP`: how many items have finished, until the sweep is sealed (read-only, no torch).

The driver appends one `ended` record per finished attempt to `sweep-progress.ndjson` and seals
the sweep with `sweep-result.json`; this reads only those two files.
"""

from pathlib import Path
from typing import NamedTuple

from genrun.schemas import layout
from genrun.schemas.sweep import SweepPlan, SweepResult
from genrun.snapshot_dir import SnapshotDir, read_sweep_progress

INTERRUPTED_EXIT = 130


class SweepUpdate(NamedTuple):
    """One look at a sweep: items finished so far, and the verdict once sealed."""

    items: int
    finished: int
    message: str
    exit_code: int | None
    """None while the sweep is unsealed; then the exit code `genrun sweep` returned (0 all succeeded, 1 not, 130 interrupted)."""


def assess_sweep(sweep: Path) -> SweepUpdate:
    files = SnapshotDir(sweep)
    items = len(files.read(layout.SWEEP_PLAN, SweepPlan).items)
    if (sweep / layout.MANIFEST).is_file():
        result = files.read(layout.SWEEP_RESULT, SweepResult)
        counts = ", ".join(f"{n} {status}" for status, n in sorted(result.counts.items()))
        if result.status == "interrupted":
            code = INTERRUPTED_EXIT
        else:
            code = 0 if result.counts.get("succeeded", 0) == items else 1
        return SweepUpdate(items, items, f"sweep sealed: {result.status}, {counts} (exit {code}); details: 'genrun verify {sweep}'", code)
    finished = _finished_items(files)
    return SweepUpdate(items, finished, f"sweep running: {finished}/{items} items finished", None)


def _finished_items(sweep: SnapshotDir) -> int:
    """Distinct items with an `ended` record whose status is final (a lost attempt may be retried). The log is read
    bounded and never through a link or FIFO (`ArtifactError` names it)."""
    attempts = read_sweep_progress(sweep).attempts  # a line being appended is not read yet
    return len({a.item for a in attempts if a.event == "ended" and a.status != "lost"})
