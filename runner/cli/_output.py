"""Output conventions: human text on stderr via rich, `--json` documents alone on stdout."""

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.markup import escape

class _StreamConsole:
    """A rich `Console` on whatever `sys.stdout`/`sys.stderr` is when it prints.

    A Console made at import decides colour and terminal-ness once, for the stream of that moment;
    `main()` called in-process (tests, a program embedding the CLI) may have redirected the stream
    since, so the Console is remade whenever the stream object changes.
    """

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._stream: Any = None
        self._console: Console | None = None
        self._quiet = False

    def set_quiet(self, quiet: bool) -> None:
        """Kept across remade Consoles (rich's own `quiet` lives on the Console)."""
        self._quiet = quiet
        if self._console is not None:
            self._console.quiet = quiet

    def __getattr__(self, name: str) -> Any:
        stream = sys.stderr if self._stderr else sys.stdout
        if self._console is None or stream is not self._stream:
            self._stream, self._console = stream, Console(file=stream, highlight=False, quiet=self._quiet)
        return getattr(self._console, name)


_stderr = _StreamConsole(stderr=True)
stderr_console: Console = _stderr  # type: ignore[assignment]
"""Diagnostics, progress and human summaries."""
stdout_console: Console = _StreamConsole(stderr=False)  # type: ignore[assignment]
"""Human tables that a user may pipe (ls, verify, report)."""
error_console = Console(stderr=True, highlight=False)
"""Errors: shown even with --quiet."""


def set_quiet(quiet: bool) -> None:
    """`--quiet`: no human progress or summaries on stderr (errors and --json documents still appear)."""
    _stderr.set_quiet(quiet)


def print_error(message: str) -> None:
    """`genrun: error: <message>` on stderr."""
    # escape(): messages quote request tables like "[generation]", which rich would eat as markup.
    error_console.print(f"[bold red]genrun: error:[/] {escape(message)}", soft_wrap=True)


def print_note(text: str) -> None:
    """`note: <text>` on stderr (e.g. progress on long work): rich markup and wrapping off, so paths print as they are."""
    stderr_console.print(f"note: {text}", markup=False, highlight=False, soft_wrap=True)


@contextlib.contextmanager
def working(message: str) -> Iterator[Callable[[str], None]]:
    """A status line (rich's spinner) on stderr while the block's work runs, so a long quiet step is not mistaken for a
    hang; it yields a function that changes the line. Only on a terminal and without `--quiet`: piped output and
    scripts get nothing extra (the yielded function does nothing there)."""
    if not stderr_console.is_terminal or stderr_console.quiet:
        yield lambda _text: None
        return
    with stderr_console.status(escape(message)) as status:
        yield lambda text: status.update(escape(text))


def counted(count: int, noun: str) -> str:
    """`17 frames`, `1 window`, `1,024 tokens`: a count and its noun, plural unless one."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def print_json(document: Any) -> None:
    """One JSON document on stdout and nothing else there."""
    # the newline appended by orjson, not by `+`: a copy of the whole document (50 MB for `ls --json` of 100,000)
    sys.stdout.buffer.write(orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
    sys.stdout.flush()


def add_store_lookup(parser: Any) -> None:
    """`--store DIR`, for the commands that take SNAPSHOT as a path, an id or a unique id prefix (`store.find_snapshot`)."""
    from ._options import add_store

    add_store(parser, "store to look a snapshot id up in")


def print_quiet_result(args: Any, snapshot: Path | None) -> None:
    """`--quiet` without `--json`: the snapshot's directory alone on stdout, as `genrun run` shows paths, so that a script
    can take it (`snap=$(genrun run r.toml -q) && genrun verify "$snap"`); nothing when no snapshot was made."""
    if getattr(args, "quiet", False) and not getattr(args, "json", False) and snapshot is not None:
        sys.stdout.write(f"{shown_path(snapshot)}\n")
        sys.stdout.flush()


def shown_path(path: Path) -> Path:
    """`path` as `genrun run` shows it: relative to the current directory when inside it, else as it is."""
    try:
        return Path(path).absolute().relative_to(Path.cwd())
    except ValueError:
        return Path(path)
