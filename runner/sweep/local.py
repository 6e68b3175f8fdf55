"""The local executor: worker processes on this machine, each keeping one model loaded.

Each worker is a `spawn`ed process talking to the driver over its own pipe, so a worker killed
mid-item (SIGKILL, OOM) is noticed through its sentinel and costs only that item. Workers only
note SIGINT between items (the driver decides what stops; `worker.start_worker`) and die with
the driver (PR_SET_PDEATHSIG), so a killed driver never leaves workers running items nobody will
record. A worker starts with SIGINT ignored (an ignored signal stays ignored across exec) and says
`READY` once `start_worker` notes it; the driver holds back its interrupt of a worker not yet
ready and sends it then. So a Ctrl-C while workers start raises no `KeyboardInterrupt` out of
`multiprocessing`'s bootstrap, and the item handed to such a worker ends `not_run`.
"""

import ctypes
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from ..runtime import share_threads
from .pools import Died, Finished
from .worker import execute_item, release_kept_model, start_worker

_PR_SET_PDEATHSIG = 1
READY = "ready"
"""A worker's first message: from now on a SIGINT is noted, not fatal."""
_NOTHING_YET = object()


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def threads_per_worker(workers: int) -> int | None:
    """torch threads for each of `workers` local workers: the machine's cores shared out (at least 1), so that N
    workers do not each start one thread per core and slow each other down (measured with bench/sweep.py on 2 cores:
    two workers at torch's default took 2.27x the time of one). `None` (torch's default) when the user chose a
    thread count through OMP_NUM_THREADS / MKL_NUM_THREADS, which torch then follows. Each snapshot records the count
    it ran with (`determinism` `torch_threads`)."""
    if os.environ.get("OMP_NUM_THREADS") or os.environ.get("MKL_NUM_THREADS"):
        return None
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def prepare_worker_process(parent: int, threads: int | None) -> bool:
    """Die with the driver, keep `threads` as this worker's share of the cores (each run hands it to its backend's runtime),
    ignore SIGINT until the worker installs its own handler (the driver decides what stops); `False` when the driver is
    already gone."""
    _die_with_parent()
    if os.getppid() != parent:  # the driver died before prctl took effect
        return False
    # A worker may start processes of its own (vLLM's engine core, at vLLM's default VLLM_ENABLE_V1_MULTIPROCESSING=1);
    # multiprocessing refuses that to a daemonic process, and every item failed. The driver's handle keeps the daemon
    # flag (it ends its workers at exit); the worker itself dies with the driver through PR_SET_PDEATHSIG above.
    multiprocessing.current_process().daemon = False
    share_threads(threads)  # each run gives it to its backend's runtime (torch's threads; nothing for a loop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return True


def worker_main(conn: Any, name: str, parent: int, threads: int | None = None) -> None:
    """Loop: receive an item snapshot path, execute it, send the `ItemReport`; `None` ends the loop."""
    if not prepare_worker_process(parent, threads):
        return
    start_worker(name)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # the spawn may pass on the driver's mask (SIGINT held)
    conn.send(READY)
    try:
        while True:
            try:
                snapshot = conn.recv()
            except EOFError:
                return
            if snapshot is None:
                return
            conn.send(execute_item(Path(snapshot)))
    finally:
        release_kept_model()


class _Slot:
    def __init__(self, ctx: Any, name: str, threads: int | None) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=worker_main, args=(child, name, os.getpid(), threads), name=f"genrun-{name}", daemon=True)
        # The child is exec'd with SIGINT ignored (and, depending on how the spawn forks, blocked: `worker_main` unblocks
        # it). Blocked here meanwhile, a SIGINT for the driver stays pending (a blocked signal is not discarded as
        # ignored) and reaches the driver's own handler once both are restored.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        handler = signal.signal(signal.SIGINT, signal.SIG_IGN) if _on_main_thread() else None
        try:
            self.process.start()
        finally:
            if handler is not None:
                signal.signal(signal.SIGINT, handler)
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        child.close()
        self.busy = False
        self.ready = False
        """The worker can note a SIGINT (it said `READY`)."""
        self.interrupt_held = False
        """An interrupt came before `ready`: sent when it is."""


