"""A rich progress bar on stderr while a run generates: units, units/s, memory, ETA against the budget.

Only on a terminal (or when asked); never on stdout, so `--json` output is unaffected. It is
refreshed by the recorder at most every `recorder.LIVE_REFRESH_S` seconds, with rich's own
refresh thread off so nothing competes with generation for the CPU between updates.
"""

import sys
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from genrun.schemas.rendering import human_bytes


def _memory(n: int | None) -> str:
    return "mem ?" if n is None else human_bytes(n)


class LiveProgress:
    """The bar; a `recorder.LiveSink`. Use as a context manager around generation."""

    def __init__(self, unit: str, planned_units: int | None, console: Console | None = None) -> None:
        self._unit = unit
        self._progress = Progress(
            TextColumn("[bold]generating[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[unit]}s"),
            TextColumn("{task.fields[rate]:.1f} {task.fields[unit]}/s"),
            TextColumn("{task.fields[memory]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console or Console(stderr=True),
            auto_refresh=False,
            transient=False,
            # library output is captured for the run's log (`run_log`): rich's proxy would redraw the bar into it
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._task = self._progress.add_task("generate", total=planned_units, unit=unit, rate=0.0, memory=_memory(None))

    def update(self, generated: int, units_per_s: float, rss_bytes: int | None) -> None:
        """Show the current count, rate and resident memory."""
        self._progress.update(self._task, completed=generated, rate=units_per_s, memory=_memory(rss_bytes))
        self._progress.refresh()

    def __enter__(self) -> "LiveProgress":
        self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._progress.stop()


def wants_live(live: bool | None) -> bool:
    """`None`: show the bar only when stderr is a terminal."""
    if live is not None:
        return live
    return sys.stderr.isatty()
