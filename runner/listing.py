"""What `genrun ls` (and the store page) show for each snapshot of a store, from the store index where it holds.

`list_store` walks the store directory (the truth: a snapshot is listed because its directory is there, never because
the index names it), takes each sealed snapshot's row from the index while the seal it was read under is unchanged,
reads everything else from its files with the same readers as always, and refreshes the index when it can lock it.
"""

import contextlib
import os
import re
import stat
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from functools import partial
from itertools import compress, filterfalse, repeat
from operator import and_, itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypeVar, get_args

from genrun.schemas import layout
from genrun.schemas.digests import sha256_bytes
from genrun.snapshot_dir import ArtifactError, ArtifactMissing, SnapshotDir

from ._collector import collector_paused
from .store_index import IndexedRow, IndexUnavailable, Memberships, SealKey, IndexDatabase, replace_index

if TYPE_CHECKING:  # row_filter reads this module's rows
    from ._fork_pool import FromBothEnds
    from .row_filter import RowFilter

T = TypeVar("T")


UNREADABLE = "unreadable"
"""The state of a row whose snapshot cannot be described at all."""
SEALED = layout.SnapshotState.SEALED.value
"""`ls --state sealed`: every sealed row (a sealed row's state shows the result's status instead)."""
SWEEP_STATE = "sweep"
"""A sweep's row shows `sweep <status>` (`sweep completed`, `sweep planned`, `sweep (unsealed)`)."""
ROW_STATES = (*get_args(layout.RunStatus), *(state.value for state in layout.SnapshotState), UNREADABLE, SWEEP_STATE)
"""Every state a row can show (a sweep's as `sweep`): the vocabulary `genrun ls --state` accepts."""


class SnapshotRow(NamedTuple):
    """One line of `genrun ls` (and of the store page)."""

    id: str
    state: str
    """Sealed: the result status (succeeded, failed, interrupted); else the `SnapshotState` (planned, running, incomplete);
    `sweep <status>` for a sweep; `unreadable` (one of `ROW_STATES`, a sweep's as `sweep`)."""
    sealed: bool
    generated: int | None
    stop_reasons: str
    signoffs: str
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
    """Who signed it off (records neither invalid nor revoked)."""
    members: tuple[str, ...] | None = None
    """A sweep's item snapshot ids (every attempt), in sweep order; None for a run snapshot."""
    changed: str | None = None
    """Set when the seal differs from the one the index read: the row is then read from the files, and this says so."""
    problem: str | None = None
    """Set when the snapshot cannot be described at all (state `unreadable`): why, and what to run."""


class Listing(NamedTuple):
    """The rows of a store and what `ls` must say about how it got them."""

    rows: list[SnapshotRow]
    notes: list[str]
    """For stderr: the index could not be used or updated, and why."""
    from_index: int
    """Rows answered from the index without reading their files."""
    total: int
    """Rows in the whole listing (`rows` holds only a `window` of the kept ones when one was asked for)."""
    matched: int
    """Rows of the whole listing that `keep` keeps (`total` without it)."""
    unchecked: int = 0
    """Rows placed or matched by the index alone, their seals not checked: kept outside the `window`, or not kept."""


@collector_paused()
def list_store(store: Path, allowed_signers: Path | None = None, *, use_index: bool = True, window: slice | None = None,
               keep: "RowFilter | None" = None, progress: Callable[[str], None] | None = None) -> Listing:
    """Every snapshot of `store`, oldest first, sweeps' items right under their sweep; never writes a snapshot.

    `keep`: only the rows it keeps are wanted (`ls --state failed`). The rows the index holds are matched by the index
    (`RowFilter.index_where`: SQL, no row built), the others read as always; a sign-off filter has the sign-offs of the
    rows the SQL keeps judged as they are now (one lstat of signoffs/ each says whether the index's judgement holds).
    `window`: only these rows of the (kept) listing are wanted (`ls --limit 20`: `slice(-20, None)`). Without `keep`,
    the rows around them are placed by what the index holds (ids and sweeps' members).
    Only the wanted rows are read, from the index while their seal is unchanged; a wanted row whose seal changed since
    indexed (or one the index lost meanwhile) makes it read every row, as with neither, and `keep` judge what they say.
    `progress`: told (one line) before many snapshots are read from their files (the first `ls` of a big store)."""
    notes: list[str] = []
    from genrun.analysis.signoffs import resolve_allowed_signers

    allowed_signers = resolve_allowed_signers(allowed_signers)  # once: it may ask git
    listing: Listing | None = None
    reopened = False
    members_only = window is not None or keep is not None
    index, known, replace_broken = _open_index(store, notes, members_only=members_only) if use_index else (None, {}, False)
    signoffs: _SignoffsNow | None = None
    keys: _KeysNow | None = None
    try:  # `keep` may refuse (an unknown --sweep)
        reader = _CurrentRows(store, allowed_signers)
        if index is not None and keep is not None and keep.judges_signoffs and not keep.sweep:  # a sweep's items are known once placed
            signoffs = _SignoffsNow.of(index, reader, keep)
            if signoffs is not None:  # held here before it forks: the `finally` below ends it, wherever an interrupt lands
                signoffs.start()  # its lstats run while the store is scanned and placed
        elif index is not None and not members_only:  # every row: their keys looked at while the store is scanned
            keys = _KeysNow.of(reader, known)
            if keys is not None:  # held here before it forks, as `signoffs` is
                keys.start()
        scanned = _scan(store, known if index is not None else None)
        names, planning, unindexed = scanned.names, scanned.planning, scanned.unindexed
        reader.read_ahead(unindexed, progress)
        if index is not None and members_only:
            assert isinstance(known, Memberships)  # what `_open_index(members_only=True)` reads
            if keep is not None:
                listing = _list_matched(index, reader, scanned, known, keep, window, signoffs)
            elif window is not None:
                listing = _list_window(index, reader, scanned, known, window)
        if listing is None and index is not None and members_only:  # read every row: the index whole
            index.close()
            index, known, replace_broken = _open_index(store, notes, members_only=False)
            reopened = True  # `unindexed` was counted against what the index held then
        if listing is None:
            if keys is None and index is not None:  # the index reopened whole
                keys = _KeysNow.of(reader, known)
                if keys is not None:
                    keys.start()
            reader = _CurrentRows(store, allowed_signers, reader.ahead)  # afresh: nothing counted or collected twice
            rows = reader.rows(names, known if index is not None else {}, keys.changed() if keys is not None else None)
            listed = group_sweeps(rows + [_planning_row(store / name) for name in planning])
            kept, said = keep.select(listed) if keep is not None else (listed, [])
            listing = Listing(kept if window is None else kept[window], said, reader.from_index, len(listed), len(kept))
    except BaseException:
        if index is not None:
            index.close()
        raise
    finally:
        if signoffs is not None:
            signoffs.close()
        if keys is not None:
            keys.close()
    if index is not None:
        _update_index(index, reader.fresh, _gone(known, names, None if reopened else unindexed), notes)
    elif replace_broken:  # nothing was cached, so `fresh` holds every sealed snapshot
        try:
            replace_index(store, reader.fresh)
            notes.append(f"the damaged index was rebuilt from the files ({len(reader.fresh)} sealed snapshots)")
        except OSError as exc:
            notes.append(f"the damaged index could not be rebuilt ({exc.strerror or exc})")
    return listing._replace(notes=notes + listing.notes)


