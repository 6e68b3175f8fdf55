"""What `genrun ls` (and the store page) show for each snapshot of a store: it lists, `genrun verify` proves.

`list_store` walks the store directory (the truth: a snapshot is listed because its directory is there, never because
the cache names it). A sealed snapshot's facts (state, stop reasons, units, backend, times) never change after the seal,
so they may come from the private listing cache (`listing_cache`) while the seal they were read under is unchanged; its
sign-offs are judged as they are now (records arrive after the seal, keys expire), from the cache only while nothing
the judgement depends on changed (`signoff_judgement`). Every row `ls` shows is checked against its seal; the rows it does not
show (outside a `--limit`, or left out by a filter) are placed and matched by the cache alone, and `ls --check` reads
every row from its files. One process: no worker, no shared memory.

A warm listing reads no snapshot file: `SnapshotDir` (and the pydantic models it brings) is imported where one is read.
"""

import bisect
import functools
import os
import re
import stat
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, get_args

from genrun.schemas import layout
from genrun.schemas.digests import sha256_bytes

from .listing_cache import CELLS, KEY, SEAL, UNTIL, Cached, CacheUnavailable, ListingCache, Scan, remove_cache, seal_key
from .signoff_judgement import Judgement, Trust, Trusted, judge_now, unchanged_key

if TYPE_CHECKING:
    from genrun.snapshot_dir import SnapshotDir

    from .row_filter import RowFilter

UNREADABLE = "unreadable"
"""The state of a row whose snapshot cannot be described at all."""
SEALED = layout.SnapshotState.SEALED.value
"""`ls --state sealed`: every sealed row (a sealed row's state shows the result's status instead)."""
SWEEP_STATE = "sweep"
"""A sweep's row shows `sweep <status>` (`sweep completed`, `sweep planned`, `sweep (unsealed)`)."""
REASON_SEPARATOR = ", "
"""How a row's stop reasons (a sweep's item counts) are joined (`SnapshotRow.stop_reasons`)."""
ROW_STATES = (*get_args(layout.RunStatus), *(state.value for state in layout.SnapshotState), UNREADABLE, SWEEP_STATE)
"""Every state a row can show (a sweep's as `sweep`): the vocabulary `genrun ls --state` accepts."""


class SnapshotRow(NamedTuple):
    """One line of `genrun ls`, of `ls --json` and of the store page; its cached fields are the cache's columns."""

    id: str
    state: str
    """Sealed: the result status (succeeded, failed, interrupted); else the `SnapshotState` (planned, running, incomplete);
    `sweep <status>` for a sweep; `unreadable` (one of `ROW_STATES`, a sweep's as `sweep`)."""
    sealed: bool
    generated: int | None
    stop_reasons: str
    signoffs: str
    """The sign-offs as judged now: those that hold first (`ls` lists; `verify` says why the others do not hold)."""
    sweep: str | None = None
    """The sweep snapshot this item belongs to (rows are listed under it)."""
    name: str | None = None
    """The request's name, from the id (`<time>-<name>-<hex>`)."""
    created: str | None = None
    """When the snapshot was planned (UTC, ISO 8601), from the id."""
    backend: str | None = None
    unit: str | None = None
    seal_digest: str | None = None
    """sha256 of manifest-sha256.txt; None until sealed."""
    signers: tuple[str, ...] = ()
    """Who signed it off with a signature that verifies now (`valid`): never an unsigned, revoked or invalid record."""
    members: tuple[str, ...] | None = None
    """A sweep's item snapshot ids (every attempt), in sweep order; None for a run snapshot."""
    changed: str | None = None
    """Set when the seal differs from the one the cache read: the row is then read from the files, and this says so."""
    problem: str | None = None
    """Set when the snapshot cannot be described at all (state `unreadable`): why, and what to run."""


_NOT_CACHED = ("sealed", "sweep", "changed", "problem")
"""Fields a cached row does not hold: every cached row is sealed; the others are set while listing."""
ROW_FIELDS = tuple(field for field in SnapshotRow._fields if field not in _NOT_CACHED)
"""The cache's cells of a row, in this order (`signers` and `members` newline-joined, members NULL for a run)."""
_SQL_TYPES = {str: "'text'", int: "'integer'", type(None): "'null'"}


