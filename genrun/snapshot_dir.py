"""One snapshot directory: read an artifact into its model, write one atomically, list the entries, tell the state.

Every reader and writer of snapshot artifacts (runner, CLI, analysis, watch, lineage, export, sweeps)
goes through `SnapshotDir`, so each file is handled the same way everywhere:

- read: bounded, never through a symbolic link, never blocking on a FIFO or device (`genrun._safe_read`),
  older formats migrated in memory, a newer format refused (`written by genrun X (format N); this genrun
  reads up to M: upgrade`); every failure is one typed `ArtifactError` whose `reason` completes "<file> ...".
- write: atomic (temporary file beside the target, fsync, `os.replace`; a link at the target is replaced,
  never written through), and only by a `SnapshotDir(path, writable=True)`; analysis opens them read-only.
- append: the append-only streams (progress, run log, stage progress, sweep progress) are opened one way,
  `open_stream`: `O_APPEND|O_NOFOLLOW|O_CLOEXEC`, relative to the directory's descriptor; one `os.write` per record.
- held: inside `held_open`, every read, write, listing and stream is relative to the directory's descriptor, opened once:
  a run holds its snapshot so from the first execution file to the seal, and everything it writes lands in the directory
  it opened even if the snapshot's path is renamed, or replaced by a link or another directory, meanwhile.

It lives beside `genrun.schemas` rather than in `analysis` or `runner` because both use it: analysis must
stay torch-free and never write, the runner writes. Torch-free: stdlib, orjson, pydantic, `genrun.schemas`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

import orjson
from pydantic import BaseModel, TypeAdapter, ValidationError

from genrun._safe_read import (MAX_JSON_BYTES, MAX_PROGRESS_BYTES, MAX_TOKEN_IDS_BYTES, UnsafeFile, open_beneath, open_directory, read_at,
                               read_beneath, walk_entries)
from genrun.runner.errors import SnapshotError
from genrun.schemas import EVENT_ADAPTER, AnyEvent, NewerFormat, layout
from genrun.schemas.digests import parse_sha256sum, sha256_bytes
from genrun.schemas.sweep import ATTEMPT_ADAPTER, ItemAttempt

_M = TypeVar("_M", bound=BaseModel)
_EVENTS_ADAPTER: TypeAdapter[list[AnyEvent]] = TypeAdapter(list[AnyEvent])

READ_BOUNDS: Mapping[str, int] = MappingProxyType({
    layout.PROGRESS: MAX_PROGRESS_BYTES,
    layout.SWEEP_PROGRESS: MAX_PROGRESS_BYTES,
    layout.TOKEN_IDS: MAX_TOKEN_IDS_BYTES,
    layout.PROMPT_TOKEN_IDS: MAX_TOKEN_IDS_BYTES,
})
"""Bytes read at most of the artifacts that may be larger than a JSON record (`MAX_JSON_BYTES` for every other file)."""


class ArtifactError(SnapshotError):
    """A snapshot file could not be read as asked; `reason` completes "<name> ..." (what a finding shows)."""

    def __init__(self, directory: Path, name: str, reason: str) -> None:
        self.directory, self.name, self.reason = directory, name, reason
        super().__init__(f"{directory / name}: {reason}")


class ArtifactMissing(ArtifactError):
    """The file does not exist."""


class ArtifactUnreadable(ArtifactError):
    """A link, FIFO, device or directory instead of a regular file, a file over its bound, or one the system will not read."""


class ArtifactDamaged(ArtifactError):
    """Not valid JSON (or sha256sum text), or JSON its model rejects."""


class ManifestDamaged(ArtifactDamaged):
    """A sha256sum file that does not parse; `digest` is still the sha256 of its bytes (what a sign-off may be bound to)."""

    def __init__(self, directory: Path, name: str, reason: str, digest: str) -> None:
        self.digest = digest
        super().__init__(directory, name, reason)


class ArtifactNewer(ArtifactError):
    """Written by a newer genrun in a format this one does not read."""

    def __init__(self, directory: Path, name: str, version: int, written_by: str | None) -> None:
        self.version, self.written_by = version, written_by
        super().__init__(directory, name, layout.newer_format_message(version, written_by))


class Manifest(NamedTuple):
    """A sha256sum file (`frozen-sha256.txt`, `manifest-sha256.txt`) as read."""

    entries: Mapping[str, str]
    """Relative path -> hex sha256."""
    digest: str
    """sha256 of the file itself: the plan or snapshot digest."""


class AppendStream:
    """One append-only file of a snapshot, open for appending (`SnapshotDir.open_stream`): whole records, one write each."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @property
    def fd(self) -> int:
        """The descriptor (for `fcntl.flock`, or a writer that keeps its own hot path); `ValueError` once closed."""
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd is None

    def write(self, data: bytes) -> None:
        """Append `data` (whole records, newline-terminated) with one `os.write`; a short write is completed, never dropped."""
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def fsync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        """Close (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


class SnapshotDir:
    """A snapshot (or sweep snapshot) directory; every artifact of it is read and written through this object."""

    def __init__(self, path: str | os.PathLike[str], *, writable: bool = False) -> None:
        self.path = path if isinstance(path, Path) else Path(path)  # a Path is immutable: parsing it again costs, per snapshot
        self.writable = writable
        self._held_fd: int | None = None
        """The directory's descriptor inside `held_open`."""
        self._held_id: tuple[int, int] = (0, 0)
        """(device, inode) of the held directory: user code may close the descriptor and its number be reused."""

    def __repr__(self) -> str:
        return f"SnapshotDir({str(self.path)!r}{', writable=True' if self.writable else ''})"

    # -- reading ------------------------------------------------------------------------------------------------------
    def has(self, name: str) -> bool:
        """Whether an entry of that name exists (of any kind, a link included: reading it says what is wrong)."""
        return self.lstat(name) is not None

    def lstat(self, name: str) -> os.stat_result | None:
        """The entry `name` as it is (a link not followed); `None` when there is none (or it cannot be reached)."""
        try:
            return self._lstat(name)
        except OSError:
            return None

    def _lstat(self, name: str) -> os.stat_result:
        held = self._held()
        return os.lstat(name, dir_fd=held) if held is not None else os.lstat(self.path / name)

    def _held(self) -> int | None:
        """The held descriptor (`None` outside `held_open`); a writable object's is checked to be still the directory it
        opened: user code in a run's process may have closed it, and its number may now be another file's, which must
        never be written through. (A reader runs no user code: `ls` reads four files of each of 100,000 snapshots.)"""
        if self._held_fd is None or not self.writable:
            return self._held_fd
        try:
            st = os.fstat(self._held_fd)
        except OSError:
            st = None
        if st is None or (st.st_dev, st.st_ino) != self._held_id:
            raise OSError(errno.EBADF, f"the descriptor genrun held for {self.path} was closed (by user code?)")
        return self._held_fd

    @contextlib.contextmanager
    def held_open(self) -> Iterator["SnapshotDir"]:
        """This directory opened once: inside, every file of it is read, written, listed and appended to relative to that
        descriptor (one open per file, not three: a cold `ls` reads four files of each of 100,000 snapshots; and a run's
        files land in the directory it opened whatever its path names later). `FileNotFoundError` when it is gone. Inside an
        outer `held_open` of the same object, the outer descriptor serves."""
        if self._held_fd is not None:
            yield self
            return
        self._held_fd = open_directory(self.path)
        opened = os.fstat(self._held_fd)
        self._held_id = (opened.st_dev, opened.st_ino)
        try:
            yield self
        finally:
            fd, self._held_fd = self._held_fd, None
            with contextlib.suppress(OSError):  # closed by user code: its number is not ours to close
                now = os.fstat(fd)
                if (now.st_dev, now.st_ino) == self._held_id:
                    os.close(fd)

    @property
    def fd(self) -> int:
        """The descriptor `held_open` holds (for a caller that opens, creates or changes entries itself); `ValueError`
        outside it."""
        held = self._held()
        if held is None:
            raise ValueError(f"{self!r} is not held open; use it inside 'with snapshot.held_open()'")
        return held

    def open_file(self, name: str) -> int:
        """A descriptor of entry `name` (`/`-separated) opened for reading without blocking, no link followed on the way nor
        at the end (`open_beneath`): relative to the held descriptor, else to the path. `UnsafeFile` / `OSError` as it gives."""
        held = self._held()
        return open_beneath(held if held is not None else self.path, name)

    def read_bytes(self, name: str, *, offset: int = 0, limit: int | None = None) -> bytes:
        """The bytes of regular file `name` from `offset` (what was appended since a previous read), bounded by its kind
        (`limit`: by the caller's bound instead, for a file outside the artifacts' own layout)."""
        limit = limit if limit is not None else READ_BOUNDS.get(name, MAX_JSON_BYTES)
        try:
            held = self._held()
            if held is not None:
                if not offset and "/" not in name:
                    return read_at(held, name, limit, self.path)
                return read_beneath(held, name, limit, offset)
            return read_beneath(self.path, name, limit, offset)
        except FileNotFoundError:
            raise ArtifactMissing(self.path, name, "does not exist") from None
        except UnsafeFile as exc:
            raise ArtifactUnreadable(self.path, name, str(exc)) from None
        except OSError as exc:
            raise ArtifactUnreadable(self.path, name, f"cannot read: {exc.strerror or exc}") from None

    def read_json(self, name: str) -> Any:
        """`name` parsed as plain JSON (for key-by-key comparison, or a file whose own format may be newer)."""
        return self._loads(name, self.read_bytes(name))

    def _loads(self, name: str, data: bytes) -> Any:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ArtifactDamaged(self.path, name, f"not valid JSON: {exc}") from None

    def read(self, name: str, model: type[_M]) -> _M:
        """Artifact `name` validated as `model`: older formats migrated in memory, a newer one refused (`ArtifactNewer`)."""
        return self.parse(name, model, self.read_bytes(name))

    def parse(self, name: str, model: type[_M], data: bytes) -> _M:
        """`read` of bytes the caller read from artifact `name` already (e.g. to hash them first), with `read`'s errors."""
        return self.validate(name, model, self._loads(name, data))

    def read_optional(self, name: str, model: type[_M]) -> _M | None:
        """`read`, but `None` when the file is absent (a run that never got that far); damage still raises."""
        try:
            return self.read(name, model)
        except ArtifactMissing:
            return None

    def validate(self, name: str, model: type[_M], data: Any) -> _M:
        """`data` (the JSON of artifact `name`, as `read_json` gave it) validated as `model`, with `read`'s errors."""
        try:
            return model.model_validate(data)
        except NewerFormat as exc:  # never guess at a newer layout: say which genrun can read it
            # environment.json names the genrun that planned the run; a sign-off may come from any later one
            run_artifact = not name.startswith(layout.SIGNOFFS_DIR + "/")
            written_by = exc.written_by or (self.recorded_genrun_version() if run_artifact else None)
            raise ArtifactNewer(self.path, name, exc.version, written_by) from None
        except ValidationError as exc:
            raise ArtifactDamaged(self.path, name, describe_validation_error(exc)) from None

    def read_manifest(self, name: str) -> Manifest:
        """A sha256sum file: its entries and its own digest."""
        data = self.read_bytes(name)
        try:
            entries = parse_sha256sum(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ManifestDamaged(self.path, name, f"not sha256sum format: {exc}", sha256_bytes(data)) from None
        return Manifest(MappingProxyType(entries), sha256_bytes(data))

    def recorded_genrun_version(self) -> str | None:
        """`genrun_version` as `environment.json` records it, read as plain JSON (its own format may be newer); `None` if unreadable."""
        try:
            return layout.recorded_genrun_version(self.read_json(layout.ENVIRONMENT))
        except ArtifactError:
            return None

    # -- listing and state --------------------------------------------------------------------------------------------
    def entries(self, skip_top: tuple[str, ...] = (), *, empty_dirs: bool = False,
                unlistable: Callable[[str, OSError], None] | None = None) -> Iterator[tuple[str, os.stat_result]]:
        """`(relative path, lstat)` of every non-directory entry, links included but never followed; `skip_top` names
        top-level entries left out (e.g. `signoffs`); `empty_dirs` and `unlistable` as `walk_entries` takes them."""
        held = self._held()
        return walk_entries(held if held is not None else self.path, skip_top, empty_dirs=empty_dirs, unlistable=unlistable)

    def top_names(self) -> list[str]:
        """Names of the entries directly in the directory (any kind), unsorted."""
        held = self._held()
        return os.listdir(held if held is not None else self.path)

    def names(self) -> list[str]:
        """Relative paths of the regular files, `signoffs/` left out (it grows after the seal), sorted."""
        return sorted(rel for rel, st in self.entries(skip_top=(layout.SIGNOFFS_DIR,)) if stat.S_ISREG(st.st_mode))

    def state(self) -> layout.SnapshotState:
        """planning / planned / running / incomplete / sealed from the files present (`layout.snapshot_state`, the one rule).

        `abandoned` also needs the planner's lock (`genrun.runner.store.planning_holder`), which files cannot show."""
        return layout.snapshot_state(self.names())

    # -- writing ------------------------------------------------------------------------------------------------------
    def write(self, name: str, model: BaseModel) -> Path:
        """Write artifact `name` from its model atomically (sorted keys, indented); returns its path."""
        from genrun.runner._io import write_model_atomic  # the writer's side (with the disk reserve) is the runner's

        path = self._target(name)
        with self._unsafe_as_unwritable(name):
            write_model_atomic(path, model, beneath=self.path, beneath_fd=self._held())
        return path

    def write_bytes(self, name: str, data: bytes) -> Path:
        """Write a file that has no model (the request source, a manifest, an output) atomically; returns its path."""
        from genrun.runner._io import write_bytes_atomic

        path = self._target(name)
        with self._unsafe_as_unwritable(name):
            write_bytes_atomic(path, data, beneath=self.path, beneath_fd=self._held())
        return path

    def open_stream(self, name: str, *, new: bool = True) -> AppendStream:
        """Open append-only file `name` (directly in the snapshot) for appending: `O_APPEND|O_NOFOLLOW|O_CLOEXEC`, relative to
        the directory's descriptor, so a link planted at the name is refused, never written through. `new`: it must not
        exist yet (`O_EXCL`: an earlier execution's stream is evidence, never appended to); else it is created or continued.
        `OSError` as the system gives it."""
        if not self.writable:
            raise PermissionError(f"{self!r} is read-only: open it with SnapshotDir(path, writable=True) to append to {name}")
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"{name!r} is not the name of a file directly in a snapshot")
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_EXCL if new else 0)
        held = self._held()
        if held is not None:
            return AppendStream(os.open(name, flags, 0o644, dir_fd=held), self.path / name)
        directory = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            return AppendStream(os.open(name, flags, 0o644, dir_fd=directory), self.path / name)
        finally:
            os.close(directory)

    def copy_in(self, name: str, source: Path) -> str:
        """Copy regular file `source` into new file `name` (`/`-separated), making the folders on the way, none followed
        through a link; returns the sha256 of the bytes copied (the caller compares it with the digest it planned)."""
        from genrun.runner._io import DIR_MODE, FILE_MODE

        *folders, base = self._writable_parts(name)
        held = self._held()
        folder = open_directory(held if held is not None else self.path)
        try:
            for part in folders:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, DIR_MODE, dir_fd=folder)
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
                os.close(folder)
                folder = inner
            target = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE, dir_fd=folder)
        finally:
            os.close(folder)
        digest = hashlib.sha256()
        with open(source, "rb") as reading, os.fdopen(target, "wb") as writing:
            while chunk := reading.read(1 << 20):
                digest.update(chunk)
                writing.write(chunk)
        return digest.hexdigest()

    @contextlib.contextmanager
    def _unsafe_as_unwritable(self, name: str) -> Iterator[None]:
        """A folder found to be a link while writing (swapped in after `_target`'s check) is the artifact's problem."""
        try:
            yield
        except UnsafeFile as exc:
            raise ArtifactUnreadable(self.path, name, f"cannot be written: {exc}") from None

    def _target(self, name: str) -> Path:
        """`name` inside the snapshot, refusing a read-only object, a path leaving the directory, or a linked folder."""
        parts = self._writable_parts(name)
        for depth, part in enumerate(parts[:-1], start=1):  # a linked folder would carry the write out of the snapshot
            if not stat.S_ISDIR(self._lstat("/".join(parts[:depth])).st_mode):
                raise ArtifactUnreadable(self.path, name, f"cannot be written: {part}/ is not a directory of the snapshot")
        return self.path / name

    def _writable_parts(self, name: str) -> list[str]:
        """`name`'s parts, refusing a read-only object or a path leaving the directory."""
        if not self.writable:
            raise PermissionError(f"{self!r} is read-only: open it with SnapshotDir(path, writable=True) to write {name}")
        parts = name.split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"{name!r} is not a file name inside a snapshot (a relative path without '.', '..' or empty parts)")
        return parts


