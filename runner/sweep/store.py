"""The sweep snapshot: plan every item (all checks first, then freeze), record attempts, seal.

Layout of `<store>/<id>/` (names in `genrun.schemas.layout`): the sweep file and the base
request exactly as given, the dataset (or only its hash when large), `sweep-plan.json` (items
with their plan digests), `frozen-sha256.txt` (its sha256 is the sweep's plan digest); while
running `sweep-progress.ndjson` (append-only); on completion `sweep-result.json` and
`manifest-sha256.txt`. Item snapshots are ordinary snapshots beside it in the same store.
"""

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson

from genrun.schemas import Request, layout
from genrun.schemas.digests import plan_digest, sha256_bytes
from genrun.schemas.sweep import DatasetRef, ItemAttempt, SweepItem, SweepPlan, SweepResult
from genrun.snapshot_dir import SnapshotDir, read_sweep_progress

from .. import _hash_cache
from .._io import sync
from ..errors import GenrunError, SnapshotError, StoreError
from ..plan import PreparedPlan, prepare_plan
from ..plan_context import PlanContext
from ..store import create_snapshot, describe_os_error, locked_temporary, resolve_store, seal_snapshot
from .spec import ItemSpec, SweepSource, dataset_digest, expand_items, load_sweep


PLANNING_JOURNAL = "sweep-items-planned.txt"
"""In a sweep planner's `.tmp-*` directory: `<inode> <name>` of each item snapshot it has begun (`planning_journal`)."""


def plan_sweep(sweep_path: str | Path, store: str | Path | None = None, *, force: bool = False, on_item=None) -> Path:
    """Validate every item as strictly as `genrun plan`, then freeze all of them and the sweep snapshot; its path.

    A refusal of any item raises before anything is written (its message names the item, the
    dataset line and the key). `on_item(i, n)` is called as items are checked (progress on long sweeps).
    """
    with _hash_cache.held_until_planned():  # a refused sweep leaves no hash cache entry either
        return _plan_sweep(sweep_path, store, force, on_item)


def _plan_sweep(sweep_path: str | Path, store: str | Path | None, force: bool, on_item) -> Path:
    root = resolve_store(store).absolute()  # a store that is a file is refused before the items are planned
    sweep = load_sweep(sweep_path)
    items = expand_items(sweep)
    prepared = []
    context = PlanContext()  # environment, genrun's code hash, the model's config and tokenizer: once for all items
    for item in items:
        prepared.append(prepare_item(sweep, item, force, context))
        prepared[-1].refuse_the_store(root)
        if on_item is not None:
            on_item(item.index + 1, len(items))
    planned: list[Path] = []
    with planning_journal(root) as record:
        try:
            for plan in prepared:
                planned.append(create_snapshot(root, plan.name, _journaled(plan, record)))
            sweep_items = tuple(
                SweepItem(index=i.index, dataset_line=i.dataset_line, changes=i.changes, snapshot_id=p.name, plan_digest=plan_digest(p))
                for i, p in zip(items, planned)
            )
            return create_snapshot(root, sweep.body.name, lambda files: _freeze_sweep(files, sweep, root, sweep_items))
        except BaseException:
            for path in planned:  # plans, not evidence: a sweep is planned whole or not at all
                shutil.rmtree(path, ignore_errors=True)
            raise


def _journaled(plan: PreparedPlan, record: Callable[[str], None]) -> Callable[[SnapshotDir], None]:
    """`plan.freeze`, recording first `<inode> <name>` of the directory being frozen: the rename that gives it its id
    keeps the inode, so a planner killed at any moment leaves every item it made findable."""
    def freeze(snapshot: SnapshotDir) -> None:
        record(f"{os.fstat(snapshot.fd).st_ino} {plan.name}")
        plan.freeze(snapshot)

    return freeze


@contextlib.contextmanager
def planning_journal(store: Path) -> Iterator[Callable[[str], None]]:
    """A locked `.tmp-*` directory recording the item snapshots planned so far (one line each, fsynced), removed
    when the sweep is planned (or refused). SIGKILL leaves it behind, abandoned: `genrun gc` then removes the items it
    lists that are still planned and that no sweep lists (`runner.gc`), as it removes any abandoned `.tmp-*` directory."""
    try:
        store.mkdir(parents=True, exist_ok=True)
        journal, lock = locked_temporary(store)
    except OSError as exc:
        raise StoreError(describe_os_error(exc, store)) from exc
    try:
        with open(journal / PLANNING_JOURNAL, "ab") as f:
            def record(line: str) -> None:
                f.write(line.encode() + b"\n")
                f.flush()
                os.fsync(f.fileno())

            yield record
    finally:
        shutil.rmtree(journal, ignore_errors=True)
        os.close(lock)


def prepare_item(sweep: SweepSource, item: ItemSpec, force: bool, context: PlanContext | None = None) -> PreparedPlan:
    """Every `genrun plan` check of one item (nothing written); a refusal names the item, its dataset line and changes.
    `context`: the sweep's, shared by all its items (a new one by default, as for a lone plan)."""
    try:
        return prepare_plan(item.request, force, base_dir=sweep.base_path.parent, context=context)
    except GenrunError as exc:
        changes = orjson.dumps(item.changes).decode()
        raise type(exc)(f"{item.where}, changes {changes}: {exc}") from None