def _valid_row_sql() -> str:
    """SQL true of a cached row whose every cell has its field's type and whose state is one a sealed row shows."""
    checks = []
    for field in ROW_FIELDS:
        kinds = get_args(SnapshotRow.__annotations__[field]) or (SnapshotRow.__annotations__[field],)
        allowed = {_SQL_TYPES.get(kind, "'text'") for kind in kinds}  # a tuple of ids is newline-joined text
        checks.append(f"typeof({field}) IN ({', '.join(sorted(allowed))})")
    sealed_states = (*get_args(layout.RunStatus), SEALED)
    checks += ["(generated IS NULL OR generated >= 0)", "length(seal_digest) = 64",
               # a sweep's state is `sweep <status>` as its result file says (`_describe_sweep`)
               f"((members IS NULL AND state IN ({', '.join(map(repr, sealed_states))})) OR "
               f"(members IS NOT NULL AND state GLOB '{SWEEP_STATE} ?*'))"]
    return " AND ".join(checks)


VALID_ROW = _valid_row_sql()


def _from_cache(entry: Cached, sweep: str | None = None) -> SnapshotRow:
    """The row a cache entry holds (its cells in `ROW_FIELDS`' order), listed under `sweep`."""
    (id, state, generated, stop_reasons, signoffs, name, created, backend, unit, seal_digest, signers,  # noqa: A001
     members) = entry[CELLS:]
    # in `SnapshotRow`'s field order (a positional call: a whole listing makes 100,000)
    return SnapshotRow(id, state, True, generated, stop_reasons, signoffs, sweep, name, created, backend, unit, seal_digest,
                       tuple(signers.split("\n")) if signers else (),
                       None if members is None else tuple(members.split("\n")) if members else ())


def _cached(seal: tuple[int, ...], key: str, until: float | None, row: SnapshotRow) -> Cached:
    """The cache entry of a sealed row read under `seal`, its sign-offs judged under `key` until `until`."""
    cells = {**row._asdict(), "signers": "\n".join(row.signers), "members": None if row.members is None else "\n".join(row.members)}
    return (*seal, key, until, *(cells[field] for field in ROW_FIELDS))


class Listing(NamedTuple):
    """The rows of a store and what `ls` must say about how it got them."""

    rows: list[SnapshotRow]
    notes: list[str]
    """For stderr: the cache could not be used or updated, and why; a stop reason no row has."""
    total: int
    """Rows in the whole listing (`rows` holds only a `window` of the kept ones when one was asked for)."""
    matched: int
    """Rows of the whole listing that `keep` keeps (`total` without it)."""
    unchecked: int = 0
    """Rows placed or matched by the cache alone, their seals not checked: kept outside the `window`, or not kept."""
    changed: tuple[str, ...] = ()
    """Ids of the rows read whose seal changed since the cache read it (every one, with `check`)."""


# -- one snapshot from its files -------------------------------------------------------------------------------------

class Read(NamedTuple):
    """A snapshot read from its files: its row, and what the cache may keep of it (None: nothing)."""

    row: SnapshotRow
    cached: Cached | None


