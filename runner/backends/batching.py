"""The optional batching seam: a backend whose loaded model runs many snapshots' generation at once.

A sweep worker normally runs one item at a time on its kept model. An engine that batches requests itself (vLLM's
continuous batching) would then idle most of its capacity, so a backend may offer two more members, found with
`isinstance(backend, BatchingBackend)`; the sweep executor never asks which backend it is:

    lanes = backend.items_per_worker(request, model_dir)   # items one worker runs at once (the sweep's base request)
    batch = backend.open_batch(loaded)                     # once per loaded model, in the worker, before its items run

Every item is still its own ordinary `execute_snapshot` (each on its own thread): planned, verified, recorded, sealed on
its own, with its own ids and stops. Its `Run.generate(loaded)` hands its requests to the open batch and waits for its own
rows; it seals while the engine keeps generating the other items' rows. Signals reach only a process's main thread, so
the worker passes one on with `batch.interrupt(name)`: every item's `generate` then raises `RunInterrupted(name)` with the
ids it has, and each item seals `interrupted`, as a single run does.
"""

from pathlib import Path
from typing import Protocol, runtime_checkable

from genrun.schemas import Request

from . import LoadedModel


class ItemBatch(Protocol):
    """Generation of several snapshots at once on one loaded model (opened by `BatchingBackend.open_batch`)."""

    def interrupt(self, signal_name: str) -> None:
        """Stop every item's generation (called from a signal handler: set a flag, never block): each `generate` raises
        `RunInterrupted(signal_name)` with the ids it has; an item that submits later raises at once."""
        ...

    def close(self) -> None:
        """No more items: stop the batch's own threads and give the loaded model back to single runs."""
        ...


@runtime_checkable
class BatchingBackend(Protocol):
    """The optional members of a backend that batches items itself (`genrun.backends.Backend` plus these)."""

    def items_per_worker(self, request: Request, model_dir: Path) -> int:
        """How many items of a sweep of `request` one worker runs at once on one loaded model (at least 1)."""
        ...

    def open_batch(self, loaded: LoadedModel) -> ItemBatch:
        """Make `loaded` serve many `Run.generate` calls at once, each on its own thread, until `close()`."""
        ...
