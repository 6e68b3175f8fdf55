"""`genrun ls`'s filters: each one's test on a listed row and, beside it, the same test on the store index's columns.

A filter is defined once here, in its two forms side by side (`RowFilter._clauses`): `select` applies the row form to
rows read from the files (or built from the index), and `index_where` gives SQL that keeps exactly the index rows the
row form keeps, so that `genrun ls --stop-reason eos` on 100,000 snapshots asks the index which ids match instead of
building 100,000 rows to test. Every index row is sealed and holds the columns `listing.SnapshotRow` shows; a filter
whose answer can change after the seal (sign-offs) has no SQL form but a test on the signers alone (`keeps_signers`): `ls`
takes the rows the other filters' SQL keeps and judges their sign-offs as they are now (`listing._signed_now`).
tests/test_ls_filtered.py checks that both forms list the same rows (`ls` with and without the index).
"""

import fnmatch
import math
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import NamedTuple

from .listing import SEALED, SWEEP_STATE, SnapshotRow

REASON_SEPARATOR = ", "
"""How a row's stop reasons are joined (`SnapshotRow.stop_reasons`): a wanted reason containing it matches no row."""


class Clause(NamedTuple):
    """One filter's test: on a row, and on an index row's columns (`sql` with its `parameters`; None: rows only)."""

    keeps: Callable[[SnapshotRow], bool]
    sql: str | None
    parameters: tuple = ()
    signers: Callable[[tuple[str, ...]], bool] | None = None
    """A sign-off filter's test on the signers alone (no `sql`: sign-offs change after the seal, so they are judged now)."""


def _on_signers(test: Callable[[tuple[str, ...]], bool]) -> Clause:
    """A sign-off filter's clause: its test on a row's signers, with no SQL form (see `Clause.signers`)."""
    return Clause(lambda r: test(r.signers), None, signers=test)


def name_matches(name: str | None, pattern: str) -> bool:
    """`--name`: shell wildcards, case-sensitive; the index calls this same function (`IndexDatabase` registers it)."""
    return name is not None and fnmatch.fnmatchcase(name, pattern)


def _stamp(when: datetime) -> str:
    """`when` as the index's `created` (`2026-01-01T05:00:00Z`, UTC), rounded up to the second: a row's time is whole
    seconds, so `created >= stamp` iff it is at or after `when`, and `created < stamp` iff it is before it."""
    utc = when.astimezone(timezone.utc)
    whole = datetime.fromtimestamp(math.ceil(utc.timestamp()), timezone.utc)
    return whole.strftime("%Y-%m-%dT%H:%M:%SZ")


SQL_FUNCTIONS: dict[str, tuple[int, Callable]] = {"name_matches": (2, name_matches)}
"""The Python functions `index_where`'s SQL calls (name: (argument count, function)), for the index's connection."""


class Selection(NamedTuple):
    """The rows the filters keep, and what to say on stderr about them."""

    rows: list[SnapshotRow]
    notes: list[str]
    """A `--stop-reason` no row of the other filters has: the reasons they do have (a typo shows, not just an empty table)."""


