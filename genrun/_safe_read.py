"""Reading a snapshot that may be hostile: regular files inside it only, never a link out, never unbounded.

A snapshot is a directory anyone could have edited. Every reader (`SnapshotDir`, and through it analysis,
the runner and the CLI) opens each file without following a final symbolic link and without blocking
(a FIFO would hang `open`), checks on the open descriptor that it is a regular file, and refuses one
larger than the bound for its kind; the inventory never descends into a linked directory. Every
refusal is a sentence that completes "<file> ...".
"""

import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

MAX_JSON_BYTES = 64 << 20
"""JSON artifacts: the largest real one (a long run's summary) is a few MB."""
MAX_PROGRESS_BYTES = 64 << 20
"""`progress.ndjson`: ~200k records; a million-token run at the default cadence writes ~4k."""
MAX_PROGRESS_LINES = 500_000
"""Lines parsed one by one at most (a file of bare newlines is refused, not split into millions of findings)."""
MAX_TOKEN_IDS_BYTES = 128 << 20
"""`generated-token-ids.safetensors`: 16M int64 ids."""
_NO_FOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_FOLDER_NO_FOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class UnsafeFile(Exception):
    """A file analysis refuses to read; the message completes "<file> ..."."""


def kind_of(mode: int) -> str:
    """`a FIFO`, `a symbolic link`, `a character device`, ... for a non-regular `st_mode`."""
    kinds = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def open_beneath(root: str | os.PathLike[str] | int, rel: str, flags: int = _NO_FOLLOW) -> int:
    """Open `rel` (`/`-separated) inside directory `root` (a path, or a directory's open descriptor), each folder on the way
    opened by descriptor without following a link, and the file itself with `O_NOFOLLOW`: a link anywhere inside the
    snapshot is never followed, even one swapped in for a folder after it was listed. Raises `UnsafeFile` for a linked
    folder, `OSError` otherwise."""
    *folders, name = rel.split("/")
    fd = open_directory(root)
    try:
        for folder in folders:
            try:
                inner = os.open(folder, _FOLDER_NO_FOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(os.path.join(f"/proc/self/fd/{fd}", folder)):
                    raise UnsafeFile(f"is reached through {folder}/, a symbolic link; a snapshot holds regular files only") from None
                raise
            os.close(fd)
            fd = inner
        try:
            return os.open(name, flags | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as exc:  # a folder asked for (O_DIRECTORY) that is a link: named like a linked folder on the way
            if (flags & os.O_DIRECTORY and exc.errno in (errno.ELOOP, errno.ENOTDIR)
                    and os.path.islink(os.path.join(f"/proc/self/fd/{fd}", name))):
                raise UnsafeFile(f"is reached through {name}/, a symbolic link; a snapshot holds regular files only") from None
            raise  # a file: the caller names it (`read_regular` says where the link points)
    finally:
        os.close(fd)


def open_directory(directory: str | os.PathLike[str] | int) -> int:
    """A new descriptor of `directory`: a path (followed), or an open directory descriptor (the directory it holds, whatever
    its path names now)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
    if isinstance(directory, int):
        return os.open(".", flags, dir_fd=directory)
    return os.open(directory, flags)


def read_regular(path: str | os.PathLike[str], limit: int, offset: int = 0, *, root: Path | None = None) -> bytes:
    """The bytes of regular file `path` from `offset` on, the file at most `limit` bytes long; raises `UnsafeFile`
    (or `OSError` for an unreadable one). `offset` lets a follower read only what was appended since its last read.
    With `root` (a folder above `path`), no link between them is followed either (`open_beneath`)."""
    if root is not None:
        return read_beneath(root, Path(path).relative_to(root).as_posix(), limit, offset)
    try:
        fd = os.open(path, _NO_FOLLOW)
    except OSError:
        _refuse_link(path)
        raise
    return _read_open(fd, limit, offset=offset)


def read_beneath(root: str | os.PathLike[str] | int, rel: str, limit: int, offset: int = 0) -> bytes:
    """`read_regular` of `rel` (`/`-separated) inside `root` (a path or an open directory descriptor), given as the two parts:
    every snapshot read goes through here, and building and splitting a `Path` per file cost more than the file's own opens
    and read (a cold `ls` reads 40,000)."""
    try:
        fd = open_beneath(root, rel)
    except OSError:
        if isinstance(root, int):
            _refuse_link(rel, root)
        else:
            _refuse_link(os.path.join(root, rel))
        raise
    return _read_open(fd, limit, offset=offset)


def read_at(directory_fd: int, name: str, limit: int, directory: str | os.PathLike[str]) -> bytes:
    """`read_regular` of `name` directly inside the directory open as `directory_fd` (its path is `directory`, for the
    messages): one open per file where `read_beneath` needs three (a cold `ls` reads four files of each of 100,000
    snapshots). The file is opened with `O_NOFOLLOW`, as by `read_beneath`."""
    try:
        fd = os.open(name, _NO_FOLLOW, dir_fd=directory_fd)
    except OSError:
        _refuse_link(name, directory_fd)
        raise
    return _read_open(fd, limit)


def _refuse_link(path: str | os.PathLike[str], dir_fd: int | None = None) -> None:
    """After a failed open: `UnsafeFile` naming the target when `path` (relative to `dir_fd` when given) is a symbolic link
    (else the caller re-raises)."""
    try:
        is_link = stat.S_ISLNK(os.lstat(path, dir_fd=dir_fd).st_mode)
    except (OSError, ValueError):
        return
    if is_link:
        raise UnsafeFile(f"is a symbolic link (to {os.readlink(path, dir_fd=dir_fd)!r}); a snapshot holds regular files only") from None


MAX_TOKENIZER_BYTES = 256 << 20
"""A model's `tokenizer.json` / `tokenizer_config.json` (large vocabularies are tens of MB)."""


def read_model_file(path: Path, limit: int = MAX_TOKENIZER_BYTES) -> bytes:
    """A file of the model directory: links are followed (a Hugging Face cache is made of them), but the target
    must be a regular file of at most `limit` bytes, opened without blocking (a FIFO, `/dev/zero` are refused)."""
    return _read_open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)), limit, "a model file must be one")