def _gone(known: Mapping[str, object], names: list[str], unindexed: list[str] | None) -> set[str]:
    """The ids the index holds whose snapshots are no longer in the store (`names`). None are when as many names are in
    the index as it holds ids (`unindexed`: the names it does not hold; None: not counted against `known`): a warm
    listing of 100,000 then builds no set of them."""
    if unindexed is not None and len(names) - len(unindexed) == len(known):
        return set()
    return set(known).difference(names)


def _update_index(index: IndexDatabase, fresh: list[IndexedRow], gone: set[str], notes: list[str]) -> None:
    """Write what this listing read from the files (`fresh`) and forget the snapshots `gone` from the store; then close."""
    try:
        if fresh or gone:
            index.write(fresh, gone)
    except IndexUnavailable as exc:
        notes.append(str(exc))
    finally:
        index.close()


class Consumed(NamedTuple):
    """What `consume_listing` made of a whole listing, chunk by chunk."""

    results: list
    """`consume`'s answer for each chunk, in order."""
    ids: list[str]
    """Every row's id, in listing order."""
    notes: list[str]
    """For stderr, as `Listing.notes`."""


@collector_paused()
def consume_listing(store: Path, allowed_signers: Path | None, size: int, consume: Callable[[list[SnapshotRow], int, int], T],
                    progress: Callable[[str], None] | None = None) -> Consumed:
    """`consume(rows, number, total)` of each `size` rows in turn of the whole listing (`list_store(store).rows`; `number`
    from 1, `total` rows in all; one empty chunk for an empty store): for a caller that needs every row once (the store
    page, a page each `size` rows) without 100,000 rows sent between processes. With the index, the rows are placed by
    it (as a window's are: ids and sweeps' members), and each chunk is read, checked against its seals and consumed in a
    process per core from two chunks on (`_fork_pool`; `consume` then runs there, so it must only return its answer).
    When a row changed since indexed, or the index cannot be used, the listing is read whole (`list_store`) and each
    chunk consumed here in turn."""
    from genrun.analysis.signoffs import resolve_allowed_signers

    allowed_signers = resolve_allowed_signers(allowed_signers)  # once: it may ask git
    notes: list[str] = []
    index, known, _ = _open_index(store, notes, members_only=True)
    if index is not None:
        try:
            assert isinstance(known, Memberships)  # what `_open_index(members_only=True)` reads
            scanned = _scan(store, known)
            names, unindexed = scanned.names, scanned.unindexed
            reader = _CurrentRows(store, allowed_signers)
            reader.read_ahead(unindexed, progress)
            placed = _place(reader, scanned, known)
            consumed = _ChunkJob(store, allowed_signers, placed.read, _in_chunks(placed.order, size), len(placed.order), consume).run()
        except BaseException:
            index.close()
            raise
        if consumed is not None:
            results, fresh = consumed
            _update_index(index, reader.fresh + fresh, _gone(known, names, unindexed), notes)
            return Consumed(results, [sid for sid, _ in placed.order], notes)
        index.close()  # a row changed since indexed: the listing read whole says how, as `ls` does
    listing = list_store(store, allowed_signers, progress=progress)  # says itself why the index is not used
    return Consumed(consume_rows(listing.rows, size, consume), [row.id for row in listing.rows], listing.notes)


def consume_rows(rows: list[SnapshotRow], size: int, consume: Callable[[list[SnapshotRow], int, int], T]) -> list[T]:
    """`consume(chunk, number, total)` of each `size` rows of `rows` in turn, as `consume_listing` (one empty chunk for none)."""
    return [consume(chunk, number, len(rows)) for number, chunk in enumerate(_in_chunks(rows, size), start=1)]


E = TypeVar("E")


def _in_chunks(items: list[E], size: int) -> list[list[E]]:
    """`items` in consecutive chunks of `size` (the last may be shorter); one empty chunk when there are none."""
    return [items[start:start + size] for start in range(0, len(items), size)] or [items[:0]]


class _ChunkJob:
    """`consume_listing`'s chunks, read and consumed in a process per core where forking is safe, else here in turn."""

    def __init__(self, store: Path, allowed_signers: Path | None, read: dict[str, SnapshotRow], chunks: list[list[tuple[str, str | None]]],
                 total: int, consume: Callable[[list[SnapshotRow], int, int], object]) -> None:
        self.store, self.allowed_signers, self.read, self.chunks, self.total, self.consume = store, allowed_signers, read, chunks, total, consume
        self._index: IndexDatabase | None = None  # each process opens its own (a connection must not cross a fork)

    def run(self) -> tuple[list, list[IndexedRow]] | None:
        """Every chunk's answer and the index rows judged anew while reading them; None when a row is not the one the index
        holds (the caller reads the listing whole)."""
        global _JOB
        answers = None
        if len(self.chunks) > 1:
            from ._fork_pool import fork_map, fork_workers

            workers = fork_workers()
            if workers:
                _JOB = self  # the workers find it where they were forked: nothing of it is pickled
                try:
                    answers = fork_map(_consume_chunk, range(len(self.chunks)), workers)
                finally:
                    _JOB = None
        try:
            if answers is None:  # no pool (or it failed): each chunk here in turn
                answers = [self.consume_chunk(number) for number in range(len(self.chunks))]
        finally:
            if self._index is not None:
                self._index.close()
        done = [answer for answer in answers if answer is not None]
        if len(done) < len(answers):
            return None
        return [result for result, _ in done], [row for _, fresh in done for row in fresh]

    def consume_chunk(self, number: int) -> tuple[object, list[IndexedRow]] | None:
        if self._index is None:
            try:
                self._index = IndexDatabase(self.store, create=False)
            except IndexUnavailable:
                return None
        reader = _CurrentRows(self.store, self.allowed_signers)
        rows = _shown(self._index, reader, self.read, self.chunks[number])
        if rows is None:
            return None
        return self.consume(rows, number + 1, self.total), reader.fresh