def read_snapshot(store: Path, name: str, trust: Trusted) -> Read | None:
    """`name`'s row from its files; None when it is no snapshot (or was removed while read). A sealed one comes with its
    cache entry when its seal held still while it was read; an unsealed one is never cached."""
    from genrun.snapshot_dir import ArtifactError, ArtifactMissing, SnapshotDir

    snapshot = store / name
    try:
        key = seal_key(f"{snapshot}/{layout.MANIFEST}")
        if key is None and not os.path.isfile(f"{snapshot}/{layout.FROZEN_MANIFEST}"):  # neither sealed nor planned
            return None
        directory, manifest = SnapshotDir(snapshot), None
        with directory.held_open():  # one open of the directory for the files read
            if key is not None:
                try:
                    manifest = directory.read_bytes(layout.MANIFEST)  # no link followed, bounded, as verify reads it
                except ArtifactMissing:
                    return None
                except ArtifactError:  # no longer a readable regular file since the stat: listed from the files, never kept
                    pass
            judged_under, judgement = judge_now(snapshot, trust)
            row = describe(directory, judgement, sealed=key is not None, manifest=manifest)
        if key is None or manifest is None:  # unsealed (read every time), or its seal no longer a readable file
            return Read(row, None)
        row = row._replace(seal_digest=sha256_bytes(manifest))
        if seal_key(f"{snapshot}/{layout.MANIFEST}") != key or os.path.islink(snapshot):  # changed while read (the row may
            return Read(row, None)  # mix two seals), or a link to a snapshot (listed through it as before, never cached)
        return Read(row, _cached(key, judged_under, judgement.until, row))
    except FileNotFoundError:  # removed while we looked
        return None
    except Exception as exc:  # noqa: BLE001 - a hostile snapshot is a row saying so, never the end of the listing
        return Read(unreadable_row(name, exc), None)


def describe(directory: "SnapshotDir", judgement: Judgement, *, sealed: bool, manifest: bytes | None) -> SnapshotRow:
    """Read just enough of a snapshot for one line, its sign-offs judged (`judgement`); never writes. `FileNotFoundError`
    when the directory is gone. `sealed`: the caller saw a regular manifest; `manifest`: its bytes, when read: the seal
    lists what the snapshot holds ("<hex>  <path>" lines), and a file it does not list is not opened. Files are read
    through `SnapshotDir`: no link followed, nothing unbounded."""
    snapshot = directory.path

    def read(name: str) -> dict | None:
        return _read_json(directory, name) if manifest is None or f"  {name}\n".encode() in manifest else None

    named = _named(snapshot.name)
    plan = read(layout.SWEEP_PLAN)
    if plan is not None:
        return _describe_sweep(directory, plan, sealed, judgement)._replace(**named)
    result, stop, request = read(layout.RESULT), read(layout.STOP), read(layout.REQUEST)
    state = layout.SnapshotState.SEALED if sealed else directory.state()  # FileNotFoundError when gone
    if state is layout.SnapshotState.RUNNING and executor_gone(snapshot):
        state = layout.SnapshotState.INCOMPLETE
    shown = layout.shown_status(state, result.get("status") if isinstance(result, dict) else None)
    sequences = stop.get("sequences") if stop else None
    reasons = sorted({str(s.get("reason")) for s in sequences if isinstance(s, dict)}) if isinstance(sequences, list) else []
    generated = result.get("generated") if result else None
    model = request.get("model") if request else None
    backend = (model.get("backend") or "transformers") if isinstance(model, dict) else None
    unit = result.get("unit") if result else None
    return SnapshotRow(
        id=snapshot.name, state=shown if isinstance(shown, str) else SEALED, sealed=sealed,
        generated=generated if type(generated) is int and generated >= 0 else None, stop_reasons=REASON_SEPARATOR.join(reasons) or "-",
        signoffs=judgement.signoffs, signers=judgement.signers, backend=backend if isinstance(backend, str) else None,
        unit=unit if isinstance(unit, str) else None, **named,
    )


def executor_gone(snapshot: Path) -> bool:
    """A running snapshot whose execution lock no process holds: its executor died (SIGKILL, `os._exit` in user code) or
    lost the lock (user code closed genrun's descriptors), so it will never be sealed (`incomplete`, not `running`)."""
    from genrun.analysis.watch import execution_lock_held

    return execution_lock_held(snapshot) is False and not (snapshot / layout.MANIFEST).exists()


def _describe_sweep(directory: "SnapshotDir", plan: dict, sealed: bool, judgement: Judgement) -> SnapshotRow:
    result = _read_json(directory, layout.SWEEP_RESULT)
    counts = result.get("counts") if result else None
    ids = [str(i["snapshot_id"]) for i in plan["items"]]
    if result is not None:
        ids = [str(sid) for item in result["items"] for sid in item["attempts"]]
    status = f"{result['status']}" if result else _unsealed_sweep_state(directory.path)
    return SnapshotRow(
        id=directory.path.name, state=f"{SWEEP_STATE} {status}", sealed=sealed, generated=None,
        stop_reasons=REASON_SEPARATOR.join(f"{n} {s}" for s, n in sorted(counts.items())) if counts else f"{len(plan['items'])} items",
        signoffs=judgement.signoffs, signers=judgement.signers, members=tuple(dict.fromkeys(ids)),
    )


