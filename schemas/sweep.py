"""The sweep file a user writes and the sweep snapshot's own artifacts.

A sweep is many ordinary snapshots (one per item) plus one sweep snapshot that freezes the sweep
file, the base request and the dataset, lists the items with their plan digests, records every
attempt as it happens (`sweep-progress.ndjson`, append-only) and, once sealed, each item's final
snapshot id, digest, status and stop reasons (`sweep-result.json`).
"""

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, TypeAdapter

from ._base import FiniteFloat, Strict

ExecutorKind = Literal["local", "ray"]
ItemStatus = Literal["succeeded", "failed", "interrupted", "lost", "not_run"]
"""`lost`: the worker or actor died mid-item (its snapshot stays incomplete); `not_run`: never started."""
SweepStatus = Literal["completed", "interrupted"]


class ExecutorSpec(Strict):
    """`[sweep.executor]`: where items run."""

    kind: ExecutorKind = "local"
    """`local` (worker processes on this machine) or `ray` (actors on a Ray cluster; the `genrun[ray]` extra)."""
    workers: int = Field(default=1, ge=1, le=1024, strict=True)
    """Worker processes (local) or actors (ray); each keeps one model loaded."""
    address: str | None = None
    """Ray only: the cluster to join (`auto`, `ray://host:10001`); `None` starts a local Ray instance."""
    num_cpus: FiniteFloat | None = Field(default=None, ge=0)
    """Ray only: CPUs reserved per actor; `None` means 1."""
    num_gpus: FiniteFloat | None = Field(default=None, ge=0)
    """Ray only: GPUs reserved per actor; `None` means 0."""


class DatasetSpec(Strict):
    """`[sweep.dataset]`: one item per JSON line, each key a dotted request key."""

    path: str = Field(min_length=1)
    """JSON Lines file, relative to the sweep file."""


class SweepBody(Strict):
    """The `[sweep]` table."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,47}$")
    """Sweep name; part of the sweep snapshot id and of every item's request name."""
    request: str = Field(min_length=1)
    """The base request file, relative to the sweep file; every item is this request with changes."""
    grid: dict[str, tuple[Any, ...]] = {}
    """Dotted request key -> values; every combination is an item (times every dataset line)."""
    dataset: DatasetSpec | None = None
    """Optional JSON Lines dataset; one item per line (times every grid combination)."""
    executor: ExecutorSpec = ExecutorSpec()
    """Where the items run."""
    retries: int = Field(default=1, ge=0, le=100, strict=True)
    """How often a `lost` item (worker killed mid-item) is retried, each time as a new snapshot."""


class SweepFile(Strict):
    """A whole sweep file: one `[sweep]` table."""

    sweep: SweepBody
    """The sweep."""


class DatasetRef(Strict):
    """What the sweep snapshot froze of the dataset."""

    path: str
    """Absolute path the dataset was read from."""
    sha256: str
    """sha256 of the file's bytes."""
    bytes: int
    """Size of the file."""
    lines: int
    """Items (non-blank lines) it holds."""
    copied: bool
    """Whether the file itself is in the sweep snapshot (`sweep-dataset.jsonl`); large files keep only the hash."""


SnapshotId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")]
"""A snapshot id as a sweep file names it: one plain directory name inside the store (no `/`, `..`, leading dot or
control character), so an edited sweep log can never point a resume at a directory outside the store."""


class SweepItem(Strict):
    """One planned item: where its changes came from and the snapshot planned for it."""

    index: int
    """Item number, 0-based, in expansion order (dataset line major, grid combination minor)."""
    dataset_line: int | None
    """1-based line of the dataset the item came from; `None` without a dataset."""
    changes: dict[str, Any]
    """Dotted request key -> value applied to the base request (dataset keys, then grid keys)."""
    snapshot_id: SnapshotId
    """The item's first snapshot (retries get new ones, listed in `sweep-result.json`)."""
    plan_digest: str
    """sha256 of the item snapshot's `frozen-sha256.txt`."""


