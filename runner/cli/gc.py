"""`genrun gc`: list, then with --yes remove, the planning directories a killed `genrun plan` left in a store."""

import argparse

from rich.markup import escape

from genrun.schemas.rendering import human_bytes

from ._options import add_store
from ._output import print_json, stderr_console, stdout_console


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "gc",
        help="remove abandoned .tmp-* planning directories from a store (a dry run without --yes)",
        description="List the .tmp-* directories a planner killed while planning left in the store; with --yes, remove them. "
                    "A directory a live planner holds, planned and sealed snapshots are never touched.",
        epilog=("example: genrun gc --store snapshots --yes\n"
                "  removed 1 abandoned planning directory (3.1 kB) from snapshots: .tmp-k2v9x0ab"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_store(parser)
    parser.add_argument("--yes", action="store_true", help="remove them (default: only say what would be removed)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from genrun.runner.gc import collect_abandoned_plans
    from genrun.runner.store import locate_store, missing_store

    location = locate_store(args.store)
    absent = missing_store(location)
    if absent:  # nothing to collect, but a mistyped --store must not look like a clean store
        stderr_console.print(f"note: {absent}", markup=False, highlight=False, soft_wrap=True)
    report = collect_abandoned_plans(location.path, remove=args.yes)
    if args.json:
        print_json({
            "store": str(report.store), "dry_run": report.dry_run, "removed_bytes": report.removed_bytes,
            "removed": [{"path": str(p.path), "bytes": p.bytes} for p in report.removed],
            "live": [{"path": str(p.path), "bytes": p.bytes, "holder": p.holder} for p in report.live],
        })
        return 0
    count = len(report.removed)
    noun = "directory" if count == 1 else "directories"
    names = ", ".join(p.path.name for p in report.removed)
    if not count:
        stdout_console.print(f"no abandoned planning directories in {escape(str(report.store))}", soft_wrap=True)
    elif report.dry_run:
        stdout_console.print(f"would remove {count} abandoned planning {noun} ({human_bytes(report.removed_bytes)}) from "
                             f"{escape(str(report.store))}: {escape(names)}; run again with --yes to remove them", soft_wrap=True)
    else:
        stdout_console.print(f"removed {count} abandoned planning {noun} ({human_bytes(report.removed_bytes)}) from "
                             f"{escape(str(report.store))}: {escape(names)}", soft_wrap=True)
    for plan in report.live:
        stdout_console.print(f"left {escape(plan.path.name)}: {escape(plan.holder or '')} is planning into it", soft_wrap=True)
    return 0
