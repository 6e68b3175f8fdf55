"""The local executor for a backend that batches items itself: `lanes` slots per worker process, one engine per worker.

The driver sees ordinary slots (one item each); slot `s` is lane `s % lanes` of worker `s // lanes`
(`batch_worker.batch_worker_main`). A worker that dies loses the items of all its busy lanes (each a `Died`, retried
as the driver retries any lost item); the first `replace` of its lanes starts a fresh worker, the others find it
running. `interrupt` sends the worker one SIGINT, which stops every item it runs.
"""

import multiprocessing
import multiprocessing.connection
import os
import signal
from pathlib import Path
from typing import Any, NamedTuple

from genrun.schemas import Request, layout
from genrun.schemas.sweep import SweepPlan
from genrun.snapshot_dir import ArtifactError, SnapshotDir

from ..errors import GenrunError
from .batch_worker import batch_worker_main
from .local import close_workers, how_it_ended, threads_per_worker
from .pools import Died, Finished


def lanes_per_worker(plan: SweepPlan) -> int:
    """Items one local worker runs at once: what the items' backend offers (`items_per_worker` of the first item's
    request) when every item uses that backend and it batches; 1 otherwise."""
    from ..backends import get_backend
    from ..backends.batching import BatchingBackend
    from ..execute import load_frozen

    store = Path(plan.store)
    try:
        first = load_frozen(SnapshotDir(store / plan.items[0].snapshot_id))
        backend = get_backend(first.request.model.backend)
        if not isinstance(backend, BatchingBackend):
            return 1
        names = {SnapshotDir(store / item.snapshot_id).read(layout.REQUEST, Request).model.backend for item in plan.items}
        if names != {backend.name}:
            return 1
        return max(1, backend.items_per_worker(first.request, Path(first.model.resolved_path)))
    except (GenrunError, ArtifactError):  # a damaged or unrunnable item: one at a time, and its own execution says why
        return 1


class _Worker(NamedTuple):
    name: str
    conn: Any
    process: Any


class BatchPool:
    """`workers` spawned processes with `lanes` slots each."""

    def __init__(self, workers: int, lanes: int) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self.lanes = lanes
        self.slots = workers * lanes
        self._threads = threads_per_worker(workers)
        self._generation = [0] * workers
        self._workers = [self._start(w) for w in range(workers)]
        self._busy: set[int] = set()
        self._interrupted: set[int] = set()
        """Worker pids already sent SIGINT (one stops all their items)."""

    def _start(self, index: int) -> _Worker:
        name = f"local-{index}" + (f".{self._generation[index]}" if self._generation[index] else "")
        conn, child = self._ctx.Pipe()
        process = self._ctx.Process(target=batch_worker_main, args=(child, name, os.getpid(), self._threads), name=f"genrun-{name}",
                                    daemon=True)
        process.start()
        child.close()
        return _Worker(name, conn, process)

    def _lanes_of(self, index: int) -> range:
        return range(index * self.lanes, (index + 1) * self.lanes)

    def names(self) -> list[str]:
        return [self._workers[slot // self.lanes].name for slot in range(self.slots)]

    def submit(self, slot: int, snapshot: str) -> None:
        index = slot // self.lanes
        try:
            self._workers[index].conn.send((slot % self.lanes, snapshot))
        except (BrokenPipeError, ConnectionResetError):
            if any(s in self._busy for s in self._lanes_of(index)):
                pass  # it died with items: `wait` reports every busy lane, this one too
            else:  # it died while idle: nothing was lost, start another
                self.replace(slot)
                self._workers[index].conn.send((slot % self.lanes, snapshot))
        self._busy.add(slot)

    def wait(self, timeout: float) -> list[Finished | Died]:
        watched: dict[Any, tuple[int, str]] = {}
        for index, worker in enumerate(self._workers):
            if any(s in self._busy for s in self._lanes_of(index)):
                watched[worker.conn] = (index, "conn")
                watched[worker.process.sentinel] = (index, "dead")
        if not watched:
            return []
        ready = multiprocessing.connection.wait(list(watched), timeout)
        events: list[Finished | Died] = []
        for handle in sorted(ready, key=lambda h: watched[h][1] != "conn"):  # reports beat the exit that follows them
            index, kind = watched[handle]
            worker = self._workers[index]
            if kind == "conn" and self._read_reports(index, events):
                continue
            how = how_it_ended(worker.process)
            for slot in self._lanes_of(index):
                if slot in self._busy:
                    self._busy.discard(slot)
                    events.append(Died(slot, f"worker {worker.name} (pid {worker.process.pid}) {how} mid-item"))
        return events

    def _read_reports(self, index: int, events: list[Finished | Died]) -> bool:
        """Every report waiting from worker `index`; `False` when its pipe closed (it died)."""
        conn = self._workers[index].conn
        try:
            while conn.poll():
                lane, report = conn.recv()
                slot = index * self.lanes + lane
                self._busy.discard(slot)
                events.append(Finished(slot, report))
        except (EOFError, OSError):
            return False
        return True

    def replace(self, slot: int) -> None:
        index = slot // self.lanes
        old = self._workers[index]
        if old.process.is_alive():  # already replaced for another lane of the same dead worker
            return
        old.conn.close()
        self._generation[index] += 1
        self._workers[index] = self._start(index)

    def interrupt(self, slot: int) -> None:
        process = self._workers[slot // self.lanes].process
        if slot in self._busy and process.pid not in self._interrupted and process.is_alive():
            os.kill(process.pid, signal.SIGINT)
            self._interrupted.add(process.pid)

    def pid(self, slot: int) -> int | None:
        """The worker's process id (tests kill it)."""
        return self._workers[slot // self.lanes].process.pid

    def close(self) -> None:
        close_workers([(worker.conn, worker.process) for worker in self._workers], timeout=120)  # items in flight finish first