def _read_open(fd: int, limit: int, rule: str = "a snapshot holds regular files only", offset: int = 0) -> bytes:
    """Read an open descriptor (closed afterwards) from `offset` if it is a regular file of at most `limit` bytes."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"is {kind_of(st.st_mode)}, not a regular file; {rule}")
        if st.st_size > limit:
            raise UnsafeFile(f"is {st.st_size:,} bytes, more than the {limit:,} analysis reads of it")
        if offset:
            os.lseek(fd, offset, os.SEEK_SET)
        # reads sized by the file, not by the bound: a buffer of `limit` bytes per small JSON file cost more than the read
        room, chunks = max(0, limit - offset) + 1, []
        while room > 0 and (chunk := os.read(fd, asked := min(room, max(st.st_size - offset + 1, 1 << 16)))):
            chunks.append(chunk)
            room -= len(chunk)
            if len(chunk) < asked:  # a regular file reads short only at its end: no second read to hear it (one syscall per file)
                break
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if offset + len(data) > limit:  # grew while being read
        raise UnsafeFile(f"is more than the {limit:,} bytes analysis reads of it")
    return data


def walk_entries(root: str | os.PathLike[str] | int, skip_top: tuple[str, ...] = (), *, empty_dirs: bool = False,
                 unlistable: Callable[[str, OSError], None] | None = None) -> Iterator[tuple[str, os.stat_result]]:
    """`(relative path, lstat)` of every non-directory entry under `root` (a path, or a directory's open descriptor, left
    open), links included but never followed, and with `empty_dirs` of every empty directory below the top (something
    added that no manifest can list). Iterative: any depth. Each folder below the top is opened by descriptor without
    following a link, so the walk stays in the directory it began in, whatever its path or a folder's name is swapped for.

    A directory that cannot be listed raises `OSError`, or, with `unlistable`, is passed to it as `(relative path + "/",
    error)` and the walk goes on: one unreadable folder must not hide the rest of the snapshot."""
    stack = [(open_directory(root), "")]
    try:
        while stack:
            fd, prefix = stack.pop()
            try:
                try:
                    with os.scandir(fd) as listing:
                        entries = list(listing)
                except OSError as exc:
                    if unlistable is None or not prefix:
                        raise
                    unlistable(prefix, exc)
                    continue
                if empty_dirs and not entries and prefix:
                    yield prefix.rstrip("/"), os.fstat(fd)
                for entry in entries:
                    rel = prefix + entry.name
                    if not prefix and entry.name in skip_top:
                        continue
                    st = entry.stat(follow_symlinks=False)
                    if not stat.S_ISDIR(st.st_mode):
                        yield rel, st
                        continue
                    try:
                        inner = os.open(entry.name, _FOLDER_NO_FOLLOW, dir_fd=fd)
                    except OSError as exc:  # gone, or swapped for a link since it was listed
                        if unlistable is None:
                            raise
                        unlistable(rel + "/", exc)
                        continue
                    stack.append((inner, rel + "/"))
            finally:
                os.close(fd)
    finally:
        for fd, _ in stack:
            os.close(fd)
