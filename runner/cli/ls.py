"""`genrun ls`: the snapshots in a store, their state and stop reasons at a glance."""

import argparse
from pathlib import Path
from typing import NamedTuple

import orjson
from rich.table import Table

from genrun.schemas import layout

from ._output import print_json, stdout_console


class SnapshotRow(NamedTuple):
    """One line of `genrun ls`."""

    id: str
    state: str
    """Sealed: the result status (succeeded, failed, interrupted); else the `SnapshotState` (planned, running, incomplete)."""
    sealed: bool
    generated: int | None
    stop_reasons: str
    signoffs: str


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ls",
        help="list the snapshots in a store",
        epilog="example: genrun ls --store snapshots\n  20261129T101500Z-tiny-3fa2c1  succeeded  sealed  8  eos  -",
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
    # planning now, or abandoned by a killed `genrun plan`: listed so that leftovers are seen (safe to delete when no plan runs)
    rows += [SnapshotRow(path.name, layout.SnapshotState.PLANNING.value, False, None, "-", "-") for path in list_unfinished_plans(store)]
    if args.json:
        print_json({"store": str(store), "snapshots": [row._asdict() for row in rows]})
        return 0
    table = Table(title=f"{len(rows)} snapshot(s) in {store}")
    for column in ("id", "state", "sealed", "generated", "stop reasons", "sign-offs"):
        table.add_column(column)
    for row in rows:
        generated = "-" if row.generated is None else f"{row.generated:,}"
        table.add_row(row.id, row.state, "yes" if row.sealed else "no", generated, row.stop_reasons, row.signoffs)
    stdout_console.print(table)
    return 0


def describe(snapshot: Path, allowed_signers: Path | None) -> SnapshotRow:
    """Read just enough of a snapshot for one line; never writes."""
    result = _read_json(snapshot / layout.RESULT)
    stop = _read_json(snapshot / layout.STOP)
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


def _signoff_summary(snapshot: Path, allowed_signers: Path | None) -> str:
    if not any((snapshot / layout.SIGNOFFS_DIR).glob("*.json")):
        return "-"
    from genrun.analysis import evaluate_signoffs, summarize_signoffs

    return summarize_signoffs(evaluate_signoffs(snapshot, allowed_signers))


def _read_json(path: Path) -> dict | None:
    """A JSON object from a regular file of bounded size; anything else (missing, a FIFO, a link, a list) is `None`:
    `genrun verify` names the damage, `ls` only must not hang or crash on it."""
    from genrun.analysis import MAX_JSON_BYTES, UnsafeFile, read_regular

    try:
        data = orjson.loads(read_regular(path, MAX_JSON_BYTES))
    except (OSError, UnsafeFile, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None