def _unsealed_sweep_state(sweep: Path) -> str:
    """`planned` while no driver has started it (a driver's first write is the attempt log; verify also asks the lock and
    the items), else `(unsealed)`: running, or its driver was killed."""
    return "(unsealed)" if os.path.lexists(f"{sweep}/{layout.SWEEP_PROGRESS}") else layout.SnapshotState.PLANNED.value


def unreadable_row(name: str, exc: Exception) -> SnapshotRow:
    """The row of a snapshot that cannot be described: its id, and why (verify names the damage)."""
    why = f"{exc.strerror or exc}" if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
    return SnapshotRow(id=name, state=UNREADABLE, sealed=False, generated=None, stop_reasons="-", signoffs="-", **_named(name),
                       problem=f"cannot be read ({why[:200]}): run 'genrun verify {name}'")


def _read_json(directory: "SnapshotDir", name: str) -> dict | None:
    """A JSON object as plain JSON (a newer format still shows its status); anything else (missing, a FIFO, a link,
    a list) is `None`: `genrun verify` names the damage, `ls` only must not hang or crash on it."""
    from genrun.snapshot_dir import ArtifactError

    try:
        data = directory.read_json(name)
    except ArtifactError:
        return None
    return data if isinstance(data, dict) else None


_STAMP = re.compile(r"^\d{8}T\d{6}Z$")


def _named(snapshot_id: str) -> dict:
    """name and creation time from `YYYYMMDDTHHMMSSZ-<name>-<6 hex>` (`store.new_snapshot_id`); nothing for other names."""
    stamp = snapshot_id[:16]
    if not _STAMP.match(stamp):
        return {}
    name = snapshot_id[17:-7] if len(snapshot_id) > 24 else None
    return {"name": name, "created": f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]}T{stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}Z"}


def _planning_row(path: Path) -> SnapshotRow:
    """planning now (a live planner holds it), or abandoned by a killed `genrun plan` (`genrun gc` removes those)."""
    from .store import planning_holder

    state = layout.SnapshotState.PLANNING if planning_holder(path) else layout.SnapshotState.ABANDONED
    return SnapshotRow(path.name, state.value, False, None, "-", "-")


# -- the store -------------------------------------------------------------------------------------------------------


