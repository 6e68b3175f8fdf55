"""`genrun verify SNAPSHOT`: named read-only checks; exit 1 on any FAIL (and on any WARN with --strict)."""

import argparse

from genrun.analysis.checks import CHECKS

from ._options import add_allowed_signers
from ._output import add_store_lookup, print_json, stdout_console

def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="cross-check a snapshot: integrity, request, limits, token counts, stop reasons, sign-offs",
        description="Run every check on SNAPSHOT without writing anything. Exit 1 on any FAIL, and on any WARN with --strict.",
        epilog=(
            "example: genrun verify snapshots/20261129T101500Z-tiny-3fa2c1\n"
            "  completeness         PASS  sealed: result.json (status succeeded) and manifest-sha256.txt are present\n"
            "  ...\n"
            f"  {len(CHECKS)} checks: P passed, W warnings, F failed, S skipped; examined N files, T token ids, R progress records\n"
            "a planned, never-executed snapshot passes as 'planned, not executed' (its frozen part is checked)"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("snapshot", metavar="SNAPSHOT",
                        help="snapshot directory, id, or unique id prefix in the store; a sweep (by path or id) verifies every item and shows the distribution and its own sign-offs")
    add_store_lookup(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document (findings + summary) on stdout")
    parser.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    add_allowed_signers(parser, "SSH allowed-signers file for sign-off signatures")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from genrun.analysis import SnapshotNotFound, summary_line, verify_snapshot
    from genrun.runner.errors import SnapshotError

    from ._target import resolve_target

    path, is_sweep = resolve_target(args.snapshot, args.store)
    if is_sweep:
        from .sweep_verify import handle_sweep

        return handle_sweep(args, path)
    try:
        verification = verify_snapshot(path, allowed_signers=args.allowed_signers)
    except SnapshotNotFound as exc:
        raise SnapshotError(str(exc)) from None
    if args.json:
        document = verification.model_dump(mode="json")
        document["summary_line"] = summary_line(verification.summary)
        document["exit_code"] = verification.exit_code(args.strict)
        print_json(document)
    else:
        render_verification(verification)
    return verification.exit_code(args.strict)


def render_verification(verification) -> None:  # noqa: ANN001 (analysis.Verification, imported lazily)
    """The findings as a table, then the summary line exactly as documented."""
    from genrun.analysis import summary_line

    from ._findings import print_findings

    print_findings(f"verify {verification.snapshot_id}", verification.findings)
    stdout_console.print(summary_line(verification.summary), markup=False, highlight=False, soft_wrap=True)
