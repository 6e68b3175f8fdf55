"""`<snapshot>/outputs/`, created and opened once by the core before a backend runs.

Backends write their outputs by path under `ctx.outputs_dir`. That path goes through the descriptor held here
(`/proc/self/fd/N`, which names the opened directory itself, not whatever now sits at `<snapshot>/outputs`), so
a link planted at `outputs` while the run goes on never carries a write out of the store: the files land in the
directory genrun created, and verify names the planted entry.
"""

import contextlib
import errno
import os
from pathlib import Path

from genrun.schemas import layout

from ._io import DIR_MODE
from .errors import SnapshotError

_PROC_FD = Path("/proc/self/fd")


class OutputsDir:
    """The snapshot's `outputs/` directory, held open from before the backend runs until the seal."""

    def __init__(self, snapshot_dir: Path) -> None:
        self.snapshot_dir = Path(snapshot_dir)
        snapshot_fd = os.open(self.snapshot_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(layout.OUTPUTS_DIR, DIR_MODE, dir_fd=snapshot_fd)
            try:
                self.fd = os.open(layout.OUTPUTS_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=snapshot_fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                raise SnapshotError(f"{self.snapshot_dir / layout.OUTPUTS_DIR} is not a directory of the snapshot (a link or a file "
                                    "planted there); execute never writes through one: remove it or plan again") from None
        finally:
            os.close(snapshot_fd)

    @property
    def path(self) -> Path:
        """A path that reaches the held directory whatever is renamed or linked at `<snapshot>/outputs` meanwhile (on a
        system without `/proc`, the plain path)."""
        held = _PROC_FD / str(self.fd)
        return held if held.is_dir() else self.snapshot_dir / layout.OUTPUTS_DIR

    def close(self) -> None:
        """Let the directory go (after the seal); idempotent."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "OutputsDir":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