class _Rows:
    """The rows of one listing as they are found: read from their files (`read`), or made from their cache entries and
    checked against their seals (`shown`); collects what the cache should learn (`fresh`) and the rows whose seal
    changed since cached (`changed`)."""

    def __init__(self, store: Path, store_fd: int, trust: Trusted, cached: dict[str, Cached]) -> None:
        self.store, self.fd, self.trust, self.cached = store, store_fd, trust, cached
        """`cached`: the cache's valid entries by id (a window's: those of sweeps, and of its own rows once fetched)."""
        self.path = str(store)
        self.read_rows: dict[str, SnapshotRow] = {}
        """The rows read from their files in this listing."""
        self.checked = 0
        """Cached rows compared with their seals in this listing and not read again (shown from the cache, or gone)."""
        self.fresh: list[Cached] = []
        self.changed: list[str] = []
        self._judged: dict[str, Judgement] = {}
        self._now = time.time()  # judgements are of the moment the listing began

    def read(self, name: str) -> SnapshotRow | None:
        """`name` from its files; a sealed one is cached unless its seal changed since the cache read it (verify judges
        it; `genrun index --rebuild` accepts it)."""
        found = read_snapshot(self.store, name, self.trust)
        if found is None:
            return None
        row, fresh = found
        before = self.cached.get(name)
        then = before[_DIGEST] if before is not None else None
        if then is not None and row.seal_digest is not None and then != row.seal_digest:
            self.changed.append(name)
            row = row._replace(changed=f"the seal changed since it was cached (sha256 {then[:12]}… then, {row.seal_digest[:12]}… "
                                       f"now): run 'genrun verify {name}'; 'genrun index --rebuild' accepts it")
        elif fresh is not None:
            self.fresh.append(fresh)
        self.read_rows[name] = row
        return row

    def row(self, name: str, sweep: str | None) -> SnapshotRow | None:
        """A listed row as found, its seal not checked (what a filter matches); read from its files where the cache holds
        no valid entry (None: no longer a snapshot)."""
        entry = self.cached.get(name)
        if entry is not None and name not in self.read_rows:
            return _from_cache(entry, sweep)
        read = self.read_rows.get(name) or self.read(name)
        return read if read is None or sweep is None else read._replace(sweep=sweep)

    def shown(self, chosen: Iterable[tuple[str, str | None]]) -> list[SnapshotRow]:
        """The rows about to be shown (id, the sweep it is listed under), as their files say now: a cached one whose
        seal (the manifest's stat) is unchanged keeps its facts and has its sign-offs judged now (`_signed`); any other
        is read from its files, and left out when gone. One loop over every shown row (100,000 in `ls --json`)."""
        lstat, fd, cached, read_rows, shown = os.lstat, self.fd, self.cached, self.read_rows, []
        for name, sweep in chosen:
            entry = cached.get(name)
            if entry is not None and name not in read_rows:
                try:
                    st = lstat(name + _SEAL_FILE, dir_fd=fd)
                    unchanged = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == entry[SEAL]
                except OSError:
                    unchanged = False  # `read` says why
                if unchanged:
                    self.checked += 1
                    shown.append(self._signed(entry, _from_cache(entry, sweep)))
                    continue
            row = read_rows.get(name) or self.read(name)
            if row is None:
                self.checked += entry is not None  # gone since listed: looked at, not shown
            else:
                shown.append(row if sweep is None else row._replace(sweep=sweep))
        return shown

    def signed_now(self, row: SnapshotRow) -> SnapshotRow:
        """A row a filter looks at, with its sign-offs as they are now (`_signed`); one read from its files was judged as
        it was read."""
        entry = self.cached.get(row.id)
        return row if entry is None or row.id in self.read_rows else self._signed(entry, row)

    def _signed(self, entry: Cached, row: SnapshotRow) -> SnapshotRow:
        """`row` (made from `entry`) with its sign-offs as they are now: the cached judgement while nothing it depends on
        changed and its time has not come, else judged again (and cached)."""
        judgement = self._judged.get(row.id)
        if judgement is None:
            if (entry[UNTIL] is None or self._now < entry[UNTIL]) and unchanged_key(entry[KEY], self.path, row.id, self.fd, self.trust):
                return row
            key, judgement = judge_now(self.store / row.id, self.trust)
            self._judged[row.id] = judgement
            self.fresh.append(_cached(entry[SEAL], key, judgement.until, row._replace(signoffs=judgement.signoffs, signers=judgement.signers)))
        return row._replace(signoffs=judgement.signoffs, signers=judgement.signers)


_SEAL_FILE = f"/{layout.MANIFEST}"
_DIGEST = CELLS + ROW_FIELDS.index("seal_digest")
_MEMBERS = CELLS + ROW_FIELDS.index("members")


def _scan(found: list[str], known: Collection[str]) -> Scan:
    """The `Scan` of a store's entries `found` given the ids the cache holds (`known`: in the order it keeps them: id
    order, its rewritten rows last)."""
    new = set(found)
    new.difference_update(known)  # never cached: plans, unsealed or new snapshots, stray entries
    held = known if len(found) - len(new) == len(known) else set(found).intersection(known)
    names = sorted([*held, *new])  # a few runs in order, merged: no sort of 100,000 names in the directory's order
    # the dot-names sort together, from "." to "/" (the next character, in no name): no pass over 100,000 names
    start, end = bisect.bisect_left(names, "."), bisect.bisect_left(names, "/")
    planning = [name for name in names[start:end] if name.startswith(layout.PLANNING_PREFIX)]
    del names[start:end]
    return names, sorted(name for name in new if not name.startswith(".")), planning