_JOB: _ChunkJob | None = None
"""The job whose chunks forked workers consume (`_ChunkJob.run`): set in the parent just before the fork."""


def _consume_chunk(number: int) -> tuple[object, list[IndexedRow]] | None:
    """A worker's share of `_ChunkJob.run`: the job it was forked with."""
    assert _JOB is not None  # set before the workers were forked
    return _JOB.consume_chunk(number)


def _open_index(store: Path, notes: list[str], *, members_only: bool) -> tuple[IndexDatabase | None, Mapping, bool]:
    """The open index and what it holds: every row by id, or (`members_only`) each id's sweep members. When it cannot be
    used: (None, {}, whether it is damaged, so that rebuilding it loses nothing), and `notes` says why."""
    if not store.is_dir():
        return None, {}, False
    index = None
    try:
        index = IndexDatabase(store)
        return index, index.memberships() if members_only else index.rows(), False
    except IndexUnavailable as exc:
        notes.append(str(exc))
        if index is not None:
            index.close()
        return None, {}, exc.damaged  # a newer genrun's index is left alone


class _Placed(NamedTuple):
    """Every row of a listing placed by what the index holds (ids, sweeps' members), only the others read."""

    read: dict[str, SnapshotRow]
    """The rows the index does not hold, read from their files (plans being frozen too)."""
    order: list[tuple[str, str | None]]
    """(id, its sweep) of every row, in listing order."""
    listed: int
    """How many rows the store lists."""
    sweeps: list[str]
    """The ids of the sweeps among them."""


_NOT_HELD = "\0"
"""`_place`'s mark for a name the index does not hold (no id or members text holds a NUL)."""


def _place(reader: "_CurrentRows", scanned: "_Scanned", held_ids: Memberships) -> _Placed:
    if scanned.exact:  # every name is a row the index holds: nothing to read, nothing to look up name by name
        return _placed_as_held(reader, scanned, held_ids)
    read: dict[str, SnapshotRow] = {}
    listed: list[str] = []
    members: dict[str, tuple[str, ...]] = {}
    sweeps: list[str] = []
    lookup = held_ids.by_id().get
    for name in scanned.names:
        held = lookup(name, _NOT_HELD)  # one lookup a name: 100,000 on a terminal's `ls`
        if held is not _NOT_HELD:
            listed.append(name)
            if held is not None:
                sweeps.append(name)
                if held:
                    members[name] = tuple(held.split("\n"))
        elif (row := reader.row(name, None)) is not None:
            read[name] = row
            listed.append(name)
            if row.members is not None:
                sweeps.append(name)
            if row.members:
                members[name] = row.members
    _place_planning(reader, scanned.planning, read, listed)
    return _Placed(read, grouped_order(listed, members), len(listed), sweeps)


def _placed_as_held(reader: "_CurrentRows", scanned: "_Scanned", held_ids: Memberships) -> _Placed:
    """`_place` when the names are exactly the index's ids: only its few sweeps looked at."""
    sweeps = sorted(held_ids.sweeps)
    members = {sid: tuple(held.split("\n")) for sid, held in held_ids.sweeps.items() if held}
    read: dict[str, SnapshotRow] = {}
    listed = scanned.names
    if scanned.planning:
        listed = listed.copy()
        _place_planning(reader, scanned.planning, read, listed)
    return _Placed(read, grouped_order(listed, members), len(listed), sweeps)


def _place_planning(reader: "_CurrentRows", planning: list[str], read: dict[str, SnapshotRow], listed: list[str]) -> None:
    """Plans being frozen (or abandoned) are listed after the snapshots, read from their folders each time."""
    for name in planning:
        read[name] = _planning_row(reader.store / name)
        listed.append(name)


def _shown(index: IndexDatabase, reader: "_CurrentRows", read: dict[str, SnapshotRow],
           wanted: list[tuple[str, str | None]]) -> list[SnapshotRow] | None:
    """The `wanted` rows: those the index holds checked against their seals (`_checked`); None when one is not the row
    the index holds (or the index cannot say): the listing is then read whole."""
    try:
        hits = index.rows_of([sid for sid, _ in wanted if sid not in read])
    except IndexUnavailable:
        return None
    rows: list[SnapshotRow] = []
    for sid, sweep in wanted:
        row = read.get(sid) or _checked(reader, sid, hits.get(sid))
        if row is None:
            return None
        rows.append(row if sweep is None else row._replace(sweep=sweep))
    return rows


def _list_window(index: IndexDatabase, reader: "_CurrentRows", scanned: "_Scanned", held_ids: Memberships,
                 window: slice) -> Listing | None:
    """`list_store(window=...)`; None when a row in the window changed since indexed (or the index cannot say)."""
    placed = _place(reader, scanned, held_ids)
    rows = _shown(index, reader, placed.read, placed.order[window])
    if rows is None:
        return None
    unchecked = _unchecked(placed, rows)
    return Listing(rows, [], reader.from_index + unchecked, len(placed.order), len(placed.order), unchecked)


