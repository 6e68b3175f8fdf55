"""The snapshot store: create a snapshot atomically, seal it, find and list snapshots.

A snapshot is frozen in a dot-prefixed temporary sibling and renamed into place, so a reader
never sees a half-frozen plan. It is complete only once `manifest-sha256.txt` exists.
"""

import contextlib
import errno
import hashlib
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

from genrun._safe_read import UnsafeFile
from genrun.schemas import layout
from genrun.schemas.digests import render_sha256sum, sha256_bytes
from genrun.snapshot_dir import SnapshotDir

from ._io import DIR_MODE, fsync_dir, sync
from .executing_process import refuse_other_process
from ._locks import lock_holder, try_exclusive
from .errors import SnapshotError, StoreError
from .interrupts import deferred
# where the store is: its own module (`ls` locates a store without this one's imports), re-exported for older callers
from .store_location import STORE_ENV, StoreLocation, existing_store, locate_store, missing_store, resolve_store  # noqa: F401

READ_ONLY = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH  # 0o444


def new_snapshot_id(name: str, now: datetime | None = None) -> str:
    """`YYYYMMDDTHHMMSSZ-<name>-<6 hex>`; the random suffix keeps concurrent runs apart."""
    now = now or datetime.now(timezone.utc)
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{name}-{secrets.token_hex(3)}"


def describe_os_error(exc: OSError, where: Path) -> str:
    """A message that says what is wrong with the store and what to do."""
    reasons: dict[int | None, str] = {  # `errno` is None for an OSError raised without one
        errno.ENOSPC: "the filesystem is full; free space or choose another store with --store",
        errno.EDQUOT: "the disk quota is exhausted; free space or choose another store with --store",
        errno.EROFS: "the filesystem is read-only; choose a writable store with --store or GENRUN_STORE",
        errno.EACCES: "permission denied; choose a writable store with --store or GENRUN_STORE",
        errno.EPERM: "operation not permitted; choose a writable store with --store or GENRUN_STORE",
    }
    fix = reasons.get(exc.errno, f"{exc.strerror or exc}")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = f"{fix} ({_free_space(where)})"
    return f"cannot write the snapshot store at {where}: {fix}"


def _free_space(where: Path) -> str:
    """`1.2 MB free, 0 inodes free` of the filesystem holding `where` (or its nearest existing parent)."""
    from genrun.schemas.rendering import human_bytes

    probe = Path(where)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        st = os.statvfs(probe)
    except OSError:
        return "free space unknown"
    return f"{human_bytes(st.f_bavail * st.f_frsize)} free, {st.f_favail:,} inodes free"


def create_snapshot(store: Path, name: str, freeze: Callable[[SnapshotDir], None]) -> Path:
    """Make `<store>/<id>/` by calling `freeze(snapshot)` on a temporary sibling (held open, writable), then renaming it
    into place.

    On any failure the temporary directory is removed and nothing appears in the store. The
    temporary directory is locked while this process lives, so `genrun gc` never takes it for abandoned.
    """
    tmp: Path | None = None
    lock: int | None = None
    try:
        with deferred():  # a signal waits until `tmp` is known, so the cleanup below can remove it
            store.mkdir(parents=True, exist_ok=True)
            tmp, lock = locked_temporary(store)
        with SnapshotDir(tmp, writable=True).held_open() as planned:  # every frozen file is written relative to it
            freeze(planned)
            write_frozen_manifest(planned)
        final = _rename_into_place(tmp, store, name)
        fsync_dir(store)
        return final
    except OSError as exc:
        _remove_temporary(tmp)
        raise StoreError(describe_os_error(exc, store)) from exc
    except BaseException:
        _remove_temporary(tmp)
        raise
    finally:
        if lock is not None:
            os.close(lock)  # releases the flock


def locked_temporary(store: Path) -> tuple[Path, int]:
    """A new `.tmp-*` directory and a descriptor holding an exclusive flock on it.

    `genrun gc` removes a `.tmp-*` directory only while holding its lock; one it took between
    `mkdtemp` and the lock here is gone or locked, and the planner simply makes another.
    """
    for _ in range(16):
        tmp = Path(tempfile.mkdtemp(prefix=layout.PLANNING_PREFIX, dir=store))
        try:
            fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except FileNotFoundError:
            continue
        locked = try_exclusive(fd)
        if locked and os.fstat(fd).st_nlink > 0:  # 0: gc removed it before releasing the lock
            os.chmod(tmp, DIR_MODE)  # mkdtemp makes 0700; snapshots are meant to be shared read-only
            return tmp, fd
        os.close(fd)
        if not locked:  # gc (removing it) or `ls` (looking) holds it: never leave an empty one behind
            with contextlib.suppress(OSError):
                tmp.rmdir()
    raise StoreError(f"could not lock a new planning directory in {store}: another process keeps taking them")