def scan_key(found: list[str]) -> str:
    """What a kept `Scan` is looked up by: the store's entries as listed (a name holds no NUL)."""
    return sha256_bytes("\0".join(found).encode(errors="surrogateescape"))


def _is_directory(path: str) -> bool:
    """A directory itself, not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


_PROGRESS_FROM = 1_000
"""Snapshots to read from their files from which `ls` says so first (the first listing of a big store)."""


def _open_cache(store: Path, notes: list[str], entries: str, every: bool,
                again: bool = True) -> tuple[ListingCache | None, Scan | None, Collection[str], dict[str, Cached]]:
    """The store's cache, the `Scan` it kept of the entries whose `scan_key` is `entries`, the ids of the rows it holds
    (in id order; none read when the scan was kept), and its valid rows by id: those of sweeps (`ListingCache.placing`),
    or with `every` all of them; a damaged one is made anew (it is ours and only a cache), once."""
    cache = None
    try:
        cache = ListingCache(store, ROW_FIELDS, VALID_ROW)
        kept, known, cached = cache.placing(entries)
        return cache, kept, known, cache.rows() if every else cached
    except CacheUnavailable as exc:
        if cache is not None:
            cache.close()
        if exc.damaged and again:
            remove_cache(store)
            notes.append(f"{str(exc).split(';')[0]}; it was made anew from the files")
            return _open_cache(store, notes, entries, every, again=False)
        notes.append(str(exc))
        return None, None, (), {}


def _trusted(given: Path | None) -> Trusted:
    """The allowed-signers file `given` (else the default's), resolved when first needed (`Trusted`)."""
    def resolved() -> Trust:
        from genrun.analysis.signoffs import resolve_allowed_signers

        return Trust.of(resolve_allowed_signers(given))  # once: it may ask git
    return functools.cache(resolved)


def list_store(store: Path, allowed_signers: Path | None = None, *, use_cache: bool = True, check: bool = False,
               window: slice | None = None, keep: "RowFilter | None" = None,
               progress: Callable[[str], None] | None = None) -> Listing:
    """Every snapshot of `store`, oldest first, sweeps' items right under their sweep; writes nothing in the store.

    `keep`: only the rows it keeps (`ls --state failed`); `window`: only these rows of the kept listing are wanted
    (`ls --limit 20`: `slice(-20, None)`). Sealed rows the cache holds are placed and matched by its facts, their
    sign-offs judged now where a filter asks about them; the rows handed back are checked against their seals (read
    from their files where it changed). `check`: every row read from its files (as without the cache), and those whose
    seal changed since cached named (`Listing.changed`). `use_cache` False: neither read nor written."""
    trust = _trusted(allowed_signers)
    notes: list[str] = []
    try:  # seals are looked at relative to the store's descriptor: no path walked from the root for each
        store_fd = os.open(store, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):  # no store yet: nothing listed (`ls` says where it looked)
        return Listing([], notes, 0, 0)
    cache = None
    try:
        found = os.listdir(store_fd)
        entries = scan_key(found)
        # a window with no filter needs its own rows' entries alone; every other listing all of them
        every = keep is not None or window is None or check
        cache, kept, known, cached = _open_cache(store, notes, entries, every) if use_cache else (None, None, (), {})
        names, unread, planning = _scan(found, () if check else known) if check or kept is None else kept
        if progress is not None and len(unread) >= _PROGRESS_FROM:
            progress(f"reading {len(unread):,} snapshots from their files (once: later listings answer from the cache in "
                     f"{cache.path.parent if cache else 'your cache folder'})")
        rows = _Rows(store, store_fd, trust, cached)
        listing = _listed(rows, names, unread, planning, window, keep, cache.rows if cache is not None and not every else None)
        if rows.changed and not check:  # the cache held a row that is no longer what its files say: trusted for none
            rows = _Rows(store, store_fd, trust, rows.cached)
            listing = _listed(rows, names, names, planning, window, keep)
        gone = set(known).difference(names) if len(names) - len(unread) < len(known) else ()
        # the scan is kept until the entries or the cache's rows change; a listing that learnt nothing takes no write lock
        cached_now = {entry[CELLS] for entry in rows.fresh}
        scan = None if check else (entries, (names, [name for name in unread if name not in cached_now], planning))
        if cache is not None and (rows.fresh or gone or (scan and not kept)):
            try:
                cache.write(rows.fresh, gone, scan=scan)
            except CacheUnavailable as exc:
                notes.append(str(exc))
    finally:
        os.close(store_fd)
        if cache is not None:
            cache.close()
    return listing._replace(notes=notes + listing.notes)


def _listed(found: _Rows, names: list[str], unread: list[str], planning: list[str], window: slice | None,
            keep: "RowFilter | None", fetch: Callable[[list[str]], dict[str, Cached]] | None = None) -> Listing:
    """`list_store`'s listing of these names, those `unread` (all of them with `check`) read from their files. The
    listing is placed by ids and sweeps' members alone; rows are made only where needed: all of them for a filter, else
    the shown ones (`fetch`: the cache entries of those it does not hold yet, when it was given those of sweeps alone)."""
    cached = found.cached
    gone = {name for name in unread if found.read(name) is None}
    listed = [name for name in names if name not in gone] if gone else names
    planning = [name for name in planning if _is_directory(f"{found.store}/{name}")]
    for name in planning:
        found.read_rows[name] = _planning_row(found.store / name)
    members = {name: row.members for name, row in found.read_rows.items() if row.members}
    members.update((e[CELLS], e[_MEMBERS].split("\n")) for e in cached.values() if e[_MEMBERS] and e[CELLS] not in found.read_rows)
    order, sweeps = _grouped(listed + planning, members)
    said: list[str] = []
    cut = window or slice(None)
    if keep is None:
        total = matched = len(order)
        chosen = list(zip(order[cut], sweeps[cut]))
    else:
        rows = [row for row in map(found.row, order, sweeps) if row is not None]
        kept, said = keep.select(rows, found.signed_now)
        total, matched = len(rows), len(kept)
        chosen = [(row.id, row.sweep) for row in kept[cut]]
    if fetch is not None:  # the shown rows' entries fetched whole (one that no longer validates is read again)
        cached.update(fetch([name for name, _ in chosen if name not in cached and name not in found.read_rows]))
    shown = found.shown(chosen)
    unchecked = len(listed) + len(planning) - len(found.read_rows) - found.checked  # placed by the cache alone
    return Listing(shown, said, total, matched, unchecked, tuple(found.changed))


def _grouped(ids: list[str], members: Mapping[str, Sequence[str]]) -> tuple[list[str], list[str | None]]:
    """The listing's order, each sweep's items (every attempt) right under the sweep: (ids, the sweep each is listed
    under or None), two lists so that a window of a listing without sweeps makes no pair per row."""
    if not members:
        return ids, [None] * len(ids)
    present = set(ids)
    under = {sweep: [sid for sid in items if sid in present] for sweep, items in members.items() if sweep in present}
    grouped = {sid for items in under.values() for sid in items}
    ordered: list[str] = []
    sweeps: list[str | None] = []
    for sid in ids:
        if sid not in grouped:
            items = under.get(sid, ())
            ordered += [sid, *items]
            sweeps += [None, *(sid for _ in items)]
    return ordered, sweeps


def rebuild_cache(store: Path, allowed_signers: Path | None = None, progress: Callable[[str], None] | None = None) -> tuple[Path, int]:
    """The store's listing cache made anew from the files alone (whatever was at its place is removed, a link too, never
    followed) by a first listing; (its path, the sealed snapshots it holds). `CacheUnavailable` when it cannot be used."""
    remove_cache(store)
    notes = list_store(store, allowed_signers, progress=progress).notes
    if notes:  # the cache could not be made or written
        raise CacheUnavailable(notes[0])
    with ListingCache(store, ROW_FIELDS, VALID_ROW) as cache:
        return cache.path, len(cache.rows())
