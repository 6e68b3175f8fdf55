"""`genrun schema`: (re)write the JSON Schema files of every artifact, and docs/snapshot-format.md."""

import argparse
from pathlib import Path

from ._output import print_json, stderr_console


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "schema",
        help="write schemas/json/*.schema.json (and, without --out, docs/snapshot-format.md) from the pydantic models",
        epilog="example: genrun schema\n  wrote N schema files to schemas/json and the format doc to docs/snapshot-format.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, help="directory to write the JSON schemas to (default: the package's schemas/json); "
                        "the format doc is then not written")
    parser.add_argument("--json", action="store_true", help="print the written paths as JSON")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from genrun.schemas.export import JSON_DIR, write_json_schemas
    from genrun.schemas.format_doc import DOC_PATH, write_format_doc

    written = write_json_schemas(args.out or JSON_DIR)
    doc = write_format_doc() if args.out is None and DOC_PATH.parent.parent.joinpath("pyproject.toml").is_file() else None
    if args.json:
        print_json([str(p) for p in written])
    else:
        stderr_console.print(f"wrote {len(written)} schema files to {(args.out or JSON_DIR)}" + (f" and the format doc to {doc}" if doc else ""), soft_wrap=True)
    return 0