class LocalPool:
    """`workers` spawned processes (spawn: no torch state inherited from the driver)."""

    def __init__(self, workers: int) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self.slots = workers
        self._names = [f"local-{i}" for i in range(workers)]
        self._threads = threads_per_worker(workers)
        self._slots = [_Slot(self._ctx, name, self._threads) for name in self._names]
        self._generation = [0] * workers

    def names(self) -> list[str]:
        return list(self._names)

    def submit(self, slot: int, snapshot: str) -> None:
        try:
            self._slots[slot].conn.send(snapshot)
        except (BrokenPipeError, ConnectionResetError):  # the worker died while idle: nothing was lost, start another
            self.replace(slot)
            self._slots[slot].conn.send(snapshot)
        self._slots[slot].busy = True

    def wait(self, timeout: float) -> list[Finished | Died]:
        watched: dict[Any, tuple[int, str]] = {}
        for i, state in enumerate(self._slots):
            if state.busy:
                watched[state.conn] = (i, "conn")
                watched[state.process.sentinel] = (i, "dead")
        if not watched:
            return []
        ready = multiprocessing.connection.wait(list(watched), timeout)
        events: list[Finished | Died] = []
        seen: set[int] = set()
        for handle in sorted(ready, key=lambda h: watched[h][1] != "conn"):  # a report beats the exit that follows it
            slot, kind = watched[handle]
            if slot in seen:
                continue
            state = self._slots[slot]
            if kind == "conn":
                report = self._next_report(slot)
                if report is _NOTHING_YET:
                    continue
                if report is not None:
                    state.busy = False
                    events.append(Finished(slot, report))
                    seen.add(slot)
                    continue
            how = how_it_ended(state.process)
            state.busy = False
            events.append(Died(slot, f"worker {self._names[slot]} (pid {state.process.pid}) {how} mid-item"))
            seen.add(slot)
        return events

    def _next_report(self, slot: int) -> Any:
        """The slot's next `ItemReport`; `_NOTHING_YET` when only `READY` came; `None` when the pipe broke."""
        state = self._slots[slot]
        try:
            message = state.conn.recv()
            if message == READY:
                state.ready = True
                if state.interrupt_held:
                    self.interrupt(slot)
                message = state.conn.recv() if state.conn.poll() else _NOTHING_YET
        except (EOFError, OSError):
            return None
        return message

    def replace(self, slot: int) -> None:
        old = self._slots[slot]
        old.conn.close()
        self._generation[slot] += 1
        self._names[slot] = f"local-{slot}" + (f".{self._generation[slot]}" if self._generation[slot] else "")
        self._slots[slot] = _Slot(self._ctx, self._names[slot], self._threads)

    def interrupt(self, slot: int) -> None:
        state = self._slots[slot]
        if not state.ready:
            state.interrupt_held = True
        elif state.busy and state.process.pid is not None and state.process.is_alive():
            os.kill(state.process.pid, signal.SIGINT)

    def pid(self, slot: int) -> int | None:
        """The worker's process id (tests kill it)."""
        return self._slots[slot].process.pid

    def close(self) -> None:
        close_workers([(state.conn, state.process) for state in self._slots], timeout=30)


def close_workers(workers: list[tuple[Any, Any]], timeout: float) -> None:
    """Ask every `(conn, process)` worker to end (`None`), give each `timeout` seconds, kill the ones still running."""
    for conn, _ in workers:
        try:
            conn.send(None)
        except (OSError, ValueError):
            pass
    for conn, process in workers:
        process.join(timeout=timeout)
        if process.is_alive():
            process.kill()
            process.join()
        conn.close()


def how_it_ended(process: Any) -> str:
    """`killed by SIGKILL` / `exited with 1` for a worker process that died (joined first, briefly)."""
    process.join(timeout=5)
    code = process.exitcode
    return f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exited with {code}"
