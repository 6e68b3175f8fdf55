"""`genrun ls`: the snapshots in a store, their state and stop reasons at a glance."""

import argparse
import sys
from pathlib import Path
from typing import NamedTuple

from rich.console import Console
from rich.table import Table

from genrun.schemas import layout

from ._output import print_json, stderr_console, stdout_console


class SnapshotRow(NamedTuple):
    """One line of `genrun ls`."""

    id: str
    state: str
    """Sealed: the result status (succeeded, failed, interrupted); else the `SnapshotState` (planned, running, incomplete)."""
    sealed: bool
    generated: int | None
    stop_reasons: str
    signoffs: str
    sweep: str | None = None
    """The sweep snapshot this item belongs to (rows are listed under it)."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ls",
        help="list the snapshots in a store",
        epilog=(
            "example: genrun ls --store snapshots\n  20261129T101500Z-tiny-3fa2c1  succeeded  yes  8  eos  -\n"
            "ids are shown in full (other columns are dropped on a narrow terminal); every command that takes a\n"
            "SNAPSHOT accepts its directory, its id, or a unique id prefix"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--store", help="snapshot store directory (default: $GENRUN_STORE or ./snapshots)")
    parser.add_argument("--allowed-signers", type=Path, help="allowed-signers file for checking signatures")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from genrun.runner.store import list_snapshots, list_unfinished_plans, resolve_store

    store = resolve_store(args.store)
    rows = [describe(path, args.allowed_signers) for path in list_snapshots(store)]
    # planning now (a live planner holds it), or abandoned by a killed `genrun plan` (`genrun gc` removes those)
    rows += [SnapshotRow(path.name, _planning_state(path).value, False, None, "-", "-") for path in list_unfinished_plans(store)]
    rows = group_sweeps(rows, store)
    if args.json:
        print_json({"store": str(store), "snapshots": [row._asdict() for row in rows]})
        return 0
    cells = [_cells(row) for row in rows]
    width = stdout_console.width if stdout_console.is_terminal else None  # piped: never cut anything
    shown = columns_that_fit(cells, width)
    table = Table(title=f"{len(rows)} snapshot(s) in {store}", title_justify="left")
    id_fits = width is None or _table_width(cells, [0]) <= width
    for index in shown:
        # ids are never cut: other columns go first (they are in --json); an id wider than the terminal wraps whole
        table.add_column(COLUMNS[index], no_wrap=index == 0 and id_fits, overflow="fold")
    for row in cells:
        table.add_row(*(row[index] for index in shown))
    # piped: a console exactly as wide as the table (rich would otherwise cut to 80 columns)
    out = stdout_console if width is not None else Console(file=sys.stdout, width=_table_width(cells, shown), highlight=False)
    out.print(table)
    dropped = [COLUMNS[i] for i in range(len(COLUMNS)) if i not in shown]
    if dropped:
        stderr_console.print(f"(columns {', '.join(dropped)} left out to fit {width} columns; see them with --json or a wider terminal)",
                             markup=False, highlight=False)
    return 0


def _planning_state(tmp: Path) -> layout.SnapshotState:
    from genrun.runner.store import planning_holder

    return layout.SnapshotState.PLANNING if planning_holder(tmp) else layout.SnapshotState.ABANDONED


COLUMNS = ("id", "state", "sealed", "generated", "stop reasons", "sign-offs")
"""Left to right in order of importance: the last ones are dropped first on a narrow terminal."""
_CELL_PADDING = 3  # rich's default box: one border and two spaces of padding per column


def _cells(row: SnapshotRow) -> tuple[str, ...]:
    generated = "-" if row.generated is None else f"{row.generated:,}"
    shown = f"  └ {row.id}" if row.sweep else row.id  # a sweep's items right under it
    return (shown, row.state, "yes" if row.sealed else "no", generated, row.stop_reasons, row.signoffs)


def _table_width(cells: list[tuple[str, ...]], shown: list[int]) -> int:
    widest = [max([len(COLUMNS[i]), *(len(row[i]) for row in cells)]) for i in shown]
    return sum(w + _CELL_PADDING for w in widest) + 1


def columns_that_fit(cells: list[tuple[str, ...]], width: int | None) -> list[int]:
    """Indexes of the columns to show: all when `width` is None, else drop from the right until the table fits.

    The id column always stays; only when an id alone is wider than the terminal does it wrap (never cut).
    """
    shown = list(range(len(COLUMNS)))
    if width is None:
        return shown
    while len(shown) > 1 and _table_width(cells, shown) > width:
        shown.pop()
    return shown


def group_sweeps(rows: list[SnapshotRow], store: Path) -> list[SnapshotRow]:
    """Each sweep's items (every attempt) right under the sweep's row, marked with the sweep; other rows in order."""
    by_id = {row.id: row for row in rows}
    members: dict[str, list[str]] = {}
    for row in rows:
        plan = _read_json(store / row.id, layout.SWEEP_PLAN)
        if plan is None:
            continue
        result = _read_json(store / row.id, layout.SWEEP_RESULT)
        ids = [i["snapshot_id"] for i in plan["items"]]
        if result is not None:
            ids = [sid for item in result["items"] for sid in item["attempts"]]
        members[row.id] = [sid for sid in dict.fromkeys(ids) if sid in by_id]
    grouped = {sid for ids in members.values() for sid in ids}
    ordered: list[SnapshotRow] = []
    for row in rows:
        if row.id in grouped:
            continue
        ordered.append(row)
        ordered.extend(by_id[sid]._replace(sweep=row.id) for sid in members.get(row.id, ()))
    return ordered


def describe(snapshot: Path, allowed_signers: Path | None) -> SnapshotRow:
    """Read just enough of a snapshot for one line; never writes."""
    plan = _read_json(snapshot, layout.SWEEP_PLAN)
    if plan is not None:
        return _describe_sweep(snapshot, plan, allowed_signers)
    result = _read_json(snapshot, layout.RESULT)
    stop = _read_json(snapshot, layout.STOP)
    from genrun.runner.store import snapshot_state

    state = snapshot_state(snapshot)
    sealed = state is layout.SnapshotState.SEALED
    shown = layout.shown_status(state, result.get("status") if isinstance(result, dict) else None)
    rows = stop.get("sequences") if stop else None
    reasons = sorted({str(s.get("reason")) for s in rows if isinstance(s, dict)}) if isinstance(rows, list) else []
    generated = result.get("generated") if result else None
    return SnapshotRow(
        id=snapshot.name,
        state=shown,
        sealed=sealed,
        generated=generated if type(generated) is int else None,
        stop_reasons=", ".join(reasons) or "-",
        signoffs=_signoff_summary(snapshot, allowed_signers),
    )


def _describe_sweep(snapshot: Path, plan: dict, allowed_signers: Path | None) -> SnapshotRow:
    result = _read_json(snapshot, layout.SWEEP_RESULT)
    counts = result["counts"] if result else {}
    return SnapshotRow(
        id=snapshot.name,
        state=f"sweep {result['status']}" if result else "sweep (unsealed)",
        sealed=(snapshot / layout.MANIFEST).is_file(),
        generated=None,
        stop_reasons=", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or f"{len(plan['items'])} items",
        signoffs=_signoff_summary(snapshot, allowed_signers),
    )


def _signoff_summary(snapshot: Path, allowed_signers: Path | None) -> str:
    if not any((snapshot / layout.SIGNOFFS_DIR).glob("*.json")):
        return "-"
    from genrun.analysis import evaluate_signoffs, summarize_signoffs

    return summarize_signoffs(evaluate_signoffs(snapshot, allowed_signers))


def _read_json(snapshot: Path, name: str) -> dict | None:
    """A JSON object as plain JSON (a newer format still shows its status); anything else (missing, a FIFO, a link,
    a list) is `None`: `genrun verify` names the damage, `ls` only must not hang or crash on it."""
    from genrun.snapshot_dir import ArtifactError, SnapshotDir

    try:
        data = SnapshotDir(snapshot).read_json(name)
    except ArtifactError:
        return None
    return data if isinstance(data, dict) else None
