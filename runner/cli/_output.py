"""Output conventions: human text on stderr via rich, `--json` documents alone on stdout."""

import sys
from typing import Any

import orjson
from rich.console import Console
from rich.markup import escape

stderr_console = Console(stderr=True, highlight=False)
"""Diagnostics, progress and human summaries."""
stdout_console = Console(highlight=False)
"""Human tables that a user may pipe (ls, verify, report)."""
error_console = Console(stderr=True, highlight=False)
"""Errors: shown even with --quiet."""


def set_quiet(quiet: bool) -> None:
    """`--quiet`: no human progress or summaries on stderr (errors and --json documents still appear)."""
    stderr_console.quiet = quiet


def print_error(message: str) -> None:
    """`genrun: error: <message>` on stderr."""
    # escape(): messages quote request tables like "[generation]", which rich would eat as markup.
    error_console.print(f"[bold red]genrun: error:[/] {escape(message)}", soft_wrap=True)


def print_json(document: Any) -> None:
    """One JSON document on stdout and nothing else there."""
    sys.stdout.buffer.write(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.flush()
