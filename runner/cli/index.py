"""`genrun index --rebuild`: rebuild the store index (a cache of what `ls` shows) from the snapshots' files alone."""

import argparse

from ._options import add_allowed_signers, add_store


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "index",
        help="rebuild the store's index (a cache for `genrun ls`; deleting it loses nothing)",
        epilog=(
            "example: genrun index --rebuild --store snapshots\n"
            "  indexed 1,204 sealed snapshot(s) in snapshots/.genrun-index/index.sqlite3\n"
            "`ls` fills the index as it goes; rebuild after an index was damaged, written by a newer genrun,\n"
            "or to accept a snapshot whose seal changed since it was indexed"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_store(parser)
    parser.add_argument("--rebuild", action="store_true", required=True, help="replace the index with one read from the files")
    add_allowed_signers(parser, "allowed-signers file for judging signed sign-offs")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from genrun.runner.errors import StoreError
    from genrun.runner.listing import rebuild_index
    from genrun.runner.store import describe_os_error, existing_store
    from genrun.runner.store_index import INDEX_DIR, INDEX_FILE

    from ._output import print_note, stderr_console

    store = existing_store(args.store)
    try:
        count = rebuild_index(store, args.allowed_signers, progress=print_note)
    except OSError as exc:
        raise StoreError(describe_os_error(exc, store / INDEX_DIR)) from None
    stderr_console.print(f"indexed {count:,} sealed snapshot(s) in {store / INDEX_DIR / INDEX_FILE}", markup=False, highlight=False, soft_wrap=True)
    return 0
