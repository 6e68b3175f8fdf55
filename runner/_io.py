"""Atomic file writes: a reader sees the old file or the new one, never half of either.

Snapshot artifacts are written through `genrun.snapshot_dir.SnapshotDir.write` / `write_bytes`, which call these.
"""

import contextlib
import ctypes
import errno
import os
import secrets
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
from pydantic import BaseModel

from genrun._safe_read import open_beneath, open_directory
from genrun.schemas import layout

from ._locks import still_ours
from .executing_process import refuse_other_process

JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS

# mkstemp creates 0600 files; snapshot files should get the permissions a plain open() would.
_UMASK = os.umask(0o022)
os.umask(_UMASK)
FILE_MODE = 0o666 & ~_UMASK
DIR_MODE = 0o777 & ~_UMASK


RESERVE_NAME = layout.DISK_RESERVE
_reserves: dict[Path, tuple[int, os.stat_result]] = {}
"""Directory path -> a descriptor of the directory the reserve was made in (it is unlinked there, whatever the path names now),
and that directory's stat (user code may close the descriptor: a number that is no longer it is left alone)."""


def reserve_space(directory: Path, nbytes: int, *, directory_fd: int | None = None) -> None:
    """Allocate `nbytes` in `directory` now (`posix_fallocate`: blocks really taken, not a sparse file); raises OSError
    (ENOSPC) when the filesystem cannot hold them. `write_bytes_atomic` gives them back on its first ENOSPC there.
    `directory_fd`: the directory's open descriptor (a held snapshot), where the reserve is made instead of by path."""
    folder = open_directory(directory if directory_fd is None else directory_fd)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(RESERVE_NAME, dir_fd=folder)  # left by a killed execute of this plan (by its name: ours; never follows a link)
        fd = os.open(RESERVE_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
        try:
            os.posix_fallocate(fd, 0, nbytes)
        except BaseException:
            os.close(fd)
            os.unlink(RESERVE_NAME, dir_fd=folder)
            raise
        os.close(fd)
    except BaseException:
        os.close(folder)
        raise
    _reserves[Path(directory)] = (folder, os.fstat(folder))


def release_space(directory: Path) -> bool:
    """Give the reserve of `directory` (or of a directory above it) back; whether there was one."""
    for candidate in (Path(directory), *Path(directory).parents):
        held = _reserves.pop(candidate, None)
        if held is not None:
            folder, opened = held
            if still_ours(folder, opened):  # else user code closed it: the number is not ours to use or close
                try:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(RESERVE_NAME, dir_fd=folder)
                finally:
                    os.close(folder)
            return True
    return False


def write_bytes_atomic(path: Path, data: bytes, *, beneath: Path | None = None, beneath_fd: int | None = None) -> None:
    """Write to a temporary file beside `path`, fsync, then `os.replace`; the target is untouched on failure.

    With `beneath` (a folder above `path`: the snapshot), the folders between it and `path` are opened one by one
    without following a link (`open_beneath`), so a folder swapped for a link after a check never carries the write out;
    with `beneath_fd` too (`beneath`'s open descriptor: a held snapshot), they are opened from that descriptor, so the write
    lands in the directory it holds even if `beneath`'s path now names another one.
    On a full disk, a space reserve held for this snapshot (`reserve_space`) is released and the write tried once more.
    """
    path = path if isinstance(path, Path) else Path(path)
    refuse_other_process(f"writing {path.name}")
    try:
        _write_bytes_atomic(path, data, beneath, beneath_fd)
    except OSError as exc:
        if exc.errno != errno.ENOSPC or not release_space(path.parent):
            raise
        _write_bytes_atomic(path, data, beneath, beneath_fd)


def _open_folder(path: Path, beneath: Path | None, beneath_fd: int | None = None) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    if beneath is None:
        return os.open(path.parent, flags)
    root: Path | int = beneath if beneath_fd is None else beneath_fd
    if path.parent == beneath:
        return open_directory(root)
    return open_beneath(root, path.parent.relative_to(beneath).as_posix(), flags)


def _write_bytes_atomic(path: Path, data: bytes, beneath: Path | None = None, beneath_fd: int | None = None) -> None:
    """Through a descriptor of `path`'s folder, resolved once: the temporary file is made, written and renamed inside
    that folder even if the folder's name is swapped for a link meanwhile. (The folder's own path is followed unless
    `beneath` says where following stops: a store or cache may be reached through a link, and `outputs/` is reached
    through the descriptor `OutputsDir` holds.)"""
    folder = _open_folder(path, beneath, beneath_fd)
    try:
        fd, tmp = _create_temporary(folder, path.name)
        try:
            try:
                os.fchmod(fd, FILE_MODE)
                view = memoryview(data)
                while view:  # a short write is completed, never dropped
                    view = view[os.write(fd, view):]
                sync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=folder)
            raise
    finally:
        os.close(folder)


def _create_temporary(folder: int, name: str) -> tuple[int, str]:
    """A new `.<name>.<random>.tmp` in the open folder (`mkstemp`, which takes no folder descriptor, done by hand)."""
    for _ in range(100):
        tmp = f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no free temporary name for {name}")


def write_model_atomic(path: Path, model: BaseModel, *, beneath: Path | None = None, beneath_fd: int | None = None) -> None:
    """Serialise a schema model with orjson (sorted keys, indented) and write it atomically (`beneath`, `beneath_fd`: as for
    `write_bytes_atomic`)."""
    write_bytes_atomic(path, orjson.dumps(model.model_dump(mode="json"), option=JSON_OPTIONS) + b"\n", beneath=beneath,
                       beneath_fd=beneath_fd)


def fsync_dir(directory: Path) -> None:
    """Persist a rename or a new entry in `directory`."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        sync(fd)
    finally:
        os.close(fd)


_deferring = threading.local()
"""`device`: the filesystem whose syncs this thread leaves to its group commit (`syncs_deferred_on`)."""


@contextlib.contextmanager
def syncs_deferred_on(device: int) -> Iterator[None]:
    """On this thread, a file (or folder) on filesystem `device` is not fsynced where it is written: the caller syncs
    that whole filesystem (`syncfs`) before it writes anything that vouches for the file (a seal). One sync then
    serves the ten-odd files of many snapshots (`genrun.runner.group_commit`)."""
    outer = getattr(_deferring, "device", None)
    _deferring.device = device
    try:
        yield
    finally:
        _deferring.device = outer


def sync(fd: int) -> None:
    """fsync `fd`, unless this thread defers the syncs of its filesystem (`syncs_deferred_on`)."""
    device = getattr(_deferring, "device", None)
    if device is not None and os.fstat(fd).st_dev == device:
        return
    os.fsync(fd)


_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def syncfs(path: Path) -> None:
    """Every written file and entry of the filesystem holding `path` on disk: Linux's `syncfs(2)` (the one filesystem),
    elsewhere `sync(2)` (all of them); raises OSError when the filesystem reports a failed write-back."""
    if _libc is None:
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if _libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs {path}: {os.strerror(err)}")
    finally:
        os.close(fd)

