"""Mapping a function over chunks of work in forked processes, one per core, where that is safe; else not at all.

Used for work that is mostly system calls and small parses of many files (the first `ls` of a big store reads four
files of each snapshot): threads measured no faster here (the GIL is taken back between calls that each cost a few
microseconds), processes ~2× on 2 cores. Fork, not spawn: a spawned worker would import genrun again (~0.3 s) before
its first file. Fork is only safe from a process with one thread (a lock held by another thread at the fork stays held
in the child forever), so a threaded caller (a notebook, a server) gets no pool and does the work itself.
"""

import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

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
