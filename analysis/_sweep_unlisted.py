"""Attempts of a sweep's items that the sweep's record does not list: a snapshot in the store with an item's name and
plan digest that ran, although the sweep never recorded it as an attempt (a worker that outlived its driver, a second
driver, a copy executed by hand). `verify SWEEP` FAILs on each, since the record no longer says how often the item ran.

Cheap on a large store: names are compared first (ids are `<time>-<name>-<hex>`), plans digested only for those that
match, and other sweeps' files read only when a candidate is found (a second sweep of the same file in the same store
plans items with the same names and digests: those are its own, not this one's).
"""

from pathlib import Path


from genrun.schemas import layout
from genrun.schemas.digests import sha256_file
from genrun.schemas.sweep import SweepPlan, SweepResult
from genrun.snapshot_dir import ArtifactError, SnapshotDir, read_sweep_progress


def item_name(snapshot_id: str) -> str:
    """The request name inside a snapshot id (`20260101T000000Z-sw-0003-a1b2c3` -> `sw-0003`)."""
    parts = snapshot_id.split("-", 1)
    return parts[1].rsplit("-", 1)[0] if len(parts) == 2 else snapshot_id


def unlisted_attempts(root: Path, plan: SweepPlan, result: SweepResult, store: Path) -> list[str]:
    """One line per snapshot that ran one of this sweep's item plans outside its record."""
    listed = {sid for outcome in result.items for sid in outcome.attempts} | {item.snapshot_id for item in plan.items}
    by_name = {item_name(item.snapshot_id): item for item in plan.items}
    try:
        entries = [e for e in store.iterdir() if not e.name.startswith(".") and e.name not in listed and item_name(e.name) in by_name]
    except OSError:
        return []
    candidates = []
    for entry in entries:
        item = by_name[item_name(entry.name)]
        frozen = entry / layout.FROZEN_MANIFEST
        if frozen.is_file() and not frozen.is_symlink() and sha256_file(frozen) == item.plan_digest and (entry / layout.PROGRESS).exists():
            candidates.append((item.index, entry))
    if not candidates:
        return []
    others = _listed_by_other_sweeps(store, root.name)
    lines = []
    for index, entry in candidates:
        if entry.name in others:
            continue
        state = "sealed" if (entry / layout.MANIFEST).is_file() else "not sealed"
        lines.append(f"item {index}: snapshot {entry.name} ran its plan ({state}) but is not among the attempts the sweep records")
    return lines


def _listed_by_other_sweeps(store: Path, own: str) -> set[str]:
    """Every snapshot another sweep of the store plans or logged as started (a damaged one lists what can be read)."""
    listed: set[str] = set()
    for entry in store.iterdir():
        if entry.name == own or not (entry / layout.SWEEP_PLAN).is_file():
            continue
        files = SnapshotDir(entry)
        try:
            listed |= {item.snapshot_id for item in files.read(layout.SWEEP_PLAN, SweepPlan).items}
            listed |= {attempt.snapshot_id for attempt in read_sweep_progress(files).attempts}
        except ArtifactError:
            continue
    return listed
