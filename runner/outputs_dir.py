"""`<snapshot>/outputs/`, created and opened once by the core before a backend runs.

Backends write their outputs by path under `ctx.outputs_dir`. That path goes through the descriptor held here
(`/proc/self/fd/N`, which names the opened directory itself, not whatever now sits at `<snapshot>/outputs`), so
a link planted at `outputs` while the run goes on never carries a write out of the store: the files land in the
directory genrun created, and verify names the planted entry.

That path names a descriptor number, and a closed number is the next one `open` hands out: a thread of one
sweep item still running after its seal would write, by the same path, into the next item's `outputs/`. So a
number is closed only when no thread started while it was held is still alive; until then it is held on a
removed, empty directory (a tombstone), where every write fails, and let go once those threads have ended.
"""

import contextlib
import errno
import os
import tempfile
import threading
from pathlib import Path

from genrun.schemas import layout
from genrun.snapshot_dir import SnapshotDir

from ._io import DIR_MODE
from ._locks import still_ours
from .errors import SnapshotError

_PROC_FD = Path("/proc/self/fd")


class OutputsDir:
    """The snapshot's `outputs/` directory, held open from before the backend runs until the seal."""

    def __init__(self, snapshot: SnapshotDir) -> None:
        """`snapshot`: the run's, held open (`outputs/` is made and opened in the directory it holds)."""
        _release_tombstones()
        self.snapshot_dir = snapshot.path
        self._threads_before = set(threading.enumerate())
        with contextlib.suppress(FileExistsError):
            os.mkdir(layout.OUTPUTS_DIR, DIR_MODE, dir_fd=snapshot.fd)
        try:
            self.fd = os.open(layout.OUTPUTS_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=snapshot.fd)
            self._opened = os.fstat(self.fd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            raise SnapshotError(f"{self.snapshot_dir / layout.OUTPUTS_DIR} is not a directory of the snapshot (a link or a file "
                                "planted there); execute never writes through one: remove it or plan again") from None

    @property
    def path(self) -> Path:
        """A path that reaches the held directory whatever is renamed or linked at `<snapshot>/outputs` meanwhile (on a
        system without `/proc`, the plain path)."""
        held = _PROC_FD / str(self.fd)
        return held if held.is_dir() else self.snapshot_dir / layout.OUTPUTS_DIR

    def close(self) -> None:
        """Let the directory go (after the seal); idempotent. While a thread started since it was opened still runs, its
        number stays taken by a tombstone, so that thread's path never reaches a later run's `outputs/`."""
        if self.fd < 0:
            return
        fd, self.fd = self.fd, -1
        if not still_ours(fd, self._opened):  # user code closed it: its number is not ours to close
            return
        stray = [t for t in threading.enumerate() if t not in self._threads_before and t is not threading.current_thread()]
        if stray:
            os.dup2(_tombstone(), fd)  # atomic: the number never becomes free while a stray thread may hold its path
            _tombstones.append((fd, stray))
        else:
            os.close(fd)

    def __enter__(self) -> "OutputsDir":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_tombstone_fd: int | None = None
_tombstones: list[tuple[int, list[threading.Thread]]] = []
"""Descriptor numbers held on the tombstone, with the threads that may still use their paths."""
_tombstone_lock = threading.Lock()


def _tombstone() -> int:
    """A descriptor of an empty directory that no longer exists: creating a file in it fails (ENOENT)."""
    global _tombstone_fd
    with _tombstone_lock:
        if _tombstone_fd is None:
            removed = tempfile.mkdtemp(prefix="genrun-outputs-closed-")
            _tombstone_fd = os.open(removed, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            os.rmdir(removed)
        return _tombstone_fd


def _release_tombstones() -> None:
    """Close the numbers whose threads have all ended (called before a new `outputs/` is opened)."""
    with _tombstone_lock:
        for entry in list(_tombstones):
            fd, threads = entry
            if not any(t.is_alive() for t in threads):
                _tombstones.remove(entry)
                os.close(fd)
