"""`genrun schema`: (re)write the JSON Schema files of every artifact."""

import argparse
from pathlib import Path

from ._output import print_json, stderr_console


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "schema",
        help="write schemas/json/*.schema.json from the pydantic models",
        epilog="example: genrun schema\n  wrote 11 schema files to schemas/json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, help="directory to write to (default: the package's schemas/json)")
    parser.add_argument("--json", action="store_true", help="print the written paths as JSON")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from genrun.schemas.export import JSON_DIR, write_json_schemas

    written = write_json_schemas(args.out or JSON_DIR)
    if args.json:
        print_json([str(p) for p in written])
    else:
        stderr_console.print(f"wrote {len(written)} schema files to {(args.out or JSON_DIR)}")
    return 0
