"""`genrun gc`: find (and, when asked, remove) the `.tmp-*` planning directories a killed planner left in a store.

Only `.tmp-*` directories are ever considered, and only those no live planner holds (the planner's
`flock`, `store.planning_holder`): planned and sealed snapshots are never touched.
"""

import os
from pathlib import Path
from typing import NamedTuple

from .errors import StoreError
from .store import list_unfinished_plans, planning_holder, remove_abandoned_plan


class LeftoverPlan(NamedTuple):
    """One `.tmp-*` directory in the store."""

    path: Path
    bytes: int
    """Sum of the sizes of the files in it (links not followed)."""
    holder: str | None
    """`PID n` of the live planner freezing it; `None` when abandoned."""


class GcReport(NamedTuple):
    """What `collect_abandoned_plans` found and did."""

    store: Path
    removed: tuple[LeftoverPlan, ...]
    """Abandoned directories removed (a dry run: the ones that would be)."""
    live: tuple[LeftoverPlan, ...]
    """Directories of planners still running: left alone."""
    dry_run: bool

    @property
    def removed_bytes(self) -> int:
        """Bytes freed (or that would be)."""
        return sum(p.bytes for p in self.removed)


def collect_abandoned_plans(store: Path, *, remove: bool) -> GcReport:
    """Every `.tmp-*` directory of `store`: abandoned ones are removed when `remove` (else only listed); live ones are kept.

    A planner that takes a directory's lock after it was listed keeps it: removal happens only under the lock.
    """
    removed: list[LeftoverPlan] = []
    live: list[LeftoverPlan] = []
    for path in list_unfinished_plans(store):
        leftover = LeftoverPlan(path, _tree_bytes(path), planning_holder(path))
        if leftover.holder is None and remove:
            try:
                done = remove_abandoned_plan(path)
            except OSError as exc:
                raise StoreError(f"cannot remove the abandoned planning directory {path} ({exc.strerror or exc}); "
                                 "check its permissions, or remove it by hand") from exc
            leftover = leftover if done else leftover._replace(holder="a planner that started meanwhile")
        (removed if leftover.holder is None else live).append(leftover)
    return GcReport(store, tuple(removed), tuple(live), dry_run=not remove)


def _tree_bytes(root: Path) -> int:
    """Sizes of the regular files under `root`, without following links."""
    total = 0
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass  # removed meanwhile
    return total