class RowFilter:
    """`genrun ls`'s filters, as given (an unset one keeps every row)."""

    def __init__(self, *, states: Sequence[str] = (), since: datetime | None = None, until: datetime | None = None,
                 name: str | None = None, sweep: str | None = None, stop_reasons: Sequence[str] = (), backend: str | None = None,
                 unsigned: bool = False, signed_by: str | None = None) -> None:
        self.sweep = sweep
        """A sweep's id or unique id prefix: only its items (rows are listed under their sweep, `SnapshotRow.sweep`)."""
        self.stop_reasons = tuple(dict.fromkeys(stop_reasons))
        self._wanted_reasons = frozenset(self.stop_reasons)
        self._clauses = self._build(tuple(states), since, until, name, backend, unsigned, signed_by)
        self._reason_clause = self._for_reasons()

    def __bool__(self) -> bool:
        return bool(self.sweep or self._clauses or self._reason_clause)

    @staticmethod
    def _build(states: tuple[str, ...], since: datetime | None, until: datetime | None, name: str | None, backend: str | None,
               unsigned: bool, signed_by: str | None) -> list[Clause]:
        """Every filter but `--sweep` and `--stop-reason`, in the order `select` applies them. The sign-off filters have no
        SQL form: sign-offs arrive after the seal, so each row's are judged as they are now (`keeps_signers`)."""
        clauses: list[Clause] = []
        if states:
            shown = (*states, *(f"{SWEEP_STATE} {s}" for s in states))  # a sweep's row shows `sweep <status>`
            any_sweep, any_sealed = SWEEP_STATE in states, SEALED in states  # a sealed row shows its status, not "sealed"
            wanted = set(shown)
            clauses.append(Clause(
                lambda r: r.state in wanted or (any_sweep and r.state.startswith(SWEEP_STATE)) or (any_sealed and r.sealed),
                f"(state IN ({', '.join('?' * len(shown))}) OR (? AND substr(state, 1, ?) = ?) OR ?)",  # index rows are all sealed
                (*shown, any_sweep, len(SWEEP_STATE), SWEEP_STATE, any_sealed)))
        if since is not None:
            at = _stamp(since)
            clauses.append(Clause(lambda r: r.created is not None and r.created >= at, "created >= ?", (at,)))
        if until is not None:
            before = _stamp(until)
            clauses.append(Clause(lambda r: r.created is not None and r.created < before, "created < ?", (before,)))
        if name:
            clauses.append(Clause(lambda r: name_matches(r.name, name), "name_matches(name, ?)", (name,)))
        if backend:
            clauses.append(Clause(lambda r: r.backend == backend, "backend = ?", (backend,)))
        if unsigned:
            clauses.append(_on_signers(lambda signers: not signers))
        if signed_by:
            clauses.append(_on_signers(lambda signers: signed_by in signers))
        return clauses

    def _for_reasons(self) -> Clause | None:
        """`--stop-reason`: some row stopped by one of them (a sweep's row lists its items' counts, which no reason names)."""
        if not self.stop_reasons:
            return None
        matchable = [reason for reason in self.stop_reasons if REASON_SEPARATOR not in reason]  # no split part holds one
        padded = f"'{REASON_SEPARATOR}' || stop_reasons || '{REASON_SEPARATOR}'"
        sql = " OR ".join(f"instr({padded}, ?) > 0" for _ in matchable) or "0"
        return Clause(lambda r: self.keeps_reasons(r.stop_reasons), f"({sql})",
                      tuple(f"{REASON_SEPARATOR}{reason}{REASON_SEPARATOR}" for reason in matchable))

    def _active(self, reasons: bool) -> list[Clause]:
        """The clauses of every filter but `--sweep` (`reasons`: `--stop-reason`'s too)."""
        return [*self._clauses, self._reason_clause] if reasons and self._reason_clause else self._clauses

    def keeps(self, row: SnapshotRow, *, reasons: bool = True) -> bool:
        """Whether every filter but `--sweep` keeps `row` (`reasons`: `--stop-reason` too)."""
        return all(clause.keeps(row) for clause in self._active(reasons))

    @property
    def judges_signoffs(self) -> bool:
        """A sign-off filter is set: `index_where` leaves it out, and each row the SQL keeps is judged by `keeps_signers`."""
        return any(clause.signers is not None for clause in self._clauses)

    def keeps_signers(self, signers: tuple[str, ...]) -> bool:
        """Whether the sign-off filters keep a row signed off by `signers` (records that hold, as judged now)."""
        return all(clause.signers(signers) for clause in self._clauses if clause.signers is not None)

    def keeps_reasons(self, stop_reasons: str) -> bool:
        """Whether `--stop-reason` keeps a row whose stop-reason cell is `stop_reasons` (`SnapshotRow.stop_reasons`)."""
        return not self._wanted_reasons or not self._wanted_reasons.isdisjoint(stop_reasons.split(REASON_SEPARATOR))

    def index_where(self, *, reasons: bool = True) -> tuple[str, tuple]:
        """SQL over the index's rows keeping what `keeps` keeps but for the sign-off filters (`keeps_signers` judges them
        as they are now), with its parameters."""
        clauses = [clause for clause in self._active(reasons) if clause.sql is not None]
        return " AND ".join(clause.sql for clause in clauses if clause.sql) or "1", tuple(p for c in clauses for p in c.parameters)

    def select(self, rows: list[SnapshotRow]) -> Selection:
        """The rows the filters keep, in the listing's order (`rows` grouped: each item's `sweep` set)."""
        if self.sweep:
            sweep = find_sweep([r.id for r in rows if r.members is not None], self.sweep)
            rows = [r for r in rows if r.sweep == sweep]
        for clause in self._clauses:  # each filter narrows the rows in turn (one pass each)
            rows = [r for r in rows if clause.keeps(r)]
        notes: list[str] = []
        if self._reason_clause is not None:  # last: the reasons the other filters' rows have are what a typo is told
            notes = self.reasons_not_found(r.stop_reasons for r in rows if r.members is None)
            rows = [r for r in rows if self._reason_clause.keeps(r)]
        return Selection(rows, notes)

    def reasons_not_found(self, present: Iterable[str]) -> list[str]:
        """`no snapshot stopped by 'eso'; reasons here: eos, max_new_tokens` for each wanted reason no run row has, given
        the stop-reason cells of the run rows the other filters keep (stop reasons are open: loops define their own, so
        an unknown one is told, not refused)."""
        here = sorted({reason for cell in present for reason in cell.split(REASON_SEPARATOR) if reason != "-"})
        said = ", ".join(here) or "none"
        return [f"no snapshot stopped by {reason!r}; reasons here: {said}" for reason in self.stop_reasons if reason not in here]


def find_sweep(sweeps: Iterable[str], ref: str) -> str:
    """The sweep id `ref` names (itself or a unique prefix) among `sweeps`; a usage error names the fix otherwise."""
    from .errors import UsageError

    sweeps = list(sweeps)
    matches = [s for s in sweeps if s == ref] or [s for s in sweeps if s.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise UsageError(f"--sweep {ref!r} is ambiguous: {len(matches)} sweep ids start with it ({', '.join(matches[:3])}); type more of the id")
    raise UsageError(f"--sweep {ref!r} is not the id (or id prefix) of a sweep in this store; list sweeps with 'genrun ls --state sweep'")
