"""`genrun index --rebuild`: make your listing cache of a store (what `ls` shows of it) anew from the snapshots' files."""

import argparse

from ._options import add_allowed_signers, add_store


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "index",
        help="rebuild your listing cache of a store (private, in your cache folder; deleting it loses nothing)",
        epilog=(
            "example: genrun index --rebuild --store snapshots\n"
            "  cached 1,204 sealed snapshot(s) of snapshots in ~/.cache/genrun/listing/3f9a….sqlite3\n"
            "`ls` fills the cache as it goes; rebuild to accept a snapshot whose seal changed since it was cached\n"
            "(after 'genrun verify' says what it holds). Nothing is written in the store; a '.genrun-index' folder\n"
            "left in a store by an older genrun is never read and may be removed"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_store(parser)
    parser.add_argument("--rebuild", action="store_true", required=True, help="replace the cache with one read from the files")
    add_allowed_signers(parser, "allowed-signers file for judging signed sign-offs")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from genrun.runner.errors import StoreError
    from genrun.runner.listing import rebuild_cache
    from genrun.runner.listing_cache import CacheUnavailable
    from genrun.runner.store import describe_os_error, existing_store

    from ._output import print_note, stderr_console

    store = existing_store(args.store)
    try:
        path, count = rebuild_cache(store, args.allowed_signers, progress=print_note)
    except CacheUnavailable as exc:
        raise StoreError(str(exc)) from None
    except OSError as exc:
        raise StoreError(describe_os_error(exc, store)) from None
    stderr_console.print(f"cached {count:,} sealed snapshot(s) of {store} in {path}", markup=False, highlight=False, soft_wrap=True)
    return 0