def describe_validation_error(exc: ValidationError) -> str:
    """`does not match its schema: field.path: message; ...` for the first few errors: enough to find the damage."""
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        parts.append(f"{where}: {err['msg']}")
    more = exc.error_count() - len(parts)
    return "does not match its schema: " + "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


class SweepProgress(NamedTuple):
    """`sweep-progress.ndjson` as read (`read_sweep_progress`)."""

    attempts: list[ItemAttempt]
    """Every attempt record, in order."""
    invalid: list[tuple[int, str]]
    """(1-based line number, why) of complete lines that are not an attempt record."""


def read_sweep_progress(sweep: SnapshotDir) -> SweepProgress:
    """The one reader of a sweep's `sweep-progress.ndjson` (bounded, never through a link: `read_bytes`); absent: empty.
    A last line without its newline is left out: the driver was killed while writing it, or is writing it now."""
    try:
        data = sweep.read_bytes(layout.SWEEP_PROGRESS)
    except ArtifactMissing:
        return SweepProgress([], [])
    lines = data.split(b"\n")[:-1]  # the part after the last newline is torn or still being written
    attempts: list[ItemAttempt] = []
    invalid: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            attempts.append(ATTEMPT_ADAPTER.validate_json(line))
        except ValidationError as exc:
            invalid.append((number, describe_validation_error(exc)))
    return SweepProgress(attempts, invalid)


def parse_progress_lines(lines: Sequence[bytes], first_number: int = 1) -> tuple[list[AnyEvent], list[tuple[int, str]]]:
    """Complete lines of a progress stream (newlines removed) -> (events, [(1-based line number, why)] for those that
    do not parse). Fast path: one orjson array parse and one list validation; line by line only on error."""
    try:
        return _EVENTS_ADAPTER.validate_python(orjson.loads(b"[" + b",".join(lines) + b"]")), []
    except (orjson.JSONDecodeError, ValidationError):
        pass
    events: list[AnyEvent] = []
    invalid: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=first_number):
        if not line.strip():
            invalid.append((number, "empty line"))
            continue
        try:
            events.append(EVENT_ADAPTER.validate_json(line))
        except ValidationError as exc:
            invalid.append((number, describe_validation_error(exc)))
    return events, invalid
