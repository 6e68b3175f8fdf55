"""`genrun diff A B`: what differs between two snapshots, down to the first diverging token."""

import argparse

from ._output import add_store_lookup, print_json, stdout_console


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="differences between two snapshots",
        description="Compare snapshots A and B read-only: request, effective config, environment, code and model identities, "
                    "results, stop reasons, counts and the index of the first diverging token per sequence. Exit 0 either way.",
        epilog=(
            "example: genrun diff snapshots/…-tiny-3fa2c1 snapshots/…-tiny-budget-9b0e11\n"
            "  Request: 2 difference(s)  input.prompt 'count down from 12 :' → 'count down from 40 :' ...\n"
            "  seq  reason A  reason B        count A  count B  first diverging token\n"
            "  0    eos       max_new_tokens  13       8        0"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("a", metavar="A", help="first snapshot: directory, id, or unique id prefix in the store")
    parser.add_argument("b", metavar="B", help="second snapshot: directory, id, or unique id prefix in the store")
    add_store_lookup(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from genrun.analysis import SnapshotNotFound, diff_snapshots, render_diff
    from genrun.runner.errors import SnapshotError
    from ._target import list_items_command, refuse_sweep, resolve_target

    (a, a_sweep), (b, b_sweep) = resolve_target(args.a, args.store), resolve_target(args.b, args.store)
    for path, is_sweep in ((a, a_sweep), (b, b_sweep)):
        if is_sweep:
            refuse_sweep(path, "diff", f"Compare two of its items ('{list_items_command(path)}' lists them): genrun diff ITEM_A ITEM_B")
    try:
        diff = diff_snapshots(a, b)
    except SnapshotNotFound as exc:
        raise SnapshotError(str(exc)) from None
    if args.json:
        document = diff.model_dump(mode="json")
        document["identical"] = diff.identical
        print_json(document)
    else:
        render_diff(diff, stdout_console)
    return 0