def _list_matched(index: IndexDatabase, reader: "_CurrentRows", scanned: "_Scanned", held_ids: Memberships,
                  keep: "RowFilter", window: slice | None,
                  signoffs: "_SignoffsNow | None" = None) -> Listing | None:
    """`list_store(keep=...)`: the index names the ids that match (a sealed snapshot's files never change legitimately,
    and a changed seal is caught in any row shown; sign-offs, which do change, judged as they are now: `signoffs`, when
    started before the rows were placed), the rows it does not hold are judged on their files, and only the rows shown
    are read. None when a shown row changed since indexed (or the index cannot say)."""
    from .row_filter import SQL_FUNCTIONS, find_sweep

    placed = _place(reader, scanned, held_ids)
    order = placed.order
    if keep.sweep:
        sweep = find_sweep(placed.sweeps, keep.sweep)
        order = [(sid, under) for sid, under in order if under == sweep]
    among = {sid for sid, _ in order} if keep.sweep else None  # the sweep's items (rows are listed under their sweep)
    try:
        if keep.judges_signoffs:
            matched, present = _signed_now(index, reader, keep, signoffs or _SignoffsNow(index, reader, keep, among))
        else:
            matched = index.matching(*keep.index_where(), SQL_FUNCTIONS)
            # what a wanted reason no row has is told: the reasons the other filters' rows have (of the sweep's, with --sweep)
            present = index.run_stop_reasons(*keep.index_where(reasons=False), SQL_FUNCTIONS, among) if keep.stop_reasons else []
    except IndexUnavailable:
        return None
    if placed.read:  # the rows the index does not hold are judged on what their files say
        matched = (matched - placed.read.keys()) | {sid for sid, row in placed.read.items() if keep.keeps(row)}
    kept = list(compress(order, map(matched.__contains__, map(itemgetter(0), order))))  # in C: 100,000 rows
    notes: list[str] = []
    if keep.stop_reasons:
        read = [placed.read[sid] for sid, _ in order if sid in placed.read] if keep.sweep else placed.read.values()
        present += [row.stop_reasons for row in read if row.members is None and keep.keeps(row, reasons=False)]
        notes = keep.reasons_not_found(present)
    rows = _shown(index, reader, placed.read, kept if window is None else kept[window])
    if rows is None:
        return None
    unchecked = _unchecked(placed, rows)
    return Listing(rows, notes, reader.from_index + unchecked, len(placed.order), len(kept), unchecked)


def _unchecked(placed: _Placed, shown: list[SnapshotRow]) -> int:
    """The rows the index holds that were placed or matched by it alone: all but the shown ones (checked)."""
    return placed.listed - len(placed.read) - sum(row.id not in placed.read for row in shown)


_SIGNOFFS_BESIDE_FROM = 5_000
"""Rows from which a sign-off filter's lstats run in a forked process beside the placing of the rows (`_SignoffsNow`):
below, they cost less than the fork (100,000 cost 0.3-0.45 s here, about what scanning and placing them costs)."""


class _SignoffsNow:
    """For a sign-off filter: the index's sign-off cells of the rows the other filters keep (`among`: of these ids only)
    and which of them changed since the index judged them: one lstat of signoffs/ each (records arrive after the seal).
    `start` looks in a forked process while the caller goes on (`_fork_pool.FromBothEnds`); else `changed` looks."""

    def __init__(self, index: IndexDatabase, reader: "_CurrentRows", keep: "RowFilter", among: set[str] | None = None) -> None:
        from .row_filter import SQL_FUNCTIONS

        cells = index.signoff_cells(*keep.index_where(reasons=False), SQL_FUNCTIONS)
        if among is not None:  # a sweep's items: the others' signoffs/ are not looked at
            cells = [cell for cell in cells if cell[0] in among]
        self.cells = cells
        self._look = partial(_changed_signoffs, reader.prefix, reader.basis, reader.unsigned)
        self._both: "FromBothEnds[tuple[str, str]] | None" = None

    @classmethod
    def of(cls, index: IndexDatabase, reader: "_CurrentRows", keep: "RowFilter") -> "_SignoffsNow | None":
        """None when the index cannot say (the listing then finds that out itself)."""
        try:
            return cls(index, reader, keep)
        except IndexUnavailable:
            return None

    def start(self) -> None:
        """The looks started in a forked process from the first cell up, from `_SIGNOFFS_BESIDE_FROM` cells (where a
        fork is to be had): `changed` takes the last ones (`_fork_pool.FromBothEnds`)."""
        if len(self.cells) >= _SIGNOFFS_BESIDE_FROM:
            from ._fork_pool import FromBothEnds

            cells, look = self.cells, self._look
            self._both = FromBothEnds(lambda lo, hi: list(look(cells[lo:hi]).items()), len(cells))
            if not self._both.start():
                self.close()

    def changed(self) -> dict[str, str]:
        """Each changed row's sign-off key now, by id: the forked process's share and this one's, or all looked at here
        when there is no process (or it died)."""
        if self._both is None:
            return self._look(self.cells)
        try:
            return dict(self._both.finish())
        finally:
            self.close()

    def close(self) -> None:
        """Ends a forked look whose answer is not wanted now (the listing failed or was interrupted)."""
        if self._both is not None:
            self._both.close()
            self._both = None


class _KeysNow:
    """For a whole listing from the index: the ids of its rows whose seal or sign-off key is not the one they were
    indexed under (`_changed_keys`: two lstats a row), on two cores (`_fork_pool.FromBothEnds`): a forked process starts
    on them as soon as the index's rows are read, while the store is scanned; `changed` takes the last ones."""

    def __init__(self, reader: "_CurrentRows", cached: Mapping[str, IndexedRow]) -> None:
        from ._fork_pool import FromBothEnds

        hits = list(cached.values())
        prefix, basis, unsigned = reader.prefix, reader.basis, reader.unsigned
        self._both = FromBothEnds(lambda lo, hi: _changed_keys(prefix, basis, unsigned, hits[lo:hi]), len(hits))

    @classmethod
    def of(cls, reader: "_CurrentRows", cached: Mapping[str, IndexedRow]) -> "_KeysNow | None":
        """From `_KEYS_BESIDE_FROM` index rows; None below (`_CurrentRows.rows` then compares each row's keys itself)."""
        return cls(reader, cached) if len(cached) >= _KEYS_BESIDE_FROM else None

    def start(self) -> None:
        """The forked process started on the first rows (the caller holds this first: its `close` ends the process
        wherever an interrupt lands)."""
        self._both.start()

    def changed(self) -> set[str]:
        return set(self._both.finish())

    def close(self) -> None:
        """Ends the forked process if it still runs (the listing failed or was interrupted); the shared marks freed."""
        self._both.close()


def _changed_signoffs(prefix: str, basis: str, unsigned: str, cells: Sequence[tuple[str, str, str, str, bool]]) -> dict[str, str]:
    """Each changed row's sign-off key now, by id (`_signoffs_key_now`)."""
    with _opened_directory(prefix) as (store, root):
        return {sid: now for sid, key, *_ in cells if (now := _signoffs_key_now(f"{root}{sid}/", key, basis, unsigned, store)) != key}


