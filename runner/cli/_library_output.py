"""genrun owns the terminal: for the commands that load models, library output is captured for the whole command.

What libraries write while a snapshot executes goes to its `run-log.ndjson` (`genrun.runner.run_log`); this
enclosing capture also holds what they write before (while `run` or `rerun` plans), and that goes to the same log.
A command that executes nothing (`plan`) has no log to write to: what it held is shown at the end as dim
`  transformers: …` lines (the first few of each library, then a count), or not at all with `--quiet`. Nothing here changes what generate does.
"""

import contextlib
from collections.abc import Iterator

from rich.markup import escape

from genrun.runner.run_log import captured

from ._output import stderr_console


SHOWN_PER_LIBRARY = 3
"""Held lines shown per library after a command: vLLM alone logs a dozen configuration lines while a request is
checked; the first few say which library spoke, the rest is a count."""


@contextlib.contextmanager
def library_output_taken_over(quiet: bool) -> Iterator[None]:
    """For one command: library output captured (see the module doc); what no snapshot's log took is shown after it."""
    with captured() as held:
        yield
    if quiet:
        return
    shown: dict[str, int] = {}
    for source, text in held.held_lines():
        shown[source] = shown.get(source, 0) + 1
        if shown[source] <= SHOWN_PER_LIBRARY:
            stderr_console.print(f"  [dim]{escape(source)}: {escape(text)}[/]", soft_wrap=True)
    for source, count in shown.items():
        if count > SHOWN_PER_LIBRARY:
            stderr_console.print(f"  [dim]{escape(source)}: … and {count - SHOWN_PER_LIBRARY} more lines (--quiet hides "
                                 "them; a run's own log keeps what its execution prints)[/]", soft_wrap=True)


def add_quiet_argument(parser) -> None:  # noqa: ANN001 (argparse.ArgumentParser)
    """`--quiet` on the commands that load models; `main` then takes over the libraries' output."""
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="for scripts: no progress, summary or library notices on stderr (errors and --json still appear); "
                             "the snapshot's directory alone on stdout")
