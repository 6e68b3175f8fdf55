"""Mapping a function over chunks of work in forked processes, one per core, where that is safe; else not at all;
running one function in a forked process while the caller goes on (`Forked`); and sharing one run of work items with a
forked process that starts now, from the first item, while the caller takes the last ones when it is free
(`FromBothEnds`).

Used for work that is mostly system calls and small parses of many files (the first `ls` of a big store reads four
files of each snapshot): threads measured no faster here (the GIL is taken back between calls that each cost a few
microseconds), processes ~2× on 2 cores. Fork, not spawn: a spawned worker would import genrun again (~0.3 s) before
its first file. Fork is only safe from a process with one thread (a lock held by another thread at the fork stays held
in the child forever), so a threaded caller (a notebook, a server) gets no pool and does the work itself.
"""

import mmap
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

    @property
    def started(self) -> bool:
        """Running or ended, and not answered or abandoned yet."""
        return self._pid is not None

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


class FromBothEnds(Generic[R]):
    """`work(lo, hi)` of items [0, n), in blocks, on two cores with no share fixed in advance: a forked process starts
    now from the first item up (`start`), the caller, once free of its other work, takes the items from the last one
    down (`finish`) until the two meet. So the process does more when the caller's other work takes long, or when the
    machine is busy, and neither waits long for the other. The two marks where each has got to are in memory both see
    (an anonymous shared mapping): the process stops at the caller's, the caller at the process's. A block both took
    near the meeting point is done twice (the answers are joined as lists: `work` must give the same answer twice).
    Where no process can be forked, or it dies or fails, the caller does what it left. Call `close()` in a `finally`."""

    BLOCK = 1024
    """Items between two looks at the other's mark: a few milliseconds of lstats."""

    def __init__(self, work: Callable[[int, int], list[R]], n: int) -> None:
        self._work, self._n = work, n
        self._shared = mmap.mmap(-1, 16)  # MAP_SHARED | MAP_ANONYMOUS: the same memory in the forked process
        self._marks = memoryview(self._shared).cast("q")
        self._marks[0] = 0  # the process has done every item below this
        self._marks[1] = n  # the caller has done every item from this
        self._forked: Forked[tuple[list[R], int]] = Forked()

    def start(self) -> bool:
        """The process started on the first items; False where none could be (`finish` then does every item)."""
        return self._forked.start(self._from_the_start)

    def _from_the_start(self) -> tuple[list[R], int]:
        found: list[R] = []
        lo = 0
        while lo < self._marks[1]:  # the caller's mark: never above n
            hi = min(lo + self.BLOCK, self._n)
            found += self._work(lo, hi)
            self._marks[0] = lo = hi
        return found, lo

    def finish(self) -> list[R]:
        """Every item's answer: the caller's share from the last item down, then the process's (waited for), then any
        items neither did (the process died, failed, or never started)."""
        found: list[R] = []
        hi = self._n
        while hi > self._marks[0]:
            lo = max(hi - self.BLOCK, 0)
            found += self._work(lo, hi)
            self._marks[1] = hi = lo
        answer = self._forked.answer() if self._forked.started else None
        done_below = 0
        if answer is not None:
            theirs, done_below = answer
            found += theirs
        if done_below < hi:
            found += self._work(done_below, hi)
        return found

    def close(self) -> None:
        """End the process if it still runs (the caller is going no further), and free the shared marks."""
        self._forked.abandon()
        self._marks.release()
        self._shared.close()
