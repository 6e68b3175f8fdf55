"""The listing cache: what `genrun ls` showed of each *sealed* snapshot, private to the user, never inside the store.

Only a cache, as pip and Hugging Face keep theirs: one SQLite file per store in the user's cache folder, named by the
store's identity, in a folder and a file of the user's alone; anything else there is left alone and `ls` answers from
the files, saying why (docs/listing.md). A row is a sealed snapshot's `SnapshotRow` cells (`listing.ROW_FIELDS`) under
the manifest's stat (`SealKey`) and the key and expiry of its sign-off judgement (`signoff_judgement`); a row that does
not validate (`listing.VALID_ROW`) is left out, and read again from its files.
"""

import contextlib
import hashlib
import os
import sqlite3
import stat
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from ._hash_cache import cache_dir

FORMAT = 3
"""`PRAGMA user_version` of a cache file; a file of another format is replaced (it is only a cache). 2: the sweeps' index;
3: the scan of the store's entries (`Scan`)."""
BUSY_TIMEOUT_S = 2.0  # another `ls` holds the lock for one transaction; after this, answer without the cache
_IDS_PER_QUERY = 500  # under any sqlite's limit on the parameters of one statement (999 before 3.32)

SEAL_COLUMNS = ("seal_ino", "seal_size", "seal_mtime_ns", "seal_ctime_ns")
"""The manifest's stat the row's facts were read under (`SealKey`)."""
JUDGEMENT_COLUMNS = ("signoffs_key", "signoffs_until")
"""What the sign-off judgement (the `signoffs` and `signers` cells) was made under, and when it stops holding (epoch
seconds; NULL: never, no signature involved)."""
_VALID_KEYS = " AND ".join([*(f"typeof({column}) = 'integer'" for column in SEAL_COLUMNS), "typeof(signoffs_key) = 'text'",
                            "typeof(signoffs_until) IN ('real', 'integer', 'null')"])
"""SQL true of a row whose own columns (the seal's stat and the judgement's key and expiry) are well-typed."""


SealKey = tuple[int, int, int, int]
"""The manifest file's stat (inode, size, mtime_ns, ctime_ns): any rewrite, replacement or chmod of it changes one."""


def seal_key(manifest: str, dir_fd: int | None = None) -> SealKey | None:
    """None when no regular file is there (not sealed; a link is never a seal); `manifest` relative to `dir_fd` if given."""
    try:
        st = os.lstat(manifest, dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) if stat.S_ISREG(st.st_mode) else None


Cached = tuple
"""One row of the cache as read and written: the manifest's `SealKey` (4 integers), the sign-off key, when the judgement
stops holding (or None), then the row's cells (`listing.ROW_FIELDS`): a plain tuple, since a listing reads 100,000."""
SEAL, KEY, UNTIL, CELLS = slice(0, 4), 4, 5, 6
"""Where each part of a `Cached` is."""
Scan = tuple[list[str], list[str], list[str]]
"""What `listing` makes of a store's entries and the ids the cache holds: the names that may be snapshots (in id order),
those of them the cache does not hold, the `.tmp-*` plans' names."""


class CacheUnavailable(Exception):
    """The cache cannot be used now; the message says why (the caller answers from the files and says so)."""

    def __init__(self, message: str, *, damaged: bool = False) -> None:
        super().__init__(message)
        self.damaged = damaged
        """The file is no SQLite database (or a malformed one): replacing it loses nothing."""


def cache_file(store: Path) -> Path:
    """Where the cache of `store` lives: named by the store directory's device, inode and real path (a store moved or
    replaced gets a cache of its own)."""
    st = os.stat(store)
    identity = f"{st.st_dev}:{st.st_ino}:{os.path.realpath(store)}"
    return cache_dir() / "listing" / f"{hashlib.sha256(identity.encode()).hexdigest()[:32]}.sqlite3"


