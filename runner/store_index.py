"""The store index: a cache of what `genrun ls` shows for each *sealed* snapshot, in `<store>/.genrun-index/`.

Only a cache. A sealed snapshot never changes, so its row is kept under the key of its seal: the manifest file's
stat (inode, size, mtime, ctime) and the manifest's sha256. A row is used only while that stat still matches; when it
does not, the manifest is hashed again and, if the digest differs, the row is *not* used: the snapshot is read from its
files and marked as changed since indexed. Unsealed snapshots are never cached. Runs never write here (writers on
other nodes or on NFS must not need it), `verify` never reads it, and deleting the directory loses nothing: the next
`ls` (or `genrun index --rebuild`) rebuilds it from the files alone.

Why sqlite3: it is in the standard library (no new dependency), locks for concurrent readers and one writer, and
reads 100,000 rows in a fraction of a second. The default rollback journal (not WAL) keeps it a single file whose
locks are plain POSIX locks. A reader that cannot open or lock it answers from the files and says so.
"""

import contextlib
import os
import sqlite3
import stat
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from operator import itemgetter
from pathlib import Path
from typing import NamedTuple, TypeVar

from genrun.runner import __version__

T = TypeVar("T")

INDEX_DIR = ".genrun-index"
INDEX_FILE = "index.sqlite3"
INDEX_FORMAT = 1
"""`PRAGMA user_version` of the file; a newer one is ignored (never overwritten but by `genrun index --rebuild`)."""
_IDS_PER_QUERY = 500  # under any sqlite's limit on parameters of one statement (999 before 3.32)
BUSY_TIMEOUT_S = 2.0  # a concurrent writer holds the lock for one transaction; after this, answer without the index

_KEY_COLUMNS = ("id", "seal_ino", "seal_size", "seal_mtime_ns", "seal_ctime_ns", "signoffs_key")
_ROW_COLUMNS = ("state", "generated", "stop_reasons", "signoffs", "name", "created", "backend", "unit", "seal_digest", "signers", "members")
"""What `ls` shows, in `listing.SnapshotRow`'s terms; signers and members are newline-joined, members NULL for a run."""
_COLUMNS = _KEY_COLUMNS + _ROW_COLUMNS
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rows (id TEXT PRIMARY KEY, seal_ino INTEGER NOT NULL, seal_size INTEGER NOT NULL,
  seal_mtime_ns INTEGER NOT NULL, seal_ctime_ns INTEGER NOT NULL, signoffs_key TEXT NOT NULL, state TEXT NOT NULL,
  generated INTEGER, stop_reasons TEXT NOT NULL, signoffs TEXT NOT NULL, name TEXT, created TEXT, backend TEXT, unit TEXT,
  seal_digest TEXT NOT NULL, signers TEXT NOT NULL, members TEXT);
PRAGMA user_version = {INDEX_FORMAT};
"""


class SealKey(NamedTuple):
    """The manifest file's stat: any rewrite, replacement or chmod of it changes one of these."""

    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, manifest: str | Path, dir_fd: int | None = None) -> "SealKey | None":
        """None when no regular file is there (the snapshot is not sealed; a link is never a seal). `dir_fd`: `manifest`
        is relative to that open directory (the store), so that its path is not resolved from / each time."""
        try:
            st = os.lstat(manifest, dir_fd=dir_fd)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return tuple.__new__(cls, (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))  # the C constructor: once per snapshot


class IndexedRow(NamedTuple):
    """One cached row as stored: the keys it holds under, then what `ls` shows (`_ROW_COLUMNS`)."""

    id: str
    seal_ino: int
    seal_size: int
    seal_mtime_ns: int
    seal_ctime_ns: int
    """The manifest's `SealKey` the row was read under."""
    signoffs_key: str
    """What the sign-off summary was judged under (signoffs/ mtime, allowed-signers file): signoffs/ grows after the seal."""
    state: str
    generated: int | None
    stop_reasons: str
    signoffs: str
    name: str | None
    created: str | None
    backend: str | None
    unit: str | None
    seal_digest: str
    signers: str
    members: str | None