class SweepPlan(Strict):
    """`sweep-plan.json`: the expanded, validated sweep, frozen before anything runs."""

    schema_version: int = 1
    """Format version of this file."""
    sweep: SweepBody
    """The `[sweep]` table as validated."""
    store: str
    """Absolute path of the store the items were planned into (every node must see it); a store moved since is found beside the sweep (`items_store`)."""
    base_request: str
    """Absolute path of the base request file (its bytes are frozen beside this file)."""
    dataset: DatasetRef | None
    """The dataset, when there is one."""
    items: tuple[SweepItem, ...]
    """Every item, in order."""

    def items_store(self, sweep_dir: Path, item_ids: Iterable[str] | None = None) -> Path:
        """Where the sweep's items are now (`item_ids`: these; default the planned ones). A sweep is planned into the store
        that holds its items, so they are beside it wherever that store is now: a store moved, or copied to another
        machine for review, is verified, executed and resumed as it holds them, never through the items still at the
        recorded path. `store` as recorded only when no item is beside the sweep (its folder taken out of the store)."""
        here = Path(sweep_dir).absolute().parent
        ids = item_ids if item_ids is not None else (item.snapshot_id for item in self.items)
        return here if any((here / sid).is_dir() for sid in ids) else Path(self.store)


class ItemAttempt(Strict):
    """One line of `sweep-progress.ndjson`: an attempt started or ended."""

    event: Literal["started", "ended"]
    """`started` before an item is handed to a worker; `ended` when its outcome is known."""
    item: int
    """Item index."""
    attempt: int
    """1 for the first try, 2 for the first retry, ..."""
    snapshot_id: SnapshotId
    """The snapshot this attempt runs in."""
    t: float
    """Seconds since the sweep execution began (this driver's clock)."""
    worker: str | None = None
    """Worker or actor that ran it (`local-0`, `ray-1`)."""
    status: ItemStatus | None = None
    """`ended` only: how the attempt ended."""
    message: str | None = None
    """`ended` only: why (the exception, or how the worker died)."""


ATTEMPT_ADAPTER = TypeAdapter(ItemAttempt)


class ItemOutcome(Strict):
    """An item's final state as the sweep records it."""

    index: int
    """Item index."""
    status: ItemStatus
    """Status of the last attempt."""
    snapshot_id: SnapshotId | None
    """The last attempt's snapshot (`None` when it never started)."""
    snapshot_digest: str | None
    """sha256 of that snapshot's `manifest-sha256.txt`; `None` when it is not sealed (lost)."""
    attempts: tuple[SnapshotId, ...]
    """Every snapshot id tried for this item, oldest first (a lost attempt's snapshot is kept)."""
    stop_reasons: tuple[str, ...]
    """Sorted distinct stop reasons of the last attempt's sequences."""
    generated: int | None
    """Units generated by the last attempt."""
    message: str | None = None
    """Why the item failed, was lost or was interrupted."""


class SweepResult(Strict):
    """`sweep-result.json`: written once, when the sweep is sealed."""

    schema_version: int = 1
    """Format version of this file."""
    status: SweepStatus
    """`completed` (every item ran) or `interrupted` (SIGINT/SIGTERM stopped scheduling)."""
    counts: dict[str, int]
    """Items per status."""
    items: tuple[ItemOutcome, ...]
    """One per planned item, in order."""


class WorkerModel(Strict):
    """`worker-model.json` in an item snapshot: the worker kept the model loaded across items."""

    schema_version: int = 1
    """Format version of this file."""
    worker: str
    """Worker or actor name."""
    pid: int
    """Its process id."""
    loaded_for_snapshot: str
    """The item snapshot during which this worker loaded the model (once)."""
    reused: bool
    """False for that first item; true when this item used the already loaded model."""
    items_before: int
    """Items this worker ran with the same model before this one."""
    model_digest: str
    """Digest of the model files loaded; equal to this snapshot's `model.json` digest, which execute re-verified before the item."""
    key: str
    """What the cached model is keyed by: model digest, dtype, device, loader."""