def _private_directory(directory: Path) -> None:
    """Make `directory` (mode 0700) if needed; refuse one that is a link, not ours, or writable by others."""
    with contextlib.suppress(FileExistsError):
        directory.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(directory, 0o700)
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise CacheUnavailable(f"the listing cache folder {directory} is not a directory of yours that only you may write "
                               "(a link, or another user's): it is not used; remove it, and `ls` makes its own")


def _private_file(path: Path) -> None:
    """Create `path` (0600) if absent; refuse a link, a FIFO or anything but a regular file of ours writable by us alone.
    Opened with O_NOFOLLOW and O_NONBLOCK: a link is never followed, a FIFO never waited on."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise CacheUnavailable(f"the listing cache {path} cannot be opened ({exc.strerror or exc}; a link is never followed): "
                               "it is not used; remove it, and `ls` makes its own") from None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise CacheUnavailable(f"the listing cache {path} is not a regular file of yours that only you may write: "
                               "it is not used; remove it, and `ls` makes its own")


def remove_cache(store: Path) -> None:
    """Remove whatever is at the place of `store`'s cache (a link is removed, never followed), in a private folder only."""
    path = cache_file(store)
    _private_directory(path.parent)
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        os.unlink(path)


class ListingCache:
    """The open cache of one store; use as a context manager. Every method may raise `CacheUnavailable`."""

    def __init__(self, store: Path, fields: tuple[str, ...], valid: str) -> None:
        """`fields`: the row's cached cells (`listing.ROW_FIELDS`); `valid`: SQL true of a row whose cells are well-typed
        and allowed (`listing.VALID_ROW`)."""
        self.fields, self.valid = fields, valid
        self._db: sqlite3.Connection | None = None
        try:
            self.path = cache_file(store)
            _private_directory(self.path.parent)
            _private_file(self.path)
            # The folder is ours alone (checked above), so nothing can swap the file between the check and this open.
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > FORMAT:  # a newer genrun's: left to it
                raise CacheUnavailable(f"the listing cache {self.path} is format {version}, newer than this genrun's {FORMAT}: "
                                       "answering from the files ('genrun index --rebuild' replaces it)")
            if version < FORMAT:
                self._create()
        except sqlite3.DatabaseError as exc:
            self.close()
            raise self._unusable(exc) from None
        except OSError as exc:
            self.close()
            raise CacheUnavailable(f"the listing cache cannot be opened ({exc.strerror or exc}); answering from the files") from None

    def _create(self) -> None:
        assert self._db is not None
        columns = ", ".join(("id TEXT PRIMARY KEY", *SEAL_COLUMNS, *JUDGEMENT_COLUMNS, *(f for f in self.fields if f != "id")))
        with self._transaction():
            self._db.execute("DROP TABLE IF EXISTS rows")
            self._db.execute("DROP TABLE IF EXISTS scans")
            self._db.execute(f"CREATE TABLE rows ({columns})")
            self._db.execute("CREATE INDEX sweeps ON rows (id) WHERE members IS NOT NULL")  # `placing` reads sweeps alone
            self._db.execute("CREATE TABLE scans (key TEXT, names BLOB, unread BLOB, planning BLOB)")
            for change in ("INSERT", "UPDATE", "DELETE"):  # a scan holds only while the rows' ids it was made with do
                self._db.execute(f"CREATE TRIGGER rows_{change.lower()} AFTER {change} ON rows BEGIN DELETE FROM scans; END")
            self._db.execute(f"PRAGMA user_version = {FORMAT}")

    def __enter__(self) -> "ListingCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def rows(self, ids: Sequence[str] | None = None) -> dict[str, Cached]:
        """Every row that validates (or those of `ids`), by id; a row that does not validate is left out: it is read
        again from its files."""
        if ids is None:
            return self._valid()
        chunks = (ids[start:start + _IDS_PER_QUERY] for start in range(0, len(ids), _IDS_PER_QUERY))
        return {i: row for chunk in chunks for i, row in self._valid(f"id IN ({', '.join('?' * len(chunk))})", chunk).items()}

    def placing(self, entries: str) -> tuple[Scan | None, list[str], dict[str, Cached]]:
        """What places a window's rows (`ls --limit 200` of 100,000) without reading every row: the `Scan` a listing kept
        of a store whose entries hash to `entries` (`scan_key`), while no row changed since; else (None and) the ids of
        the rows held, in id order, from the ids' index alone as one NUL-joined text (a snapshot's name holds no NUL); and
        each sweep's validated row (its members place its items). A sweep row that does not validate is in neither: it
        is read again from its files."""
        sweeps = self._valid("members IS NOT NULL")
        for kept in self._query("SELECT names, unread, planning FROM scans WHERE key = ?", (entries,)):
            names, unread, planning = (blob.decode(errors="surrogateescape").split("\0") if blob else [] for blob in kept)
            return (names, unread, planning), [], sweeps
        (ids,), = self._query("SELECT group_concat(id, char(0)) FROM rows")
        invalid = {sweep for (sweep,) in self._query("SELECT id FROM rows WHERE members IS NOT NULL")}.difference(sweeps)
        placed = ids.split("\0") if ids else []
        return None, [i for i in placed if i not in invalid] if invalid else placed, sweeps

    def _valid(self, where: str = "1", parameters: Sequence[str] = ()) -> dict[str, Cached]:
        names = (*SEAL_COLUMNS, *JUDGEMENT_COLUMNS, *self.fields)
        return {r[CELLS]: r for r in self._query(f"SELECT {', '.join(names)} FROM rows WHERE {where} AND {_VALID_KEYS} AND {self.valid}",
                                                  parameters)}

    def _query(self, sql: str, parameters: Sequence[str] = ()) -> list[tuple]:
        assert self._db is not None
        try:
            return self._db.execute(sql, parameters).fetchall()
        except sqlite3.DatabaseError as exc:
            raise self._unusable(exc) from None

    def _unusable(self, exc: sqlite3.DatabaseError) -> CacheUnavailable:
        return CacheUnavailable(f"the listing cache {self.path} cannot be used ({exc}); answering from the files "
                                "('genrun index --rebuild' replaces it)", damaged=_damaged(exc))

    def write(self, rows: Iterable[Cached], gone: Iterable[str] = (), scan: tuple[str, Scan] | None = None) -> None:
        """Add or replace these rows and forget the ids `gone`, in one transaction; `scan`: keep this scan of the store's
        entries (hashing to its key) made with the rows as they are now."""
        assert self._db is not None
        marks = ", ".join("?" * (len(SEAL_COLUMNS) + len(JUDGEMENT_COLUMNS) + len(self.fields)))
        names = ", ".join((*SEAL_COLUMNS, *JUDGEMENT_COLUMNS, *self.fields))
        try:
            with self._transaction():
                self._db.executemany(f"INSERT OR REPLACE INTO rows ({names}) VALUES ({marks})", rows)
                self._db.executemany("DELETE FROM rows WHERE id = ?", ((i,) for i in gone))
                if scan is not None:  # after the rows: a row written drops the scans (the triggers)
                    self._db.execute("DELETE FROM scans")
                    self._db.execute("INSERT INTO scans VALUES (?, ?, ?, ?)",
                                     (scan[0], *("\0".join(names).encode(errors="surrogateescape") for names in scan[1])))
        except sqlite3.DatabaseError as exc:
            raise CacheUnavailable(f"the listing cache {self.path} was not updated ({exc})") from None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        assert self._db is not None
        self._db.execute("BEGIN IMMEDIATE")  # the write lock now: a second writer waits, then gives up
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")


def _damaged(exc: sqlite3.DatabaseError) -> bool:
    """Not a lock or a full disk: the file is no database, or a malformed one."""
    return not isinstance(exc, sqlite3.OperationalError) or "malformed" in str(exc) or "not a database" in str(exc)