def _freeze_sweep(files: SnapshotDir, sweep: SweepSource, store: Path, items: tuple[SweepItem, ...]) -> None:
    files.write_bytes(f"{layout.SWEEP_SOURCE_PREFIX}.{sweep.format}", sweep.source)
    files.write_bytes(f"{layout.SWEEP_BASE_REQUEST_PREFIX}.{sweep.base_format}", sweep.base_source)
    dataset = None
    if sweep.dataset_bytes is not None and sweep.dataset_path is not None:
        copied = len(sweep.dataset_bytes) <= layout.SWEEP_DATASET_COPY_LIMIT
        if copied:
            files.write_bytes(layout.SWEEP_DATASET, sweep.dataset_bytes)
        lines = len({i.dataset_line for i in items})
        dataset = DatasetRef(path=str(sweep.dataset_path), sha256=dataset_digest(sweep) or "", bytes=len(sweep.dataset_bytes),
                             lines=lines, copied=copied)
    plan = SweepPlan(sweep=sweep.body, store=str(store), base_request=str(sweep.base_path), dataset=dataset, items=items)
    files.write(layout.SWEEP_PLAN, plan)


# -- reading and recording ------------------------------------------------------------------------


def is_sweep(path: Path) -> bool:
    """A sweep snapshot has `sweep-plan.json`."""
    return (Path(path) / layout.SWEEP_PLAN).is_file()


def open_sweep(path: str | Path) -> tuple[Path, SweepPlan]:
    """The sweep directory and its plan; SnapshotError when it is not a sweep snapshot."""
    sweep_dir = Path(path)
    if not is_sweep(sweep_dir):
        raise SnapshotError(f"{sweep_dir} is not a sweep snapshot (no {layout.SWEEP_PLAN}); pass a directory made by 'genrun sweep plan|run'")
    return sweep_dir, SnapshotDir(sweep_dir).read(layout.SWEEP_PLAN, SweepPlan)


def read_attempts(sweep: SnapshotDir) -> list[ItemAttempt]:
    """Every attempt of `sweep-progress.ndjson` (`read_sweep_progress`); a complete line that is not one is refused."""
    progress = read_sweep_progress(sweep)
    if progress.invalid:
        number, why = progress.invalid[0]
        raise SnapshotError(f"{sweep.path / layout.SWEEP_PROGRESS} line {number} is not an attempt record ({why}); "
                            "the sweep's log was altered: nothing it names is run")
    return progress.attempts


class AttemptLog:
    """Appends `ItemAttempt` lines to `sweep-progress.ndjson`, fsynced each (a killed driver loses at most a torn line)."""

    def __init__(self, sweep: SnapshotDir) -> None:
        """`sweep`: the driver's, writable."""
        self._stream = sweep.open_stream(layout.SWEEP_PROGRESS, new=False)
        size = os.fstat(self._stream.fd).st_size
        if size and sweep.read_bytes(layout.SWEEP_PROGRESS, offset=size - 1) != b"\n":
            self._stream.write(b"\n")  # terminate a torn line so the next record starts cleanly

    def append(self, record: ItemAttempt) -> None:
        self._stream.write(orjson.dumps(record.model_dump(mode="json", exclude_none=True)) + b"\n")
        self._stream.fsync()

    def close(self) -> None:
        self._stream.close()


MAX_FROZEN_COPY_BYTES = 4 << 30
"""The most bytes one frozen file of an item may have when a retry copies it (frozen processor and `[input]` files are
not bounded by their kind as the artifacts are; this refuses a file swapped for something absurd)."""


def copy_plan(store: Path, snapshot_dir: Path) -> Path:
    """A new snapshot with the same frozen files (same plan digest) for a retry; the lost one is kept as evidence."""
    original = SnapshotDir(snapshot_dir)
    entries = original.read_manifest(layout.FROZEN_MANIFEST).entries
    name = original.read(layout.REQUEST, Request).name

    def freeze(copy: SnapshotDir) -> None:
        for rel, digest in entries.items():  # byte for byte, never through a link, each as the frozen manifest lists it
            data = original.read_bytes(rel, limit=MAX_FROZEN_COPY_BYTES)
            if sha256_bytes(data) != digest:
                raise SnapshotError(f"{snapshot_dir / rel} no longer matches {layout.FROZEN_MANIFEST}; the item's plan was altered, "
                                    "so it is not retried: plan the sweep again")
            copy.write_bytes(rel, data)

    return create_snapshot(store, name, freeze)


def seal_sweep(sweep: SnapshotDir, result: SweepResult) -> str:
    """Write `sweep-result.json` and seal the sweep like a run (in the directory `sweep`, the driver's, holds); returns the
    sweep digest."""
    if sweep.has(layout.MANIFEST):
        raise SnapshotError(f"sweep {sweep.path} is already sealed")
    with sweep.held_open():
        sweep.write(layout.SWEEP_RESULT, result)
        sync(sweep.fd)
        return seal_snapshot(sweep)
