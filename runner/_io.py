"""Atomic file writes: a reader sees the old file or the new one, never half of either."""

import contextlib
import os
import tempfile
from pathlib import Path

import orjson
from pydantic import BaseModel

JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS

# mkstemp creates 0600 files; snapshot files should get the permissions a plain open() would.
_UMASK = os.umask(0o022)
os.umask(_UMASK)
FILE_MODE = 0o666 & ~_UMASK
DIR_MODE = 0o777 & ~_UMASK


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file beside `path`, fsync, then `os.replace`; the target is untouched on failure."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_model_atomic(path: Path, model: BaseModel) -> None:
    """Serialise a schema model with orjson (sorted keys, indented) and write it atomically."""
    write_bytes_atomic(path, orjson.dumps(model.model_dump(mode="json"), option=JSON_OPTIONS) + b"\n")


def fsync_dir(directory: Path) -> None:
    """Persist a rename or a new entry in `directory`."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

