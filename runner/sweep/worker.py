"""The item loop of a sweep worker (local process or Ray actor): one model load, many items.

`execute_item` is the one function both executors call. The worker's kept model (`model_cache`)
is passed to each item as `execute_snapshot(..., loaded=)`; each item is still a full, ordinary
`execute_snapshot`: frozen files and model re-verified, every generate call instrumented, sealed.
"""

import os
from pathlib import Path
from typing import NamedTuple

from ..errors import GenrunError
from .model_cache import LoadedModelCache, active_cache, install_cache


class ItemReport(NamedTuple):
    """What a worker sends back for one item (the driver reads the rest from the sealed snapshot)."""

    snapshot: str
    """The item snapshot directory."""
    status: str
    """`succeeded`, `failed` or `interrupted` (result.json), or `failed` when execution was refused."""
    message: str | None
    """The exception or refusal, when there is one."""
    worker: str
    pid: int


def start_worker(name: str) -> None:
    """Make this process a sweep worker: later items reuse the model the first one loads."""
    from genrun import offline_hub

    offline_hub()
    if active_cache() is None:
        install_cache(LoadedModelCache(worker=name))


def execute_item(snapshot: str | Path) -> ItemReport:
    """Execute one planned item snapshot with full instrumentation; never raises for the item's own failure."""
    from ..execute import execute_snapshot

    cache = active_cache()
    worker = cache.worker if cache is not None else "inline"
    loaded, records = cache.model_for(Path(snapshot)) if cache is not None else (None, {})
    try:
        result = execute_snapshot(Path(snapshot), live=False, loaded=loaded, records=records)
    except GenrunError as exc:  # refused before running (frozen files changed, already executed): nothing sealed
        return ItemReport(str(snapshot), "failed", f"refused: {exc}", worker, os.getpid())
    message = f"{result.exception.type}: {result.exception.message}" if result.exception else (result.signal or None)
    return ItemReport(str(snapshot), result.status, message, worker, os.getpid())
