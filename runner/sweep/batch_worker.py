"""A local sweep worker that runs many items at once on one loaded model, for a backend that batches itself.

Each item runs on its own thread as an ordinary `execute_snapshot` (`worker.run_item`): verified, recorded and sealed on
its own. The backend's batch (`BatchingBackend.open_batch`) lets their `generate` calls share the loaded model, so an
item seals while the engine keeps generating the others. The process's main thread receives the items and the driver's
SIGINT (signals reach only the main thread): it passes the signal to the batch (`BatchWorker.interrupt`), and every item
in flight seals `interrupted` with its ids; an item still waiting for the model to load is `not_run`, as in a one-item
worker. A Ray actor holds a `BatchWorker` too (`ray_executor.BatchActor`), but is interrupted by a method call, not a
signal.
"""

import os
import signal
import threading
from pathlib import Path
from typing import Any

from ..backends import LoadedModel, get_backend
from ..backends.batching import BatchingBackend, ItemBatch
from .model_cache import LoadedModelCache
from .worker import ItemReport, not_run, run_item


class BatchWorker:
    """The items of one worker process: one kept model, one open batch on it, items in flight on threads."""

    def __init__(self, name: str) -> None:
        self.cache = LoadedModelCache(worker=name)
        self._lock = threading.Condition()
        self._active = 0
        """Items running on the kept model now."""
        self._batch: ItemBatch | None = None
        self._batch_for: LoadedModel | None = None
        self.signal: str | None = None

    def note_signal(self, signum: int, _frame: object) -> None:
        """The process's SIGINT handler (main thread): `interrupt`."""
        self.interrupt(signal.Signals(signum).name)

    def interrupt(self, signal_name: str) -> None:
        """Every item in flight stops (each seals `interrupted` with its ids); nothing new starts (`not_run`). Only sets
        flags, never blocks (a signal handler, or a Ray actor's control call beside the items' threads); again: no-op."""
        self.signal = self.signal or signal_name
        if self._batch is not None:
            self._batch.interrupt(self.signal)

    def run(self, snapshot: Path) -> ItemReport:
        """One item, on the calling thread: share the kept model through the batch, or run alone where there is none.

        What libraries print while this thread loads the model (vLLM's engine start) or opens the batch goes to the
        item's `run-log.ndjson`, as in `execute_item`: the worker's terminal is the user's."""
        from ..run_log import captured

        with captured():
            return self._run(snapshot)

    def _run(self, snapshot: Path) -> ItemReport:
        worker = self.cache.worker
        with self._lock:
            if not self.cache.keeps_model_for(snapshot):  # another model: the items on this one finish first
                while self._active:
                    self._lock.wait()
                self._close_batch()
            loaded, records = self.cache.model_for(snapshot)
            if self.signal is not None:
                return not_run(snapshot, self.signal, worker)
            if loaded is not None and loaded is not self._batch_for:
                self._open_batch(loaded)
            if loaded is None or loaded is not self._batch_for:  # no batch (no model, or a backend that does not batch): alone
                while self._active:
                    self._lock.wait()
                return run_item(snapshot, loaded, records, worker)
            self._active += 1
        try:
            return run_item(snapshot, loaded, records, worker)
        finally:
            with self._lock:
                self._active -= 1
                self._lock.notify_all()

    def close(self) -> None:
        """No more items: close the batch and free the kept model (`LoadedModelCache.release`: vLLM's engine core).
        What libraries print while their engine shuts down belongs to no item: held, then dropped, never the terminal."""
        from ..run_log import captured
        from .worker import release_kept_model

        with captured():
            with self._lock:
                self._close_batch()
            self.cache.release()
        release_kept_model()  # the worker's group commit

    def _open_batch(self, loaded: LoadedModel) -> None:
        self._close_batch()
        backend = get_backend(loaded.backend)
        if isinstance(backend, BatchingBackend):
            self._batch, self._batch_for = backend.open_batch(loaded), loaded
            if self.signal is not None:  # `interrupt` came while the batch opened (it saw none): the batch ends at once
                self._batch.interrupt(self.signal)

    def _close_batch(self) -> None:
        if self._batch is not None:
            self._batch.close()
        self._batch = self._batch_for = None


def batch_worker_main(conn: Any, name: str, parent: int, threads: int | None = None) -> None:
    """Receive `(lane, snapshot)` messages and run each on a thread; send `(lane, ItemReport)` back; `None` ends it."""
    from .local import prepare_worker_process
    from .worker import start_worker

    if not prepare_worker_process(parent, threads):
        return
    start_worker(name)
    worker = BatchWorker(name)
    signal.signal(signal.SIGINT, worker.note_signal)
    sending = threading.Lock()
    running: list[threading.Thread] = []

    def item(lane: int, snapshot: str) -> None:
        try:
            report = worker.run(Path(snapshot))
        except BaseException as exc:  # a fault of this worker's own code, not of the item: reported, never lost silently
            report = ItemReport(snapshot, "failed", f"the sweep worker failed: {type(exc).__name__}: {exc}", name, os.getpid())
        with sending:
            conn.send((lane, report))

    try:
        while True:
            try:
                message = conn.recv()
            except EOFError:
                return
            if message is None:
                return
            thread = threading.Thread(target=item, args=message, name=f"genrun-item-{message[0]}", daemon=True)
            thread.start()
            running[:] = [t for t in running if t.is_alive()] + [thread]
    finally:
        for thread in running:
            thread.join()
        worker.close()
