"""`genrun ls`: the snapshots in a store, their state and stop reasons at a glance; filtered, sorted, limited.

`ls` lists, `verify` proves: a sealed snapshot's row may come from your private listing cache (docs/listing.md) while its
seal is unchanged, its sign-offs judged as they are now; every row shown is checked against its seal, and `--check`
reads every row from its files. Unsealed snapshots are read from their files each time.
"""

import argparse
import re
import sys
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from itertools import repeat
from pathlib import Path

from genrun.runner.errors import UsageError
from genrun.runner.listing import ROW_STATES, SEALED, SnapshotRow
from genrun.runner.row_filter import RowFilter

from ._columns import fit, output_width, render
from ._options import add_allowed_signers, add_store

__all__ = ["COLUMNS", "SnapshotRow", "handle"]

COLUMNS = ("id", "state", "sealed", "generated", "stop reasons", "sign-offs")
"""Left to right in order of importance: the last ones are left out first on a narrow terminal."""
TERMINAL_ROWS = 200
"""Rows `ls` prints to a terminal without `--limit`: a screenful or two, whatever the store holds (piped: all)."""
SORT_KEYS: dict[str, Callable[[SnapshotRow], tuple]] = {
    "time": lambda r: (r.created or "", r.id),
    "name": lambda r: (r.name or "", r.id),
    "state": lambda r: (r.state, r.id),
    "generated": lambda r: (r.generated if r.generated is not None else -1, r.id),
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ls",
        help="list the snapshots in a store",
        epilog=(
            "example: genrun ls --store snapshots --state failed --since 7d\n"
            "  1 of 3 snapshot(s) in snapshots\n"
            "  id                             state   sealed  generated  stop reasons  sign-offs\n"
            "  20261129T101500Z-tiny-3fa2c1   failed  yes     8          exception     -\n"
            "ids are shown in full (other columns are cut or left out to fit COLUMNS or the terminal); every command that\n"
            "takes a SNAPSHOT accepts its directory, its id, or a unique id prefix"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_store(parser)
    add_allowed_signers(parser, "allowed-signers file for judging signed sign-offs")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument("--state", action="append", metavar="STATE", choices=ROW_STATES,
                        help=f"only this state ({', '.join(ROW_STATES)}; {SEALED}: every sealed snapshot, whatever its status); repeatable")
    parser.add_argument("--since", metavar="WHEN", help="planned at or after WHEN: 2026-11-29, 2026-11-29T10:15, or 7d / 12h / 30m ago")
    parser.add_argument("--until", metavar="WHEN", help="planned before WHEN (same forms as --since)")
    parser.add_argument("--name", metavar="PATTERN", help="the request name matches PATTERN (shell wildcards: 'eval-*')")
    parser.add_argument("--sweep", metavar="SWEEP", help="only the items of this sweep (its id or a unique id prefix)")
    parser.add_argument("--stop-reason", action="append", metavar="REASON", help="some row stopped by REASON (eos, max_new_tokens, stop_string, ...; a loop's own reasons too); "
                             "repeatable. A REASON no listed snapshot has is named on stderr with the reasons they do have")
    parser.add_argument("--backend", metavar="NAME", help="only snapshots run with this backend")
    signed = parser.add_mutually_exclusive_group()
    signed.add_argument("--unsigned", action="store_true",
                        help="only snapshots with no sign-off whose signature verifies now (none, or only unsigned/invalid/revoked)")
    signed.add_argument("--signed-by", metavar="PRINCIPAL", help="only snapshots with a sign-off by PRINCIPAL whose signature verifies now")
    parser.add_argument("--sort", choices=SORT_KEYS, metavar="KEY",
                        help=f"order by KEY ({', '.join(SORT_KEYS)}); default: time, each sweep's items under their sweep")
    parser.add_argument("--reverse", action="store_true", help="the opposite order (newest first by default)")
    parser.add_argument("--limit", type=int, metavar="N",
                        help=f"the newest N rows (after filtering and sorting: the last N in time order, the first N with --reverse; "
                             f"the first N of a --sort); 0: every row. Default: every row when piped or with --json; on a terminal "
                             f"the newest {TERMINAL_ROWS} the same way, with a line saying how many are left out")
    parser.add_argument("--no-cache", "--no-index", dest="no_cache", action="store_true",
                        help="read every snapshot from its files; the listing cache is neither read nor written")
    parser.add_argument("--check", action="store_true",
                        help="read every snapshot from its files and name those whose seal changed since the listing cache read "
                             "them (exit status 1 when one did); 'genrun verify' proves what a snapshot holds")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from genrun.runner.listing import list_store
    from genrun.runner.store_location import locate_store, missing_store

    if args.limit is not None and args.limit < 0:
        raise UsageError(f"--limit {args.limit}: must be 0 (every row) or more; leave it out for the default")
    since, until = _when("--since", args.since), _when("--until", args.until)
    location = locate_store(args.store)
    store = location.path
    limit = _limit(args)
    keep = RowFilter(states=args.state or (), since=since, until=until, name=args.name, sweep=args.sweep, stop_reasons=args.stop_reason or (),
                     backend=args.backend, unsigned=args.unsigned, signed_by=args.signed_by)
    listing = list_store(store, args.allowed_signers, use_cache=not args.no_cache, check=args.check,
                         window=slice(-limit, None) if limit and not args.sort else None,
                         keep=keep or None, progress=lambda text: _notes([f"note: {text}"]))
    notes = [f"note: {note}" for note in (missing_store(location), *listing.notes) if note]
    if args.check:
        notes.append(f"note: --check read {listing.total:,} row(s) from their files: " +
                     (f"{len(listing.changed):,} seal(s) changed since cached: {', '.join(listing.changed)} (run 'genrun verify ID')"
                      if listing.changed else "no seal changed since cached"))
    status = 1 if listing.changed and args.check else 0
    rows = listing.rows[::-1] if args.reverse else listing.rows
    if args.sort:
        rows = sorted(listing.rows, key=SORT_KEYS[args.sort], reverse=args.reverse)
    newest_last = not args.reverse and not args.sort
    if limit:  # the newest: the last in time order (the default), the first with --reverse; the first of a --sort
        rows = rows[-limit:] if newest_last else rows[:limit]
    if args.json:
        _notes(notes)
        from ._output import print_json

        # each row as a dict made in C (`_asdict` costs twice as much: 100,000 rows in a whole listing)
        print_json({"store": str(store), "total": listing.total, "snapshots": list(map(dict, map(zip, repeat(SnapshotRow._fields), rows)))})
        return status
    more = ""
    if args.limit is None and limit and listing.matched > limit:  # a terminal's default
        more = (f"… {listing.matched - limit:,} {'earlier' if newest_last else 'later'} row(s) not shown: --limit 0 lists every one "
                "(so does piping)\n")
    _notes(notes + [f"note: {row.id}: {row.changed or row.problem}" for row in rows if row.changed or row.problem])
    _print_table(rows, listing.total, store, more)
    return status


def _limit(args: argparse.Namespace) -> int | None:
    """The rows shown (the newest that many): `--limit N` (0: every row), else every row piped or with --json, the
    newest `TERMINAL_ROWS` on a terminal. Without a sort they are a window of the (filtered) listing, and only they are
    read (`list_store(window=...)`): `genrun ls` on a terminal answers about as fast from 100,000 snapshots as from 1,000."""
    if args.limit is not None:
        return args.limit or None
    return None if args.json or not sys.stdout.isatty() else TERMINAL_ROWS


def _notes(lines: list[str]) -> None:
    """Diagnostics on stderr (rich is imported only when there is one: most listings have none)."""
    if lines:
        from ._output import stderr_console

        for line in lines:
            stderr_console.print(line, markup=False, highlight=False, soft_wrap=True)


_AGO = re.compile(r"^(\d+)([dhm])$")


def _when(flag: str, value: str | None) -> datetime | None:
    """`7d` / `12h` / `30m` ago, or an ISO date or time (UTC unless it says otherwise)."""
    if value is None:
        return None
    ago = _AGO.match(value)
    if ago:
        unit = {"d": "days", "h": "hours", "m": "minutes"}[ago.group(2)]
        return datetime.now(timezone.utc) - timedelta(**{unit: int(ago.group(1))})
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{flag} {value!r} is not a time; give a date (2026-11-29), a time (2026-11-29T10:15) or an age (7d, 12h, 30m)") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _columns(rows: list[SnapshotRow]) -> list[list[str]]:
    """The table's cells column by column (`COLUMNS`' order): one comprehension a column, not one tuple a row."""
    idents = [row.id for row in rows]
    if any(row.sweep for row in rows):  # a sweep's items right under it, marked when their sweep is shown above
        seen: set[str] = set()
        for i, row in enumerate(rows):
            if row.sweep in seen:
                idents[i] = f"  └ {row.id}"
            seen.add(row.id)
    return [idents, [f"{r.state} (seal changed)" if r.changed else r.state for r in rows], ["yes" if r.sealed else "no" for r in rows],
            ["-" if r.generated is None else f"{r.generated:,}" for r in rows], [r.stop_reasons for r in rows], [r.signoffs for r in rows]]


def _print_table(rows: list[SnapshotRow], total: int, store: Path, more: str) -> None:
    cells = _columns(rows)
    width = output_width()
    layout = fit(COLUMNS, cells, width)
    counted = f"{len(rows):,} of {total:,}" if len(rows) != total else f"{total:,}"
    sys.stdout.write(f"{counted} snapshot(s) in {store}\n{render(COLUMNS, cells, layout)}\n{more}")
    sys.stdout.flush()
    if layout.dropped:
        _notes([f"(columns {', '.join(layout.dropped)} left out to fit {width} columns; see them with --json or a wider terminal)"])
