"""Mapping a function over chunks of work in forked processes, one per core, where that is safe; else not at all; and
running one function in a forked process while the caller goes on (`Forked`).

Used for work that is mostly system calls and small parses of many files (the first `ls` of a big store reads four
files of each snapshot): threads measured no faster here (the GIL is taken back between calls that each cost a few
microseconds), processes ~2× on 2 cores. Fork, not spawn: a spawned worker would import genrun again (~0.3 s) before
its first file. Fork is only safe from a process with one thread (a lock held by another thread at the fork stays held
in the child forever), so a threaded caller (a notebook, a server) gets no pool and does the work itself.
"""

import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

MAX_WORKERS = 8
CHUNKS_PER_WORKER = 4
"""Smaller chunks than one per worker, so that a worker slowed by another tenant does not hold up the rest."""


def fork_workers() -> int:
    """How many processes should share work that is worth sharing (the caller judges that): one per core, 0 on one core
    or where forking is not safe (the caller then does the work itself)."""
    if sys.platform != "linux" or threading.active_count() != 1:
        return 0
    import multiprocessing  # here, not above: `Forked`'s callers (a warm `ls`) need none of it (~15 ms with the pool)

    if "fork" not in multiprocessing.get_all_start_methods():
        return 0
    cores = len(os.sched_getaffinity(0))
    return min(cores, MAX_WORKERS) if cores > 1 else 0


def chunked(items: Sequence[T], workers: int) -> list[Sequence[T]]:
    """`items` in `CHUNKS_PER_WORKER` consecutive chunks per worker (order kept)."""
    size = max(1, -(-len(items) // (workers * CHUNKS_PER_WORKER)))
    return [items[start:start + size] for start in range(0, len(items), size)]


def fork_map(function: Callable[[T], R], chunks: Sequence[T], workers: int) -> list[R] | None:
    """`[function(chunk) for chunk in chunks]`, the chunks shared by `workers` forked processes; None when there is no
    pool to be had, a worker died or one raised `OSError` (the caller then does the work itself: none of what the
    workers returned is used). `function` and each chunk are pickled to a worker, each answer back; what the caller set
    up before the call (a module's global) is there in the workers without that: they are forked at the first chunk."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    try:
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"))
    except (OSError, ImportError):  # no working semaphores (e.g. a container without /dev/shm)
        return None
    try:
        return list(pool.map(function, chunks))
    except (BrokenProcessPool, OSError):
        return None
    finally:  # interrupted (Ctrl-C, SIGTERM): the chunks not started are dropped, the running ones end
        pool.shutdown(wait=True, cancel_futures=True)


_DEFERRED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
"""Signals that a Python handler turns into an exception (genrun's handle SIGINT and SIGTERM so): held back while a
process is forked and recorded, so that one landing then cannot leave a process no one ends."""


class Forked(Generic[R]):
    """One function run in a forked process while the caller goes on (on another core). Made before the fork, so the
    caller holds it from the start: `start()` forks and records the process with those signals held back, `answer()`
    waits for it, `abandon()` ends it unanswered (a no-op once answered, or never started). Call `abandon()` in a
    `finally`: wherever an interrupt lands, nothing is left running."""

    def __init__(self) -> None:
        self._pid: int | None = None
        self._pipe: int | None = None

    def start(self, function: Callable[[], R]) -> bool:
        """`function()` started in a forked process; False where there is no other core or forking is not safe
        (`fork_workers`), or the fork failed: the caller then calls `function` itself. Its answer comes back pickled
        through a pipe; it must write nothing else (its stdout is the caller's)."""
        assert self._pid is None, "started already"
        if not fork_workers():
            return False
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
        try:
            reading, writing = os.pipe()
            try:
                pid = os.fork()
            except OSError:  # no memory or processes to spare
                os.close(reading)
                os.close(writing)
                return False
            if pid == 0:  # the child: never returns into the caller's code, runs no exit handler, flushes no buffer
                status = 1
                try:
                    signal.pthread_sigmask(signal.SIG_SETMASK, held)
                    os.close(reading)
                    sent = pickle.dumps(function(), protocol=pickle.HIGHEST_PROTOCOL)
                    with os.fdopen(writing, "wb") as pipe:
                        pipe.write(sent)
                    status = 0
                finally:
                    os._exit(status)
            os.close(writing)
            self._pid, self._pipe = pid, reading
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        return True

    def answer(self) -> R | None:
        """What the function returned; None when it raised, its answer could not be sent, or the process died (killed,
        the OOM killer): the caller then does the work itself."""
        assert self._pid is not None and self._pipe is not None, "not started, or answered or abandoned already"
        pipe, self._pipe = os.fdopen(self._pipe, "rb"), None
        with pipe:
            sent = pipe.read()
        _, status = os.waitpid(self._pid, 0)
        self._pid = None
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            return None
        try:
            return pickle.loads(sent)
        except Exception:  # cut short: nothing of it is used
            return None

    def abandon(self) -> None:
        """End the process, if there is one still, and reap it (the caller is going no further: an error, Ctrl-C)."""
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None
        if self._pid is not None:
            try:
                os.kill(self._pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self._pid, 0)
            self._pid = None
