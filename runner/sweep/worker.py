"""The item loop of a sweep worker (local process or Ray actor): one model load, many items.

`execute_item` is the one function both executors call. The worker's kept model (`model_cache`)
is passed to each item as `execute_snapshot(..., loaded=)`; each item is still a full, ordinary
`execute_snapshot`: frozen files and model re-verified, every generate call instrumented, sealed. A worker's items
are made durable and sealed in groups (`group_commit`): one filesystem sync serves many items' files.
"""

import contextlib
import os
import signal
import threading
from pathlib import Path
from typing import NamedTuple

from genrun.schemas.sweep import ItemStatus, WorkerModel

from ..backends import LoadedModel
from ..errors import GenrunError
from ..group_commit import GroupCommit
from .model_cache import LoadedModelCache, active_cache, install_cache


class ItemReport(NamedTuple):
    """What a worker sends back for one item (the driver reads the rest from the sealed snapshot)."""

    snapshot: str
    """The item snapshot directory."""
    status: ItemStatus
    """`succeeded`, `failed` or `interrupted` (result.json), `failed` when execution was refused, `not_run` when a
    signal came while the worker prepared the item (loading its model): its snapshot stays planned."""
    message: str | None
    """The exception or refusal, when there is one."""
    worker: str
    pid: int


_interrupt_requested: str | None = None
_group_commit: GroupCommit | None = None
"""This worker's group commit (`start_worker`); `None` outside a worker: an item then seals alone, as a single run."""


def _note_interrupt(signum: int, _frame: object) -> None:
    global _interrupt_requested
    _interrupt_requested = signal.Signals(signum).name


def interrupt_requested() -> str | None:
    """The signal this worker got outside an item's run (e.g. while loading the model for it), if any."""
    return _interrupt_requested


def start_worker(name: str) -> None:
    """Make this process a sweep worker: later items reuse the model the first one loads.

    Called on the process's main thread. Outside an item's run SIGINT is only noted: the driver
    sends it to interrupt the running item, and one that arrives while the worker is still loading
    the model for the item means the item is not run at all (`execute_snapshot`'s own gate handles
    it once the run has begun). The driver schedules nothing after a signal it got itself.
    """
    from genrun import offline_hub

    if threading.current_thread() is threading.main_thread():  # signals reach Python handlers there only
        signal.signal(signal.SIGINT, _note_interrupt)
    offline_hub()
    if active_cache() is None:
        install_cache(LoadedModelCache(worker=name))
    global _group_commit
    if _group_commit is None:
        _group_commit = GroupCommit()


def release_kept_model() -> None:
    """The worker ends: free its kept model (`LoadedModelCache.release`) and stop its group commit (every item's seal
    was waited for before it was reported). What a library prints while its model or engine shuts down belongs to no
    item: held by a capture and dropped, never the user's terminal."""
    from ..run_log import captured

    global _group_commit
    cache = active_cache()
    if cache is not None:
        with captured():
            cache.release()
    if _group_commit is not None:
        _group_commit.close()
        _group_commit = None


def execute_item(snapshot: str | Path) -> ItemReport:
    """Execute one planned item snapshot with full instrumentation; never raises for the item's own failure.

    What libraries print while the worker loads the model for the item goes to the item's `run-log.ndjson`, as what
    they print while it runs does (`run_log`): a worker's terminal is the user's."""
    from ..run_log import captured

    with captured():
        return _execute_item(snapshot)


def _execute_item(snapshot: str | Path) -> ItemReport:
    global _interrupt_requested
    cache = active_cache()
    worker = cache.worker if cache is not None else "inline"
    loaded, records = cache.model_for(Path(snapshot)) if cache is not None else (None, {})
    noted, _interrupt_requested = _interrupt_requested, None  # used once: a stray signal costs one item at most
    if noted is not None:
        return not_run(Path(snapshot), noted, worker)
    return run_item(Path(snapshot), loaded, records, worker)


def not_run(snapshot: Path, signal_name: str, worker: str) -> ItemReport:
    """The report of an item a signal stopped before its run began: its snapshot stays planned."""
    message = f"{signal_name} came while the worker prepared this item (loading its model); its snapshot stays planned"
    return ItemReport(str(snapshot), "not_run", message, worker, os.getpid())


def run_item(snapshot: Path, loaded: LoadedModel | None, records: dict[str, WorkerModel], worker: str) -> ItemReport:
    """`execute_snapshot` of one item on `loaded` (`None`: it loads its own) as an `ItemReport`; never raises for the item."""
    from ..execute import execute_snapshot

    try:
        with _group_commit.owning(snapshot) if _group_commit is not None else contextlib.nullcontext():
            result = execute_snapshot(snapshot, live=False, loaded=loaded, records=records)
    except GenrunError as exc:  # refused before running (frozen files changed, already executed): nothing sealed
        return ItemReport(str(snapshot), "failed", f"refused: {exc}", worker, os.getpid())
    ended_by = f"{result.exception.type}: {result.exception.message}" if result.exception else (result.signal or None)
    return ItemReport(str(snapshot), result.status, ended_by, worker, os.getpid())