def planning_holder(tmp: Path) -> str | None:
    """`PID n` of the live planner freezing this `.tmp-*` directory, or `None` when no process holds it (abandoned)."""
    try:
        fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if try_exclusive(fd):
            return None
        return lock_holder(fd)
    finally:
        os.close(fd)


def remove_abandoned_plan(tmp: Path) -> bool:
    """Remove a `.tmp-*` directory only while holding its lock (never a live planner's); `False` when one holds it."""
    fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        if not try_exclusive(fd):
            return False
        shutil.rmtree(tmp, onerror=_unless_gone)  # never follows links inside
        return True
    finally:
        os.close(fd)


def _remove_temporary(tmp: Path | None) -> None:
    """Remove an unfinished plan (gone already when the rename into place happened)."""
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)


def _rename_into_place(tmp: Path, store: Path, name: str) -> Path:
    for _ in range(16):  # a collision needs the same second, name and 24 random bits
        final = store / new_snapshot_id(name)
        try:
            os.rename(tmp, final)  # fails if `final` exists and is non-empty
            return final
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
    raise StoreError(f"could not find a free snapshot id in {store} for name {name!r}")


def write_frozen_manifest(snapshot: SnapshotDir) -> None:
    """`frozen-sha256.txt` over every file present at the end of planning; its sha256 is the plan digest."""
    with snapshot.held_open():
        files = [rel for rel in manifest_candidates(snapshot) if rel != layout.FROZEN_MANIFEST]
        entries = [(rel, _sha256_beneath(snapshot, rel)) for rel in files]
        snapshot.write_bytes(layout.FROZEN_MANIFEST, render_sha256sum(entries))


def seal_snapshot(snapshot: SnapshotDir | Path) -> str:
    """Write `manifest-sha256.txt` over every file but itself and `signoffs/`, then make the files read-only.

    Returns the snapshot digest. Directories stay writable so `signoffs/` can grow and the
    snapshot can be deleted by its owner; verify reports any file the manifest does not list.
    In a sweep worker's item (`group_commit.GroupCommit.owning`), the seal waits for the worker's next group commit.
    `snapshot`: the run's held `SnapshotDir` (sealed in the directory it holds), or a path, opened here.
    """
    snapshot = snapshot if isinstance(snapshot, SnapshotDir) else SnapshotDir(snapshot, writable=True)
    refuse_other_process("sealing", snapshot.path)
    from .group_commit import current

    with snapshot.held_open():
        group = current()
        if group is not None:
            return group.seal(snapshot)
        return seal_files(snapshot)


def seal_files(snapshot: SnapshotDir) -> str:
    """`seal_snapshot`'s work on a held snapshot: hash, read-only, manifest; returns the snapshot digest."""
    files = manifest_candidates(snapshot)
    with contextlib.suppress(FileExistsError):
        os.mkdir(layout.SIGNOFFS_DIR, DIR_MODE, dir_fd=snapshot.fd)
    # Read-only before the manifest exists: a kill in this loop leaves an unsealed snapshot, never a sealed
    # one with writable files. Links are never followed (a planted link must not chmod its target).
    entries = [(rel, _hash_and_make_read_only(snapshot, rel)) for rel in files]
    manifest = render_sha256sum(entries)
    snapshot.write_bytes(layout.MANIFEST, manifest)
    os.chmod(layout.MANIFEST, READ_ONLY, dir_fd=snapshot.fd)
    sync(snapshot.fd)
    return sha256_bytes(manifest)


def manifest_candidates(snapshot: SnapshotDir) -> list[str]:
    """Every file the manifest must cover: all regular files except the manifest itself and `signoffs/`, and every link to
    a file (so that the seal names it); a linked folder is not entered. Listed relative to the held snapshot's descriptor
    (`genrun.schemas.digests.manifest_candidates` lists a path the same way, for readers)."""
    found = []
    for rel, st in snapshot.entries(skip_top=(layout.MANIFEST, layout.SIGNOFFS_DIR)):
        if stat.S_ISLNK(st.st_mode):
            try:  # followed, as `manifest_candidates` does: the seal's own open then refuses it by name
                st = os.stat(rel, dir_fd=snapshot.fd)
            except OSError:
                continue
        if stat.S_ISREG(st.st_mode):
            found.append(rel)
    return sorted(found)


