"""`genrun` command line: one module per subcommand, each a thin wrapper over a typed function."""

import argparse
import importlib
import sys

from genrun import offline_hub
from genrun.runner import __version__
from genrun.runner.errors import GenrunError

from ._output import print_error

SUBCOMMANDS = ("run", "plan", "execute", "sweep", "verify", "report", "diff", "signoff", "ls", "schema")
"""Module `genrun.runner.cli.<name>` provides `add_parser(subparsers)`; the parser's `handler(args) -> int` runs it."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="genrun",
        description="Run generative models so that every run leaves an immutable, verifiable snapshot.",
    )
    parser.add_argument("--version", action="version", version=f"genrun {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"genrun.runner.cli.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `genrun` console script; returns the process exit code."""
    # genrun never downloads: models resolve from local directories or the local HF cache only,
    # and an accidental hub call would hang on a closed network instead of failing clearly.
    offline_hub()
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except GenrunError as exc:
        print_error(str(exc))
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
