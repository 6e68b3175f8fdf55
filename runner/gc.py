"""`genrun gc`: find (and, when asked, remove) the `.tmp-*` planning directories a killed planner left in a store.

Only `.tmp-*` directories are ever considered, and only those no live planner holds (the planner's
`flock`, `store.planning_holder`). Sealed snapshots are never touched, nor is a planned one, except
the items of a sweep whose planner was killed before the sweep existed: its abandoned directory
lists them (`sweep.store.planning_journal`), and those still planned that no sweep lists are removed
with it (a sweep is planned whole or not at all).
"""

import os
import shutil
import stat
from pathlib import Path
from typing import NamedTuple

from genrun.schemas import layout

from .errors import GenrunError, StoreError
from .store import is_sealed, list_unfinished_plans, planning_holder, remove_abandoned_plan


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
        orphans = _orphaned_items(store, path) if leftover.holder is None else []
        if leftover.holder is None and remove:
            try:
                for orphan in orphans:
                    shutil.rmtree(orphan.path)
                done = remove_abandoned_plan(path)
            except OSError as exc:
                raise StoreError(f"cannot remove the abandoned planning directory {path} ({exc.strerror or exc}); "
                                 "check its permissions, or remove it by hand") from exc
            leftover = leftover if done else leftover._replace(holder="a planner that started meanwhile")
        (removed if leftover.holder is None else live).append(leftover)
        if leftover.holder is None:
            removed.extend(orphans)
    return GcReport(store, tuple(removed), tuple(live), dry_run=not remove)


def _orphaned_items(store: Path, planning: Path) -> list[LeftoverPlan]:
    """The item snapshots an abandoned sweep planner's journal lists (by inode and name) that are still planned (never
    executed, not sealed) and that no sweep of the store lists (the planner may have been killed after making it)."""
    from genrun.analysis._sweep_unlisted import item_name

    from .sweep.store import PLANNING_JOURNAL, is_sweep, open_sweep

    try:
        lines = (planning / PLANNING_JOURNAL).read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        return []
    begun = {int(inode): name for inode, _, name in (line.partition(" ") for line in lines) if inode.isdigit()}
    candidates = []
    for entry in store.iterdir() if begun else ():
        try:
            info = entry.lstat()
        except OSError:
            continue
        name = begun.get(info.st_ino)
        if (name is not None and stat.S_ISDIR(info.st_mode) and item_name(entry.name) == name
                and not (entry / layout.PROGRESS).exists() and not is_sealed(entry)):
            candidates.append(entry)
    if not candidates:
        return []
    in_sweeps: set[str] = set()
    for entry in store.iterdir():
        if not entry.name.startswith(layout.PLANNING_PREFIX) and is_sweep(entry):
            try:
                in_sweeps |= {item.snapshot_id for item in open_sweep(entry)[1].items}
            except GenrunError:  # a damaged sweep: keep every candidate rather than guess
                return []
    return [LeftoverPlan(path, _tree_bytes(path), None) for path in candidates if path.name not in in_sweeps]


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