class Memberships(Mapping[str, "str | None"]):
    """`IndexDatabase.memberships`: each id the index holds and its sweep's members (newline-joined; None for a run).
    `ids` in id order; looked up by id through a dict made at the first lookup, since a warm listing of a store whose
    names are exactly these ids needs none (comparing two sorted lists costs a third of 100,000 lookups)."""

    def __init__(self, ids: list[str], sweeps: dict[str, str]) -> None:
        self.ids = ids
        self.sweeps = sweeps
        """Each sweep's members, by the sweep's id."""
        self._by_id: dict[str, str | None] | None = None

    def by_id(self) -> dict[str, "str | None"]:
        if self._by_id is None:
            self._by_id = dict.fromkeys(self.ids)
            self._by_id.update(self.sweeps)
        return self._by_id

    def __getitem__(self, sid: str) -> "str | None":
        return self.by_id()[sid]

    def __contains__(self, sid: object) -> bool:
        return sid in self.by_id()

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)


class IndexUnavailable(Exception):
    """The index cannot be used now; the message says why (the caller answers from the files and prints it)."""

    def __init__(self, message: str, *, damaged: bool = False) -> None:
        super().__init__(message)
        self.damaged = damaged
        """The file is not a readable index of any version (so replacing it loses nothing)."""


