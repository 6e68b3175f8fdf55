"""The process-level loaded-model cache a sweep worker installs, so it loads the model once for many items.

HOOK (issue 14): `genrun.runner.backends.transformers_backend.load_model` consults
`active_cache()`; outside a sweep worker it is `None` and loading is unchanged. Once the backend
protocol's `load(ctx)` / `execute_snapshot(..., loaded=...)` lands (branch `proto`), this module
becomes the place the worker keeps `loaded` and the hook goes away; nothing else changes.

A cached model is reused only for the same frozen model digest, dtype, device and loader: execute
re-verified the files against `model.json` before the item, so equal digests mean the files the
loaded model came from are the ones this item froze. Each reuse is written into the item snapshot
(`worker-model.json`) before generation starts, so it is sealed with the item.
"""

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from genrun.schemas import layout
from genrun.schemas.sweep import WorkerModel

from .._io import write_model_atomic

if TYPE_CHECKING:
    from ..backends import ExecutionContext


@dataclass
class _Entry:
    key: str
    loaded: Any
    """`(model, tokenizer_or_processor)`."""
    loaded_for: str
    items: int = 0


@dataclass
class LoadedModelCache:
    """One loaded model per worker process (a new key replaces it: workers run one sweep's items)."""

    worker: str
    entry: _Entry | None = None
    loads: int = 0
    """How often this worker really loaded weights."""
    _notes: list[str] = field(default_factory=list)

    def get_or_load(self, ctx: "ExecutionContext", load: Callable[["ExecutionContext"], Any]) -> Any:
        """The cached `(model, tokenizer)` for this item's key, loading it on the first item; records `worker-model.json`."""
        key = cache_key(ctx)
        reused = self.entry is not None and self.entry.key == key
        if not reused:
            self.entry = None  # drop the old model before loading another
            loaded = load(ctx)
            self.loads += 1
            self.entry = _Entry(key=key, loaded=loaded, loaded_for=ctx.snapshot_dir.name)
        entry = self.entry
        record = WorkerModel(
            worker=self.worker,
            pid=os.getpid(),
            loaded_for_snapshot=entry.loaded_for,
            reused=reused,
            items_before=entry.items,
            model_digest=ctx.model.digest,
            key=key,
        )
        write_model_atomic(ctx.snapshot_dir / layout.WORKER_MODEL, record)
        entry.items += 1
        return entry.loaded


def cache_key(ctx: "ExecutionContext") -> str:
    """Frozen model digest, dtype, device and loader (with its kwargs): what makes two loads interchangeable."""
    spec = ctx.request.model
    parts = {"digest": ctx.model.digest, "dtype": spec.dtype, "device": ctx.device, "loader": spec.loader,
             "loader_kwargs": spec.loader_kwargs, "trust_remote_code": spec.trust_remote_code}
    return orjson.dumps(parts, option=orjson.OPT_SORT_KEYS).decode()


_active: LoadedModelCache | None = None


def active_cache() -> LoadedModelCache | None:
    """The cache of this worker process, or `None` outside sweep workers."""
    return _active


def install_cache(cache: LoadedModelCache | None) -> None:
    """Called once by a sweep worker process (or actor) before its first item."""
    global _active
    _active = cache
