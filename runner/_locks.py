"""Exclusive `flock`s that say who holds them: the kernel drops a lock when its holder dies (SIGKILL included), so a
free lock means no live process owns the file or directory."""

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path


def try_exclusive(fd: int) -> bool:
    """Take an exclusive flock on `fd` without waiting; `False` when another process holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def lock_holder(fd: int) -> str:
    """`PID n` of the process holding a flock on `fd`'s inode, from /proc/locks (Linux); else `another process`."""
    pid = holder_pid(fd)
    return f"PID {pid}" if pid else "another process"


def holder_pid(fd: int) -> int | None:
    """The PID holding a flock on `fd`'s inode, from /proc/locks (Linux); `None` when this machine cannot name one (no
    /proc, or a holder on another machine sharing the filesystem)."""
    inode = str(os.fstat(fd).st_ino)
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 5 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == inode and fields[4].isdigit():
                    return int(fields[4])
    except OSError:
        pass
    return None


@contextlib.contextmanager
def held_exclusively(path: Path, *, extra_flags: int, unopenable: Callable[[str], Exception],
                     busy: Callable[[str], Exception]) -> Iterator[None]:
    """An exclusive `flock` on the regular file `path` for the block (the kernel drops it when the holder dies, SIGKILL
    included). `unopenable(why)` is raised when `path` cannot be opened (never through a link, never blocking on a FIFO),
    `busy(holder)` when another process holds the lock."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | extra_flags)
    except OSError as exc:
        raise unopenable(f"{exc.strerror or exc}") from None
    opened = os.fstat(fd)
    try:
        if not try_exclusive(fd):
            raise busy(lock_holder(fd))
        yield
    finally:
        _close_if_still_ours(fd, opened)


def _close_if_still_ours(fd: int, opened: os.stat_result) -> None:
    """Close `fd` unless user code closed it meanwhile (the lock went with it)."""
    if still_ours(fd, opened):
        os.close(fd)


def still_ours(fd: int, opened: os.stat_result) -> bool:
    """Whether `fd` still is the file it was opened as: user code running in the process may have closed it (its number
    may now be another file of the process's, which genrun must never write to or close)."""
    try:
        now = os.fstat(fd)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (opened.st_dev, opened.st_ino)