class IndexDatabase:
    """An open index; use as a context manager. Every method may raise `IndexUnavailable`."""

    def __init__(self, store: Path, *, create: bool = True) -> None:
        self.path = Path(store) / INDEX_DIR / INDEX_FILE
        self._db: sqlite3.Connection | None = None
        try:
            if create:
                self.path.parent.mkdir(exist_ok=True)
            elif not self.path.is_file():
                raise IndexUnavailable(f"no index at {self.path}")
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > INDEX_FORMAT:
                written_by = self._meta("written_by")
                raise IndexUnavailable(f"the index {self.path} is format {version}, written by genrun {written_by or '(unknown)'}; "
                                       f"this genrun {__version__} reads format {INDEX_FORMAT}: it is ignored "
                                       "(run 'genrun index --rebuild' to replace it)")
            if version < INDEX_FORMAT:
                self._db.executescript(_SCHEMA)
                self._db.execute("INSERT OR REPLACE INTO meta VALUES ('written_by', ?)", (__version__,))
        except sqlite3.DatabaseError as exc:
            self.close()
            raise IndexUnavailable(f"the index {self.path} cannot be used ({exc}); answering from the files",
                                   damaged=not isinstance(exc, sqlite3.OperationalError) or "not a database" in str(exc)) from None
        except OSError as exc:
            self.close()
            raise IndexUnavailable(f"the index {self.path} cannot be opened ({exc.strerror or exc}); answering from the files") from None

    def __enter__(self) -> "IndexDatabase":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _meta(self, key: str) -> str | None:
        assert self._db is not None
        with contextlib.suppress(sqlite3.DatabaseError):
            found = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            return found[0] if found else None
        return None

    def rows(self) -> dict[str, IndexedRow]:  # 100,000 rows: a few tenths of a second
        """Every cached row by id (one query: the warm path of `ls`)."""
        return self._query(f"SELECT {', '.join(_COLUMNS)} FROM rows", (), _by_id)

    def memberships(self) -> "Memberships":  # 100,000 rows: a tenth of `rows()`
        """Each cached id, in id order, and the sweeps' members: enough to place every row of a listing. Two queries in one
        read transaction (a writer waits): the ids (in the primary key's order, which costs nothing: the key's own b-tree
        is read), then the few sweeps' members (a column of 100,000 NULLs costs more to fetch than the ids do)."""
        with self._reading():
            ids: list[str] = self._query("SELECT id FROM rows ORDER BY id", (), lambda found: list(map(itemgetter(0), found)))
            sweeps: dict[str, str] = self._query("SELECT id, members FROM rows WHERE members IS NOT NULL", (), dict)
        return Memberships(ids, sweeps)

    def matching(self, where: str, parameters: Sequence[object], functions: Mapping[str, tuple[int, Callable]]) -> set[str]:
        """The ids of the rows `where` keeps (SQL over the columns; `functions` are the Python functions it calls)."""
        self._define(functions)
        return self._query(f"SELECT id FROM rows WHERE {where}", parameters, lambda found: {r[0] for r in found})

    def run_stop_reasons(self, where: str, parameters: Sequence[object], functions: Mapping[str, tuple[int, Callable]],
                         among: Collection[str] | None = None) -> list[str]:
        """The stop-reason cells of the runs (not sweeps) `where` keeps: distinct, or (`among`) those of these ids'."""
        self._define(functions)
        if among is None:
            return self._query(f"SELECT DISTINCT stop_reasons FROM rows WHERE members IS NULL AND ({where})", parameters,
                               lambda found: [r[0] for r in found])
        return self._query(f"SELECT id, stop_reasons FROM rows WHERE members IS NULL AND ({where})", parameters,
                           lambda found: [r[1] for r in found if r[0] in among])

    def signoff_cells(self, where: str, parameters: Sequence[object],
                      functions: Mapping[str, tuple[int, Callable]]) -> list[tuple[str, str, str, str, bool]]:
        """(id, signoffs_key, signers, stop_reasons, whether it is a run) of the rows `where` keeps: what a sign-off filter
        needs to judge each as it is now (`listing._signed_now`)."""
        self._define(functions)
        return self._query(f"SELECT id, signoffs_key, signers, stop_reasons, members IS NULL FROM rows WHERE {where}", parameters, list)

    def _define(self, functions: Mapping[str, tuple[int, Callable]]) -> None:
        assert self._db is not None
        for name, (arguments, function) in functions.items():
            self._db.create_function(name, arguments, function, deterministic=True)

    def rows_of(self, ids: Sequence[str]) -> dict[str, IndexedRow]:
        """The cached rows of these ids (those the index holds), by id."""
        found: dict[str, IndexedRow] = {}
        for start in range(0, len(ids), _IDS_PER_QUERY):
            chunk = ids[start:start + _IDS_PER_QUERY]
            found.update(self._query(f"SELECT {', '.join(_COLUMNS)} FROM rows WHERE id IN ({', '.join('?' * len(chunk))})", chunk, _by_id))
        return found

    def _query(self, sql: str, parameters: Sequence[object], build: Callable[[Iterable[tuple]], T]) -> T:
        """`build` of the rows `sql` finds (it consumes the cursor here: a damaged file may fail on any row)."""
        assert self._db is not None
        try:
            return build(self._db.execute(sql, parameters))
        except sqlite3.DatabaseError as exc:
            raise IndexUnavailable(f"the index {self.path} cannot be read ({exc}); answering from the files",
                                   damaged=not isinstance(exc, sqlite3.OperationalError) or "malformed" in str(exc)) from None

    def write(self, rows: Iterable[IndexedRow], gone: Iterable[str] = ()) -> None:
        """Add or replace `rows` and forget the ids in `gone`, in one transaction."""
        assert self._db is not None
        marks = ", ".join("?" * len(_COLUMNS))
        try:
            with self._transaction():
                self._db.executemany(f"INSERT OR REPLACE INTO rows VALUES ({marks})", rows)
                self._db.executemany("DELETE FROM rows WHERE id = ?", ((i,) for i in gone))
        except sqlite3.DatabaseError as exc:
            raise IndexUnavailable(f"the index {self.path} was not updated ({exc}); answered from the files") from None

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """One read transaction: the queries inside see the same rows (sqlite takes its shared lock at the first)."""
        assert self._db is not None
        self._db.execute("BEGIN")  # deferred: touches no file
        try:
            yield
        finally:
            with contextlib.suppress(sqlite3.DatabaseError):
                self._db.execute("COMMIT")

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        assert self._db is not None
        self._db.execute("BEGIN IMMEDIATE")  # take the write lock now: a second writer waits, then gives up
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")


def _by_id(found: Iterable[tuple]) -> dict[str, IndexedRow]:
    return {r[0]: tuple.__new__(IndexedRow, r) for r in found}  # the C constructor, no Python frame per row


def replace_index(store: Path, rows: Iterable[IndexedRow]) -> Path:
    """Write a whole new index beside the old one and rename it into place: readers see the old file or the new, whole."""
    directory = Path(store) / INDEX_DIR
    directory.mkdir(exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".index-", suffix=".sqlite3", dir=directory)
    os.close(fd)
    try:
        db = sqlite3.connect(tmp, isolation_level=None)
        try:
            db.executescript(_SCHEMA)
            db.execute("INSERT OR REPLACE INTO meta VALUES ('written_by', ?)", (__version__,))
            db.execute("BEGIN")
            db.executemany(f"INSERT OR REPLACE INTO rows VALUES ({', '.join('?' * len(_COLUMNS))})", rows)
            db.execute("COMMIT")
        finally:
            db.close()
        os.chmod(tmp, 0o664)  # a team's store: every member's ls may refresh it
        os.replace(tmp, directory / INDEX_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return directory / INDEX_FILE
