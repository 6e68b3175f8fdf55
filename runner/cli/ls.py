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
    """planned, incomplete (no result: running or killed), succeeded, failed, interrupted."""
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
        epilog="example: genrun ls --store snapshots\n  20261129T101500Z-tiny-3fa2c1  succeeded  sealed  8  eos  -",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--store", help="snapshot store directory (default: $GENRUN_STORE or ./snapshots)")
    parser.add_argument("--allowed-signers", type=Path, help="allowed-signers file for checking signatures")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from genrun.runner.store import list_snapshots, resolve_store

    store = resolve_store(args.store)
    rows = group_sweeps([describe(path, args.allowed_signers) for path in list_snapshots(store)], store)
    if args.json:
        print_json({"store": str(store), "snapshots": [row._asdict() for row in rows]})
        return 0
    table = Table(title=f"{len(rows)} snapshot(s) in {store}")
    for column in ("id", "state", "sealed", "generated", "stop reasons", "sign-offs"):
        table.add_column(column)
    for row in rows:
        generated = "-" if row.generated is None else f"{row.generated:,}"
        shown = f"  └ {row.id}" if row.sweep else row.id
        table.add_row(shown, row.state, "yes" if row.sealed else "no", generated, row.stop_reasons, row.signoffs)
    stdout_console.print(table)
    return 0


def group_sweeps(rows: list[SnapshotRow], store: Path) -> list[SnapshotRow]:
    """Each sweep's items (every attempt) right under the sweep's row, marked with the sweep; other rows in order."""
    by_id = {row.id: row for row in rows}
    members: dict[str, list[str]] = {}
    for row in rows:
        plan = _read_json(store / row.id / layout.SWEEP_PLAN)
        if plan is None:
            continue
        result = _read_json(store / row.id / layout.SWEEP_RESULT)
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
    plan = _read_json(snapshot / layout.SWEEP_PLAN)
    if plan is not None:
        return _describe_sweep(snapshot, plan, allowed_signers)
    result = _read_json(snapshot / layout.RESULT)
    stop = _read_json(snapshot / layout.STOP)
    has_progress = (snapshot / layout.PROGRESS).exists()
    state = result["status"] if result else ("incomplete" if has_progress else "planned")
    reasons = sorted({s["reason"] for s in stop["sequences"]}) if stop else []
    return SnapshotRow(
        id=snapshot.name,
        state=state,
        sealed=(snapshot / layout.MANIFEST).is_file(),
        generated=result["generated"] if result else None,
        stop_reasons=", ".join(reasons) or "-",
        signoffs=_signoff_summary(snapshot, allowed_signers),
    )


def _describe_sweep(snapshot: Path, plan: dict, allowed_signers: Path | None) -> SnapshotRow:
    result = _read_json(snapshot / layout.SWEEP_RESULT)
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
    from genrun.analysis.signoffs import evaluate_signoffs, summarize_signoffs

    return summarize_signoffs(evaluate_signoffs(snapshot, allowed_signers))


def _read_json(path: Path) -> dict | None:
    try:
        return orjson.loads(path.read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return None
