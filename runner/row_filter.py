"""`genrun ls`'s filters: each one a test on a listed row (`SnapshotRow`), written once.

The rows a filter sees come from the listing cache (facts fixed at the seal) or from the files; a sign-off filter sees
each candidate's sign-offs as they are now (`select`'s `signed_now`), never as a cache once judged them.
"""

import fnmatch
import math
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import NamedTuple

from .listing import REASON_SEPARATOR, SEALED, SWEEP_STATE, SnapshotRow

Test = Callable[[SnapshotRow], bool]


def _stamp(when: datetime) -> str:
    """`when` as a row's `created` (`2026-01-01T05:00:00Z`, UTC), rounded up to the second: a row's time is whole
    seconds, so `created >= stamp` iff it is at or after `when`, and `created < stamp` iff it is before it."""
    utc = when.astimezone(timezone.utc)
    return datetime.fromtimestamp(math.ceil(utc.timestamp()), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
        self._facts: list[Test] = []
        """Tests on what a snapshot is (fixed at its seal), in the order `select` applies them."""
        if states:
            wanted = {*states, *(f"{SWEEP_STATE} {s}" for s in states)}  # a sweep's row shows `sweep <status>`
            any_sweep, any_sealed = SWEEP_STATE in states, SEALED in states  # a sealed row shows its status, not "sealed"
            self._facts.append(lambda r: r.state in wanted or (any_sweep and r.state.startswith(SWEEP_STATE)) or (any_sealed and r.sealed))
        if since is not None:
            at = _stamp(since)
            self._facts.append(lambda r: r.created is not None and r.created >= at)
        if until is not None:
            before = _stamp(until)
            self._facts.append(lambda r: r.created is not None and r.created < before)
        if name:
            self._facts.append(lambda r: r.name is not None and fnmatch.fnmatchcase(r.name, name))  # shell wildcards, case-sensitive
        if backend:
            self._facts.append(lambda r: r.backend == backend)
        self._signed: list[Test] = []
        """Tests on the sign-offs as judged now: only valid signatures count (`SnapshotRow.signers`)."""
        if unsigned:
            self._signed.append(lambda r: not r.signers)
        if signed_by:
            self._signed.append(lambda r: signed_by in r.signers)
        wanted_reasons = frozenset(self.stop_reasons)
        self._reason: Test | None = (lambda r: not wanted_reasons.isdisjoint(r.stop_reasons.split(REASON_SEPARATOR))) if wanted_reasons else None

    def __bool__(self) -> bool:
        return bool(self.sweep or self._facts or self._signed or self._reason)

    def select(self, rows: list[SnapshotRow], signed_now: Callable[[SnapshotRow], SnapshotRow]) -> Selection:
        """The rows the filters keep, in the listing's order (`rows` grouped: each item's `sweep` set). With a sign-off
        filter, each row the other filters keep is first given its sign-offs as they are now (`signed_now`)."""
        if self.sweep:
            sweep = find_sweep([r.id for r in rows if r.members is not None], self.sweep)
            rows = [r for r in rows if r.sweep == sweep]
        for test in self._facts:  # each filter narrows the rows in turn (one pass each)
            rows = [r for r in rows if test(r)]
        if self._signed:
            rows = list(map(signed_now, rows))
            for test in self._signed:
                rows = [r for r in rows if test(r)]
        notes: list[str] = []
        if self._reason is not None:  # last: the reasons the other filters' rows have are what a typo is told
            notes = self.reasons_not_found(r.stop_reasons for r in rows if r.members is None)
            rows = [r for r in rows if self._reason(r)]
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
