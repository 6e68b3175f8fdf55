"""`genrun` command line: one module per subcommand, each a thin wrapper over a typed function."""

import argparse
import contextlib
import difflib
import importlib
import os
import sys
import traceback

from genrun import offline_hub
from genrun.runner import __version__
from genrun.runner.errors import GenrunError
from genrun.runner.interrupts import EXIT_CODES, RunInterrupted, interrupt_gate
from genrun.runner.phases import process_start

from ._interrupt import SIGINT_EXIT, exit_with_on_late_signal, stopped_message
from ._output import print_error, set_quiet

SUBCOMMANDS = ("run", "plan", "execute", "sweep", "rerun", "serve", "verify", "report", "watch", "diff", "signoff", "ls", "index", "gc", "export",
               "schema")
"""Module `genrun.runner.cli.<name>` provides `add_parser(subparsers)`; the parser's `handler(args) -> int` runs it."""
TRACEBACK_ENV = "GENRUN_TRACEBACK"
"""Set (to anything) to print the traceback of an unexpected failure of genrun itself, not only its one line."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or only `command`'s subcommand (each imports its own dependencies: `ls` need not wait for
    `verify`'s or `run`'s)."""
    parser = argparse.ArgumentParser(
        prog="genrun",
        description="Run generative models so that every run leaves an immutable, verifiable snapshot.",
    )
    parser.add_argument("--version", action="version", version=f"genrun {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in (command,) if command in SUBCOMMANDS else SUBCOMMANDS:
        importlib.import_module(f"genrun.runner.cli.{name}").add_parser(subparsers)
    return parser


def _parse(parser: argparse.ArgumentParser, given: list[str]) -> argparse.Namespace:
    """`parse_args`, except that an unknown argument is reported by its subcommand's parser (its usage, not the top level's),
    with the closest option of that subcommand when one is close: `unrecognized arguments: --stirct (did you mean --strict?)`."""
    args, unknown = parser.parse_known_args(given)
    if unknown:
        subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
        subcommand = subcommands[args.command] if given[0] == args.command else parser  # `genrun --x ls`: the top level's
        options = [option for action in subcommand._actions for option in action.option_strings]
        named = []
        for token in unknown:
            close = difflib.get_close_matches(token.split("=", 1)[0], options, n=1) if token.startswith("--") else []
            named.append(f"{token} (did you mean {close[0]}?)" if close else token)
        subcommand.error(f"unrecognized arguments: {' '.join(named)}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `genrun` console script; returns the process exit code."""
    if argv is not None:  # called in-process: the caller owns its signal handlers
        return _main(argv)
    returned: list[int] = []
    exit_with_on_late_signal(lambda: returned[0] if returned else None)  # the console script: a later signal exits with its code
    returned.append(_main(None))
    return returned[0]


def _main(argv: list[str] | None) -> int:
    # genrun never downloads: models resolve from local directories or the local HF cache only,
    # and an accidental hub call would hang on a closed network instead of failing clearly.
    offline_hub()
    # From the first line to the last, SIGINT/SIGTERM raise `RunInterrupted` once (never Python's
    # KeyboardInterrupt traceback nor SIGTERM's silent death): planning removes its temporary
    # directory, execute seals an `interrupted` snapshot, and the command exits 130 / 143.
    command = None
    with interrupt_gate():
        try:
            given = sys.argv[1:] if argv is None else argv
            args = _parse(build_parser(given[0] if given else None), given)
            args.started = process_start() if argv is None else None  # the console script's start (`run` shows its share)
            command = args.command
            quiet = getattr(args, "quiet", False)
            set_quiet(quiet)  # every call: an earlier in-process call's --quiet must not carry over
            output: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
            if hasattr(args, "quiet"):  # commands that load models: genrun owns the terminal
                from ._library_output import library_output_taken_over

                output = library_output_taken_over(quiet)
            with output:
                return args.handler(args)
        except GenrunError as exc:
            print_error(str(exc))
            return exc.exit_code
        except RunInterrupted as exc:  # commands that make or run snapshots say more (cli/_interrupt.py)
            print_error(stopped_message(command, exc.signal_name))
            return EXIT_CODES.get(exc.signal_name, 130)
        except Exception as exc:  # a failure of genrun itself: one line naming it; where it happened only when asked
            if os.environ.get(TRACEBACK_ENV):
                traceback.print_exc()
            print_error(f"{type(exc).__name__}: {exc} (genrun failed unexpectedly; {TRACEBACK_ENV}=1 shows where)")
            return 1


if __name__ == "__main__":
    sys.exit(main())
