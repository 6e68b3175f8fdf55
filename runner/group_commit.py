"""Group commit: a sweep worker's items (and a server's requests) are made durable together, then sealed, instead of
each file synced alone.

A single run syncs each evidence file as it writes it and seals last (`store.seal_snapshot`). A sweep worker runs
many items; an item's ten-odd syncs then cost more than its evidence. Inside `GroupCommit.owning(snapshot)` (the
item's thread, from its first execution file to its seal; a served request's thread from its frozen plan on) the files on the store's filesystem are written without
their own sync (`_io.syncs_deferred_on`), and `seal_snapshot` hands the snapshot to the committer thread and waits.
The committer takes every snapshot waiting and commits them as one group:

1. `syncfs` of the store's filesystem: every file of every item of the group on disk (one sync for all);
2. each item's seal in turn (hash, read-only, `manifest-sha256.txt` written atomically, as `seal_snapshot` does);
3. `syncfs` again: the manifests on disk;
4. each item's `seal_snapshot` returns its digest; only then does its worker report it.

Crash consistency is a single run's: a manifest is written only after every file it lists was complete (and, from 1,
on disk), so a kill at any instant leaves each item sealed with exactly what it lists, or unsealed (`running` /
`incomplete` to every reader). A failure in a step fails the seal of the items it reaches (their `seal_snapshot`
raises, as a failed seal does); an item already sealed stays sealed. Each step is announced as a `sys.audit` event
(`genrun.group_commit`, `(step, snapshot path or store)`): the fault-injection tests stop the process there.
"""

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from . import _io

from genrun.snapshot_dir import SnapshotDir

AUDIT_EVENT = "genrun.group_commit"
"""`sys.audit` event raised before each step: `("queued", snapshot)` when an item asks for its seal, `("files-synced", store, group)` before step 1's sync, `("seal", snapshot)`
before each item's seal, `("manifests-synced", store, group)` before step 3's sync (`group`: the snapshots' paths)."""

_current = threading.local()


def current() -> "GroupCommit | None":
    """The group commit that owns this thread's snapshot, if any (`GroupCommit.owning`)."""
    return getattr(_current, "group", None)


class _Pending:
    """One snapshot waiting for its group."""

    def __init__(self, snapshot: SnapshotDir) -> None:
        self.snapshot = snapshot
        """Held open by the item's thread until its seal returns: sealed in the directory the run wrote."""
        self.path = snapshot.path
        self.digest: str | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()


class GroupCommit:
    """The committer thread of one worker process, and the items' waiting seals."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._queue: list[_Pending] = []
        self._closed = False
        # Started now, before any item runs: a thread that appeared while an item's user code ran would be taken for one
        # the user's code left running (the loop backend fails such an item).
        self._thread: threading.Thread | None = threading.Thread(target=self._run, name="genrun-group-commit", daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def owning(self, where: Path) -> Iterator[None]:
        """On this thread, files on `where`'s filesystem (a snapshot, or the store it is made in) leave their sync to this
        group, and a seal waits for the group."""
        device = os.stat(where).st_dev
        outer = current()
        _current.group = self
        try:
            with _io.syncs_deferred_on(device):
                yield
        finally:
            _current.group = outer

    def seal(self, snapshot: SnapshotDir) -> str:
        """Seal held `snapshot` in the next group; returns its digest once its manifest is on disk (`seal_snapshot`'s errors)."""
        pending = _Pending(snapshot)
        sys.audit(AUDIT_EVENT, "queued", str(snapshot.path))
        with self._lock:
            if self._closed:
                raise RuntimeError("the group commit is closed; no seal may be asked of it")
            self._queue.append(pending)
            self._lock.notify()
        pending.done.wait()
        if pending.error is not None:
            raise pending.error
        assert pending.digest is not None, "a commit sets the digest or the error of every item it takes"
        return pending.digest

    def waiting(self) -> int:
        """Seals queued for the next group (not yet taken by the committer)."""
        with self._lock:
            return len(self._queue)

    def close(self) -> None:
        """Commit what waits, then stop the thread (idempotent)."""
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
            self._lock.notify()
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._lock.wait()
                group, self._queue = self._queue, []
            if not group:
                return
            try:
                commit(group)
            except BaseException as exc:  # noqa: BLE001 (a fault outside an item's seal fails the items not yet sealed)
                for pending in group:
                    if pending.digest is None and pending.error is None:
                        pending.error = exc
            finally:
                for pending in group:
                    pending.done.set()


def commit(group: "list[_Pending]") -> None:
    """Steps 1-3 (module docstring) for the snapshots of one group; each item's digest or error is set on it."""
    from .store import describe_os_error, seal_files

    try:
        _sync_stores("files-synced", group)
    except OSError as exc:
        for pending in group:
            pending.error = exc
        return
    for pending in group:
        try:
            sys.audit(AUDIT_EVENT, "seal", str(pending.path))
            with _io.syncs_deferred_on(os.fstat(pending.snapshot.fd).st_dev):
                pending.digest = seal_files(pending.snapshot)
        except Exception as exc:  # noqa: BLE001 (this item's seal failed: it alone stays unsealed, its thread raises it)
            pending.error = exc
    try:
        _sync_stores("manifests-synced", group)
    except OSError as exc:
        for pending in group:
            pending.digest, pending.error = None, OSError(exc.errno, describe_os_error(exc, pending.path))


def _sync_stores(step: str, group: "list[_Pending]") -> None:
    """`syncfs` of each store the group's snapshots lie in (announced as `step`)."""
    for store in sorted({pending.path.parent for pending in group}):
        sys.audit(AUDIT_EVENT, step, str(store), tuple(str(p.path) for p in group))
        _io.syncfs(store)