def _changed_keys(prefix: str, basis: str, unsigned: str, hits: Sequence[IndexedRow]) -> list[str]:
    """The ids of these index rows whose seal or sign-off key is not the one they were indexed under (or that cannot be
    looked at): what `_CurrentRows.row` must read or judge again."""
    changed = []
    with _opened_directory(prefix) as (store, root):
        for hit in hits:
            base = f"{root}{hit.id}/"
            try:
                if SealKey.of(base + layout.MANIFEST, store) != hit[1:5] or \
                        _signoffs_key_now(base, hit.signoffs_key, basis, unsigned, store) != hit.signoffs_key:
                    changed.append(hit.id)
            except OSError:  # `row` says why
                changed.append(hit.id)
    return changed


@contextlib.contextmanager
def _opened_directory(prefix: str) -> Iterator[tuple[int | None, str]]:
    """(the store held open, "") while 100,000s of paths in it are looked at relative to it (`dir_fd`: a sixth less time
    than resolving each from /); (None, `prefix`: the store's path ending with "/") when it cannot be opened."""
    try:
        fd = os.open(prefix, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield None, prefix
        return
    try:
        yield fd, ""
    finally:
        os.close(fd)


def _signed_now(index: IndexDatabase, reader: "_CurrentRows", keep: "RowFilter", signoffs: _SignoffsNow) -> tuple[set[str], list[str]]:
    """For a sign-off filter: the ids of the rows `signoffs` holds that `keep` keeps, their sign-offs as they are now (the
    changed ones judged again), and the stop-reason cells of the runs among them that every filter but `--stop-reason` keeps."""
    cells = signoffs.cells
    matched, present = _kept_by_signoffs(keep, cells)  # as the index judged them: while a forked look goes on beside
    reader.take_signoff_keys(zip(map(itemgetter(0), cells), map(itemgetter(1), cells)))
    changed = signoffs.changed()
    if not changed:
        return matched, present
    reader.take_signoff_keys(changed.items())
    signers_now = {sid: "\n".join(reader.judged(hit).signers) for sid, hit in index.rows_of(list(changed)).items()}
    # one gone from the index meanwhile was removed from the store
    cells = [cell if cell[0] not in changed else (cell[0], cell[1], signers_now[cell[0]], *cell[3:])
             for cell in cells if cell[0] not in changed or cell[0] in signers_now]
    return _kept_by_signoffs(keep, cells)


def _kept_by_signoffs(keep: "RowFilter", cells: list[tuple[str, str, str, str, bool]]) -> tuple[set[str], list[str]]:
    """`_signed_now`'s answer for these cells as they stand. A store holds few distinct signers and stop-reason cells: each
    is tested once, then every row is looked up in C (100,000 rows a listing)."""
    ids, signers, reasons, runs = (list(map(itemgetter(column), cells)) for column in (0, 2, 3, 4))
    signed = {cell for cell in set(signers) if keep.keeps_signers(tuple(cell.split("\n")) if cell else ())}
    stopped = {cell for cell in set(reasons) if keep.keeps_reasons(cell)}
    kept_signers = list(map(signed.__contains__, signers))
    present = list(set(compress(reasons, map(and_, kept_signers, runs))))
    return set(compress(ids, map(and_, kept_signers, map(stopped.__contains__, reasons)))), present


def _checked(reader: "_CurrentRows", sid: str, hit: IndexedRow | None) -> SnapshotRow | None:
    """`sid`'s row from its files (or the index while its seal is unchanged); None when it is not the row the index holds:
    removed, unreadable or changed since indexed (then the rows placed or matched by the index may have changed too)."""
    if hit is None:
        return None
    warm = reader.from_index
    row = reader.row(sid, hit)
    if reader.from_index > warm:  # the seal it was indexed under: the index's row, no comparison needed (it costs what the lstats do)
        return row
    if row is None or row._replace(signoffs="", signers=()) != _from_index(hit)._replace(signoffs="", signers=()):
        return None
    return row


_READ_AHEAD_FROM = 1_000
"""Snapshots to read from their files before a process per core reads them (`read_ahead`): below, forking and sending
the rows back cost about what sharing the reads saves."""

_ReadAhead = dict[str, tuple[SnapshotRow | None, IndexedRow | None]]
"""A snapshot read ahead: `row(name, None)`'s answer (None when the index row says it all), and its index row if any."""


_KEYS_BESIDE_FROM = 5_000
"""Index rows from which a whole listing compares their keys (two lstats a row) half in a forked process
(`_CurrentRows.rows`): below, the fork costs about what it saves."""


class _CurrentRows:
    """Rows as a snapshot's files say now: from its index row while the seal it was read under is unchanged (two lstats),
    else read from its files; collects the index rows to write (`fresh`) and counts the rows answered from the index."""

    def __init__(self, store: Path, allowed_signers: Path | None, ahead: _ReadAhead | None = None) -> None:
        self.store = store
        self.allowed_signers = allowed_signers
        self.basis = _signoffs_basis(allowed_signers)
        self.unsigned = f"{_UNSIGNED}{self.basis}"
        """The sign-off key of a snapshot without signoffs/ (`_signoffs_key_now`)."""
        self.prefix = os.path.join(store, "")
        self.fresh: list[IndexedRow] = []
        self.from_index = 0
        self.ahead: _ReadAhead = ahead if ahead is not None else {}
        """Snapshots not in the index, read from their files before they are asked for (`read_ahead`)."""
        self.rejudged: dict[str, IndexedRow] = {}
        """Index rows whose sign-offs `judged` judged again in this listing (a filter judges a shown row twice)."""
        self._keys_taken: dict[str, str] = {}
        """Sign-off keys taken by `take_signoff_keys` and not yet used by `judged` (a filter's rows are shown after)."""

    def read_ahead(self, names: list[str], progress: Callable[[str], None] | None = None) -> None:
        """Read these snapshots (none of them in the index) from their files now, in a process per core when there are
        enough of them (`_fork_pool`); `row(name, None)` then answers from what was read. Without a pool: nothing now,
        each is read when asked for."""
        if len(names) < _READ_AHEAD_FROM:  # before importing the pool: ~20 ms of every warm `ls`
            return
        from ._fork_pool import chunked, fork_map, fork_workers

        workers = fork_workers()
        if not workers:
            return
        if progress is not None:
            progress(f"reading {len(names):,} snapshots that the store index does not hold yet, in {workers} processes "
                     "(once: later listings answer from the index)")
        chunks = chunked(names, workers)
        read = fork_map(partial(_read_from_files, self.store, self.allowed_signers), chunks, workers)
        if read is None:  # a worker died: each is read when asked for
            return
        for chunk, answers in zip(chunks, read):
            self.ahead.update(zip(chunk, answers))

    def judged(self, hit: IndexedRow, base: str | None = None) -> SnapshotRow:
        """`hit`'s row with its sign-offs as they are now (its seal not checked here): records arrive after the seal.
        A new judgement goes into the index too (`fresh`, under the same seal key): judging a signed record runs
        ssh-keygen, which the next listing should not run again for a `signoffs/` that has not changed since."""
        base = base or f"{self.prefix}{hit.id}/"
        # before judging: a record added meanwhile changes it
        key = self._keys_taken.pop(hit.id, None) or _signoffs_key_now(base, hit.signoffs_key, self.basis, self.unsigned)
        hit = self.rejudged.get(hit.id, hit)
        if key == hit.signoffs_key:
            return _from_index(hit)
        summary, signers = _signoffs(Path(base), self.allowed_signers)  # a record came (or went) since: judged live
        hit = hit._replace(signoffs_key=key, signoffs=summary, signers="\n".join(signers))
        self.rejudged[hit.id] = hit
        self.fresh.append(hit)
        return _from_index(hit)

    def take_signoff_keys(self, keys: Iterable[tuple[str, str]]) -> None:
        """(id, sign-off key) a filter judged rows under, kept for `judged` to use once: a row shown is judged on what the
        filter saw, even if a record arrived since."""
        self._keys_taken.update(keys)

    def rows(self, names: list[str], cached: Mapping[str, IndexedRow], changed: set[str] | None = None) -> list[SnapshotRow]:
        """`row` of each name (None left out), its index row in `cached` if any. `changed`: the ids of the index rows whose
        keys changed since indexed (`_KeysNow`): the others are then the index's rows, as `row` would answer, and only
        these go through `row`. None: `row` compares each row's keys itself."""
        if changed is None:
            return [row for name in names if (row := self.row(name, cached.get(name))) is not None]
        if not changed and list(cached) == names:  # every name is an unchanged index row, in its order: none looked up
            self.from_index += len(names)
            return list(map(_from_index, cached.values()))
        rows = []
        for name in names:
            hit = cached.get(name)
            if hit is not None and name not in changed:
                self.from_index += 1
                rows.append(_from_index(hit))
            elif (row := self.row(name, hit)) is not None:
                rows.append(row)
        return rows

    def row(self, name: str, hit: IndexedRow | None) -> SnapshotRow | None:
        """None when `name` is not a snapshot (or was removed while looked at)."""
        if hit is None and (ahead := self.ahead.get(name)) is not None:
            row, indexed = ahead
            if indexed is not None:
                self.fresh.append(indexed)
            return _from_index(indexed) if row is None and indexed is not None else row
        base = f"{self.prefix}{name}/"
        try:
            key = SealKey.of(base + layout.MANIFEST)
        except OSError as exc:  # one unreadable snapshot is a row saying so, never the end of the listing
            return unreadable_row(name, exc)
        if key is not None and hit is not None and hit[1:5] == key:  # the warm path: two lstats, nothing read
            self.from_index += 1
            return self.judged(hit, base)
        if key is None:  # unsealed: read from its files every time, never cached
            if not os.path.isfile(base + layout.FROZEN_MANIFEST):  # not a snapshot (a sealed one without it still has a seal)
                return None
            try:
                return describe(self.store / name, self.allowed_signers, sealed=False)
            except FileNotFoundError:  # removed while we looked
                return None
            except Exception as exc:  # a hostile snapshot is a row saying so, never the end of the listing
                return unreadable_row(name, exc)
        try:
            read = _read_sealed(self.store / name, key, self.allowed_signers, self.basis)
        except Exception as exc:  # a hostile snapshot is a row saying so, never the end of the listing
            return unreadable_row(name, exc)
        if read is None:  # removed while we looked
            return None
        row, indexed = read
        if hit is not None and hit.seal_digest != row.seal_digest:  # the seal was replaced after indexing: never show the old row
            return row._replace(changed=f"the seal changed since it was indexed (sha256 {hit.seal_digest[:12]}… then, "
                                        f"{(row.seal_digest or '')[:12]}… now): run 'genrun verify {name}'; 'genrun index --rebuild' accepts it")
        if indexed is not None:
            self.fresh.append(indexed)
        return row


def _read_from_files(store: Path, allowed_signers: Path | None, names: Sequence[str]) -> list[tuple[SnapshotRow | None, IndexedRow | None]]:
    """`_CurrentRows.row(name, None)` of each name with the index row it made, in a worker of `read_ahead`; a row its index
    row says in full is left out (None): sending it back would cost as much again."""
    reader = _CurrentRows(store, allowed_signers)
    answers: list[tuple[SnapshotRow | None, IndexedRow | None]] = []
    for name in names:
        made = len(reader.fresh)
        row = reader.row(name, None)
        indexed = reader.fresh[-1] if len(reader.fresh) > made else None
        answers.append((None if indexed is not None and row == _from_index(indexed) else row, indexed))
    return answers


def rebuild_index(store: Path, allowed_signers: Path | None = None, progress: Callable[[str], None] | None = None) -> int:
    """Build the index from the files alone (whatever was there is replaced); returns the sealed snapshots indexed.
    A hostile snapshot is left out: `ls` describes it from its files each time, as a row saying so."""
    from genrun.analysis.signoffs import resolve_allowed_signers

    reader = _CurrentRows(store, resolve_allowed_signers(allowed_signers))  # resolved once: it may ask git
    names = _scan(store).names
    reader.read_ahead(names, progress)
    for name in names:
        reader.row(name, None)
    replace_index(store, reader.fresh)
    return len(reader.fresh)


def unreadable_row(name: str, exc: Exception) -> SnapshotRow:
    """The row of a snapshot that cannot be described: its id, and why (verify names the damage)."""
    why = f"{exc.strerror or exc}" if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
    return SnapshotRow(id=name, state=UNREADABLE, sealed=False, generated=None, stop_reasons="-", signoffs="-", **_named(name),
                       problem=f"cannot be read ({why[:200]}): run 'genrun verify {name}'")


_LISTED = (layout.SWEEP_PLAN, layout.RESULT, layout.STOP, layout.REQUEST)
"""The files `describe` reads."""


def _read_sealed(snapshot: Path, key: SealKey, allowed_signers: Path | None, basis: str) -> tuple[SnapshotRow, IndexedRow | None] | None:
    """A sealed snapshot's row from its files, with the seal's digest, and its index row when the seal held still while
    it was read (`key` is the manifest's stat taken before); None when the snapshot is gone."""
    directory = SnapshotDir(snapshot)
    try:
        with directory.held_open():  # one open of the directory for the five files read
            try:
                manifest = directory.read_bytes(layout.MANIFEST)  # no link followed, bounded, as verify reads it
            except ArtifactMissing:
                return None
            except ArtifactError:  # no longer a readable regular file since the stat: listed from the files, never kept
                return describe(snapshot, allowed_signers, sealed=True, directory=directory), None
            # the seal lists what the snapshot holds ("<hex>  <path>" lines): a file it does not list is not opened (verify
            # judges the rest); a substring test, since parsing 20 lines costs more than the reads it spares
            listed = {name for name in _LISTED if f"  {name}\n".encode() in manifest}
            signoffs_key = _signoffs_key(f"{snapshot}/", basis)  # before they are judged: a record added meanwhile changes it
            if not signoffs_key.startswith(_UNSIGNED):
                listed.add(layout.SIGNOFFS_DIR)
            row = describe(snapshot, allowed_signers, sealed=True, listed=listed, directory=directory)
    except FileNotFoundError:  # removed while we looked
        return None
    row = row._replace(seal_digest=sha256_bytes(manifest))
    if SealKey.of(f"{snapshot}/{layout.MANIFEST}") != key:  # changed while read: the row may mix two seals, so it is not kept
        return row, None
    return row, _to_index(row, key, signoffs_key)


class _Scanned(NamedTuple):
    """One listing of the store, against what the index holds."""

    names: list[str]
    """Entries that may be snapshots, in id (= time) order: hidden and temporary ones skipped. A name that is no directory
    (or no snapshot) is among them: `_CurrentRows.row` says None for it, as it does for any directory that is no snapshot."""
    planning: list[str]
    """The `.tmp-*` directories of plans being frozen or abandoned (`store.list_unfinished_plans`'s rule), in order."""
    unindexed: list[str]
    """The names the index does not hold, in order."""
    exact: bool
    """`names` are exactly the ids the index holds (the warm state of a store nobody added to or removed from)."""


def _scan(store: Path, held: Mapping[str, object] | None = None) -> _Scanned:
    """The store's entries against `held` (the index's ids, its `Memberships` or its rows; None: no index). When `held`
    holds exactly the names, in id order, two sorted lists compared say so: no name is looked up (100,000 in a warm
    listing); else each name is looked up in it."""
    held = held if held is not None else {}
    try:
        found = os.listdir(store)  # names alone: no entry object (or type test) for each of 100,000
    except (FileNotFoundError, NotADirectoryError):
        return _Scanned([], [], [], not held)
    names = [name for name in found if name[0] != "."]
    planning = sorted(name for name in found if name.startswith(layout.PLANNING_PREFIX) and _is_directory(f"{store}/{name}"))
    names.sort()
    # in id order: sqlite's BINARY order of UTF-8 text is Python's order of the code points. The index's rows read whole
    # come in the order they were written, which is id order too until a row is rewritten (a seal changed)
    if len(names) == len(held) and names == (held.ids if isinstance(held, Memberships) else list(held)):
        return _Scanned(names, planning, [], True)
    unindexed = list(filterfalse(held.__contains__, names))  # in C: 100,000 names
    return _Scanned(names, planning, unindexed, not unindexed and len(names) == len(held))


def _is_directory(path: str) -> bool:
    """A directory itself, not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _planning_row(path: Path) -> SnapshotRow:
    """planning now (a live planner holds it), or abandoned by a killed `genrun plan` (`genrun gc` removes those)."""
    from .store import planning_holder

    state = layout.SnapshotState.PLANNING if planning_holder(path) else layout.SnapshotState.ABANDONED
    return SnapshotRow(path.name, state.value, False, None, "-", "-")


def describe(snapshot: Path, allowed_signers: Path | None, *, sealed: bool, listed: Collection[str] | None = None,
             directory: SnapshotDir | None = None) -> SnapshotRow:
    """Read just enough of a snapshot for one line; never writes. `FileNotFoundError` when the directory is gone.

    `sealed`: the caller saw a regular manifest (the seal is written last, so an unsealed snapshot's state needs its file
    listing); `listed`: the files the seal lists, and `signoffs` if the caller saw that folder (None: try each), so that no
    open is spent on a file that is not there;
    `allowed_signers` is the resolved file (None: none); `directory`: `snapshot`'s `SnapshotDir`, when the caller holds it
    open. Files are read through `SnapshotDir`: no link followed, nothing unbounded."""
    directory = directory or SnapshotDir(snapshot)

    def read(name: str) -> dict | None:
        return _read_json(directory, name) if listed is None or name in listed else None

    named = _named(snapshot.name)
    signed = listed is None or layout.SIGNOFFS_DIR in listed
    plan = read(layout.SWEEP_PLAN)
    if plan is not None:
        return _describe_sweep(directory, plan, allowed_signers, sealed, signed)._replace(**named)
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
    summary, signers = _signoffs(snapshot, allowed_signers, signed)
    return SnapshotRow(
        id=snapshot.name, state=shown, sealed=sealed, generated=generated if type(generated) is int else None,
        stop_reasons=", ".join(reasons) or "-", signoffs=summary, signers=signers,
        backend=backend if isinstance(backend, str) else None, unit=unit if isinstance(unit, str) else None, **named,
    )


def executor_gone(snapshot: Path) -> bool:
    """A running snapshot whose execution lock no process holds: its executor died (SIGKILL, `os._exit` in user code) or
    lost the lock (user code closed genrun's descriptors), so it will never be sealed (`incomplete`, not `running`)."""
    from genrun.analysis.watch import execution_lock_held

    return execution_lock_held(snapshot) is False and not (snapshot / layout.MANIFEST).exists()


def _describe_sweep(directory: SnapshotDir, plan: dict, allowed_signers: Path | None, sealed: bool, signed: bool) -> SnapshotRow:
    snapshot = directory.path
    result = _read_json(directory, layout.SWEEP_RESULT)
    counts = result["counts"] if result else {}
    ids = [i["snapshot_id"] for i in plan["items"]]
    if result is not None:
        ids = [sid for item in result["items"] for sid in item["attempts"]]
    summary, signers = _signoffs(snapshot, allowed_signers, signed)
    return SnapshotRow(
        id=snapshot.name,
        state=f"{SWEEP_STATE} {result['status']}" if result else f"{SWEEP_STATE} {_unsealed_sweep_state(snapshot)}",
        sealed=sealed,
        generated=None,
        stop_reasons=", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or f"{len(plan['items'])} items",
        signoffs=summary, signers=signers, members=tuple(dict.fromkeys(ids)),
    )


def _unsealed_sweep_state(sweep: Path) -> str:
    """`planned` while no driver has started it (a driver's first write is the attempt log; verify also asks the lock and
    the items), else `(unsealed)`: running, or its driver was killed."""
    return "(unsealed)" if os.path.lexists(f"{sweep}/{layout.SWEEP_PROGRESS}") else layout.SnapshotState.PLANNED.value


def group_sweeps(rows: list[SnapshotRow]) -> list[SnapshotRow]:
    """Each sweep's items (every attempt) right under the sweep's row, marked with the sweep; other rows in order."""
    members = {row.id: row.members for row in rows if row.members}
    if not members:
        return rows
    by_id = {row.id: row for row in rows}
    return [by_id[sid] if sweep is None else by_id[sid]._replace(sweep=sweep) for sid, sweep in grouped_order([row.id for row in rows], members)]


def grouped_order(ids: list[str], members: Mapping[str, Sequence[str]]) -> list[tuple[str, str | None]]:
    """(id, its sweep) in listing order: each sweep's items (every attempt) right under the sweep, other ids in order."""
    if not members:
        return list(zip(ids, repeat(None)))  # in C: 100,000 ids
    present = set(ids)
    under = {sweep: [sid for sid in items if sid in present] for sweep, items in members.items()}
    grouped = {sid for items in under.values() for sid in items}
    ordered: list[tuple[str, str | None]] = []
    for sid in ids:
        if sid in grouped:
            continue
        ordered.append((sid, None))
        ordered.extend((item, sid) for item in under.get(sid, ()))
    return ordered


_STAMP = re.compile(r"^\d{8}T\d{6}Z$")


def _named(snapshot_id: str) -> dict:
    """name and creation time from `YYYYMMDDTHHMMSSZ-<name>-<6 hex>` (`store.new_snapshot_id`); nothing for other names."""
    stamp = snapshot_id[:16]
    if not _STAMP.match(stamp):
        return {}
    name = snapshot_id[17:-7] if len(snapshot_id) > 24 else None
    return {"name": name, "created": f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]}T{stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}Z"}


def _signoffs(snapshot: Path, allowed_signers: Path | None, present: bool = True) -> tuple[str, tuple[str, ...]]:
    """(summary for the sign-offs column, signers of the records that hold); `present` False: the caller saw no signoffs/."""
    if not present:
        return "-", ()
    try:
        if not any(n.endswith(".json") for n in os.listdir(f"{snapshot}/{layout.SIGNOFFS_DIR}")):
            return "-", ()
    except (FileNotFoundError, NotADirectoryError):
        return "-", ()
    from genrun.analysis.signoffs import judge_signoffs, summarize_signoffs

    statuses = judge_signoffs(snapshot, allowed_signers)
    signers = tuple(dict.fromkeys(s.by for s in statuses if s.by and s.decision != "revoke" and s.state not in ("invalid", "revoked")))
    return summarize_signoffs(statuses), signers


def _signoffs_basis(trusted: Path | None) -> str:
    """The part of the sign-off key that is the same for every snapshot: which allowed-signers file judged them, as of when."""
    try:
        return f"{trusted}|{os.stat(trusted).st_mtime_ns}" if trusted else "-"
    except OSError:
        return f"{trusted}|missing"


_UNSIGNED = "none|"
"""How a sign-off key starts when the snapshot has no signoffs/ folder."""


def _signoffs_key_now(base: str, indexed: str, basis: str, unsigned: str, dir_fd: int | None = None) -> str:
    """`_signoffs_key` for a row indexed under the key `indexed` (`unsigned`: the key of no signoffs/ folder). A row that
    had no signoffs/ takes one `access` to say it still has none (an lstat that fails raises, which costs a third more)."""
    if indexed == unsigned and not os.access(base + layout.SIGNOFFS_DIR, os.F_OK, dir_fd=dir_fd, follow_symlinks=False):
        return indexed
    return _signoffs_key(base, basis, dir_fd)


def _signoffs_key(base: str, basis: str, dir_fd: int | None = None) -> str:
    """signoffs/ grows after the seal (records are renamed in): its mtime changes with every record added or removed.
    `base`: the snapshot's path with a trailing "/", relative to `dir_fd` when given."""
    try:
        return f"{os.lstat(base + layout.SIGNOFFS_DIR, dir_fd=dir_fd).st_mtime_ns}|{basis}"
    except OSError:
        return f"{_UNSIGNED}{basis}"


def _to_index(row: SnapshotRow, key: SealKey, signoffs_key: str) -> IndexedRow:
    assert row.seal_digest is not None  # set by the caller from the manifest it keyed
    return IndexedRow(row.id, *key, signoffs_key, row.state, row.generated, row.stop_reasons, row.signoffs, row.name, row.created,
                      row.backend, row.unit, row.seal_digest, "\n".join(row.signers), None if row.members is None else "\n".join(row.members))


def _from_index(hit: IndexedRow) -> SnapshotRow:
    # unpacked, not read field by field (a property call each): 100,000 rows per whole warm `ls`
    sid, _, _, _, _, _, state, generated, reasons, signoffs, name, created, backend, unit, digest, signers, members = hit
    # the C constructor (no Python frame), in SnapshotRow's field order (every field: it checks none)
    return tuple.__new__(SnapshotRow, (sid, state, True, generated, reasons, signoffs, None, name, created, backend, unit, digest,
                                       tuple(signers.split("\n")) if signers else (),
                                       None if members is None else tuple(members.split("\n")) if members else (), None, None))


def _read_json(directory: SnapshotDir, name: str) -> dict | None:
    """A JSON object as plain JSON (a newer format still shows its status); anything else (missing, a FIFO, a link,
    a list) is `None`: `genrun verify` names the damage, `ls` only must not hang or crash on it."""
    try:
        data = directory.read_json(name)
    except ArtifactError:
        return None
    return data if isinstance(data, dict) else None