def _sha256_beneath(snapshot: SnapshotDir, rel: str) -> str:
    """sha256 of a file of the snapshot, opened without following a link on its way (a folder swapped for a link is refused)."""
    try:
        fd = snapshot.open_file(rel)
    except UnsafeFile as exc:
        raise SnapshotError(f"{snapshot.path / rel} {exc}: remove it") from None
    with os.fdopen(fd, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _hash_and_make_read_only(snapshot: SnapshotDir, rel: str) -> str:
    """sha256 of a file of the snapshot, then chmod 0444, through one descriptor opened without following a link (nor a
    linked folder on the way): only a regular file with no other name is hashed and changed (a hard link's other name may
    be outside the store, and a chmod through it would change a file genrun does not own)."""
    path = snapshot.path / rel
    try:
        fd = snapshot.open_file(rel)
    except UnsafeFile as exc:
        raise SnapshotError(f"{path} {exc}: remove it") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SnapshotError(f"{path} is not a regular file; a snapshot holds regular files only: remove it")
        if st.st_nlink > 1:
            raise SnapshotError(f"{path} has {st.st_nlink} hard links (the same file has another name, perhaps outside the store); "
                                "the seal never changes such a file: replace it by a copy or plan again")
        digest = hashlib.file_digest(f, "sha256").hexdigest()
        os.fchmod(fd, READ_ONLY)
    return digest


def is_sealed(snapshot_dir: Path) -> bool:
    """Complete snapshots have a manifest."""
    return (Path(snapshot_dir) / layout.MANIFEST).is_file()


def snapshot_state(snapshot_dir: Path) -> layout.SnapshotState:
    """planned / running / incomplete / sealed from the files present (`layout.snapshot_state`, the one rule)."""
    return SnapshotDir(snapshot_dir).state()


def is_planned(snapshot_dir: Path) -> bool:
    """A plan has its frozen manifest."""
    return (Path(snapshot_dir) / layout.FROZEN_MANIFEST).is_file()


def open_snapshot(path: str | Path) -> Path:
    """Check that `path` is a snapshot directory (has `frozen-sha256.txt`) and return it."""
    snapshot_dir = Path(path)
    if not snapshot_dir.is_dir():
        raise SnapshotError(f"snapshot {snapshot_dir} does not exist; list snapshots with 'genrun ls --store DIR'")
    if not is_planned(snapshot_dir):
        raise SnapshotError(
            f"{snapshot_dir} is not a genrun snapshot (no {layout.FROZEN_MANIFEST}); pass a directory made by 'genrun plan' or 'genrun run'"
        )
    return snapshot_dir


def list_snapshots(store: Path) -> list[Path]:
    """Snapshot directories in the store, oldest first (ids sort by time); temporary dirs are skipped."""
    if not store.is_dir():
        return []
    # a sealed snapshot whose frozen manifest was deleted is still listed (and fails verify), never hidden
    return sorted(p for p in store.iterdir() if p.is_dir() and not p.name.startswith(".") and (is_planned(p) or is_sealed(p)))


def _unless_gone(function: Callable, path: str, exc_info: tuple) -> None:
    """rmtree's error hook: an entry already gone (its planner gave the empty directory up) is fine; anything else raises."""
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]


def list_unfinished_plans(store: Path) -> list[Path]:
    """`.tmp-*` directories: plans being frozen now, or left by a process killed while planning (`genrun ls` shows them,
    `genrun gc` removes the abandoned ones)."""
    if not store.is_dir():
        return []
    return sorted(p for p in store.iterdir() if p.name.startswith(layout.PLANNING_PREFIX) and p.is_dir() and not p.is_symlink())


def find_snapshot(ref: str | Path, store: str | Path | None = None) -> Path:
    """What a user typed for SNAPSHOT: an existing directory, else an id or unique id prefix in the store.

    The store is `store`, `$GENRUN_STORE` or `./snapshots` (as for `genrun ls`). A directory is
    returned as it is, so each command still says what is wrong with it.
    """
    path = Path(ref)
    if path.is_dir() or len(path.parts) != 1:
        return path
    location = locate_store(store)
    root = location.path
    ids = [p.name for p in list_snapshots(root)]
    matches = [name for name in ids if name == path.name] or [name for name in ids if name.startswith(path.name)]
    if len(matches) == 1:
        return root / matches[0]
    if matches:
        shown = ", ".join(matches[:5]) + (f" and {len(matches) - 5} more" if len(matches) > 5 else "")
        raise SnapshotError(f"snapshot {str(ref)!r} is ambiguous in store {root}: {len(matches)} ids start with it ({shown}); type more of the id")
    absent = missing_store(location)
    raise SnapshotError(
        f"snapshot {str(ref)!r} is neither a directory nor the id (or id prefix) of a snapshot in store {root}; "
        + (f"{absent}" if absent else "list them with 'genrun ls' (pick the store with --store or GENRUN_STORE)")
    )
