"""The loaded model a sweep worker keeps between items, so it loads the weights once for many items.

Each item is still a full `execute_snapshot`: its frozen files and model are re-verified, and the
kept model is passed as `loaded=` (the backend protocol's load-once seam), which execute accepts
only for the same backend, frozen model digest, dtype, loader and device. The worker reuses it
only when the loader's keyword arguments and `trust_remote_code` match too (`cache_key`). Each
item records how its model was obtained in `worker-model.json`, written during its run and sealed
with it.
"""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from genrun.schemas import layout
from genrun.schemas.sweep import WorkerModel
from genrun.snapshot_dir import SnapshotDir

from ..backends import LoadedModel


@dataclass
class LoadedModelCache:
    """One loaded model per worker process (a different model replaces it: workers run one sweep's items)."""

    worker: str
    loaded: LoadedModel | None = None
    key: str | None = None
    loaded_for: str | None = None
    """The item whose execution loaded the kept model."""
    items: int = 0
    """Items that used the kept model so far."""
    loads: int = 0
    """How often this worker really loaded weights."""
    _last_plan: tuple[Path, Any] | None = None
    """(item, its frozen plan) last read by `_plan_of`."""

    def model_for(self, snapshot: Path) -> tuple[LoadedModel | None, dict[str, WorkerModel]]:
        """The model for this planned item (loading it when the kept one does not fit) and the record to seal with it.

        A plan that cannot be read or a model that fails to load gives `(None, {})`: the item is then
        executed as any snapshot is, and its own execution refuses it or records the failure.
        """
        from ..execute import load_for_snapshot

        try:
            plan = self._plan_of(snapshot)
        except Exception:  # noqa: BLE001 (execute refuses the item with the reason)
            return None, {}
        key = plan_key(plan)
        reused = self.loaded is not None and self.key == key
        if not reused:
            self.release()  # drop the old model before loading another
            try:
                self.loaded = load_for_snapshot(snapshot)
            except Exception:  # noqa: BLE001 (execute loads it again inside the run and records the failure)
                return None, {}
            self.key, self.loaded_for, self.items = key, snapshot.name, 0
            self.loads += 1
        assert self.loaded_for is not None, "set together with the model it names"
        record = WorkerModel(worker=self.worker, pid=os.getpid(), loaded_for_snapshot=self.loaded_for, reused=reused,
                             items_before=self.items, model_digest=plan.model.digest, key=key)
        self.items += 1
        return self.loaded, {layout.WORKER_MODEL: record}

    def release(self) -> None:
        """Drop the kept model, freeing what its load holds (`LoadedModel.release`): before another load, and when the
        worker ends."""
        loaded, self.loaded, self.key = self.loaded, None, None
        if loaded is not None and loaded.release is not None:
            loaded.release()

    def keeps_model_for(self, snapshot: Path) -> bool:
        """Whether the kept model (if any) is the one this planned item needs (an unreadable plan: yes, execute refuses it)."""
        try:
            return self.key is None or self.key == plan_key(self._plan_of(snapshot))
        except Exception:  # noqa: BLE001 (execute refuses the item with the reason)
            return True

    def _plan_of(self, snapshot: Path):  # noqa: ANN202 (genrun.runner.execute.FrozenPlan)
        """The item's frozen plan, parsed once for `keeps_model_for` and then `model_for` (the item's own execution
        verifies and parses it again: this one only picks the model)."""
        from ..execute import load_frozen

        last = self._last_plan
        if last is None or last[0] != snapshot:
            last = self._last_plan = (snapshot, load_frozen(SnapshotDir(snapshot)))
        return last[1]


def plan_key(plan) -> str:  # noqa: ANN001 (genrun.runner.execute.FrozenPlan)
    """`cache_key` of a frozen plan."""
    return cache_key(plan.request, plan.model.digest, plan.model.processor.digest if plan.model.processor is not None else None)


def cache_key(request, model_digest: str, processor_digest: str | None = None) -> str:  # noqa: ANN001 (genrun.schemas.Request)
    """Frozen model digest, dtype, device, loader (with its kwargs), `[model] processor` digest and the backend's own tables
    (vLLM's `[engine]`: a sweep whose items vary it gets an engine per setting, not a refusal): what makes two loads
    interchangeable."""
    spec = request.model
    parts = {"digest": model_digest, "dtype": spec.dtype, "device": spec.device, "loader": spec.loader,
             "loader_kwargs": spec.loader_kwargs, "trust_remote_code": spec.trust_remote_code}
    if processor_digest is not None:  # absent otherwise, so keys of plans without one are unchanged
        parts["processor_digest"] = processor_digest
    if request.backend_tables:  # likewise
        parts["backend_tables"] = request.backend_tables
    return orjson.dumps(parts, option=orjson.OPT_SORT_KEYS).decode()


_active: LoadedModelCache | None = None


def active_cache() -> LoadedModelCache | None:
    """The cache of this worker process, or `None` outside sweep workers."""
    return _active


def install_cache(cache: LoadedModelCache | None) -> None:
    """Called once by a sweep worker process (or actor) before its first item."""
    global _active
    _active = cache
