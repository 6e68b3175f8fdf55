"""Phase clocks: which phase a command is in, so that its summary says where the time went.

Phases are consecutive: entering one ends the one before, and the last one ends when the clock
stops, so the phases reached sum to the total by construction (one clock, no gaps, no overlap); a
phase entered again adds to its earlier seconds. `PhaseClock` times an execution (`result.json`'s
`timings.phases`); `PlanClock` times planning, which `genrun run` does in the same process first.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Generic, Literal, NamedTuple, TypeVar, get_args

if TYPE_CHECKING:  # imported where used: every command imports this module at start-up, and a model costs its build
    from genrun.schemas import Phases

Phase = Literal["checks", "imports", "prepare", "load", "generate", "evidence"]
"""In order; each is a `Phases` field (`<phase>_s`), whose docstring says what it covers (tests/test_phases.py checks)."""

PlanPhase = Literal["startup", "checks", "imports", "hashing", "budget", "environment", "freeze"]
"""Planning's phases, in the order shown; each is a `PlanPhases` field (`<phase>_s`), whose docstring says what it covers."""

P = TypeVar("P", bound=str)


class _Clock(Generic[P]):
    def __init__(self, origin: float, first: P, on_enter: Callable[[P], None] | None = None) -> None:
        self.origin = origin
        """`time.monotonic()` when the clock started."""
        self._entered: list[tuple[P, float]] = [(first, origin)]
        self._on_enter = on_enter

    def enter(self, phase: P) -> None:
        """End the current phase now and begin `phase` (and tell `on_enter`, e.g. a terminal's status line)."""
        self._entered.append((phase, time.monotonic()))
        if self._on_enter is not None:
            self._on_enter(phase)

    def _stop(self) -> tuple[float, dict[str, float]]:
        """`(total_s, {"<phase>_s": seconds})`, both ending now; phases never entered are absent."""
        until = time.monotonic()
        seconds: dict[str, float] = {}
        for (phase, began), ended in zip(self._entered, [*(t for _, t in self._entered[1:]), until]):
            seconds[f"{phase}_s"] = seconds.get(f"{phase}_s", 0.0) + ended - began
        return until - self.origin, seconds


class PhaseClock(_Clock[Phase]):
    """Started when `execute` is called (in `checks`); `enter` the next phase at each boundary."""

    def __init__(self, origin: float) -> None:
        super().__init__(origin, "checks")

    def stop(self) -> tuple[float, Phases]:
        """`(total_s, phases)`, both ending now."""
        from genrun.schemas import Phases

        total, seconds = self._stop()
        return total, Phases(**{field: seconds.get(field) for field in Phases.model_fields})


class PlanPhases(NamedTuple):
    """Where planning's `total_s` went, seconds; the phases reached sum to it. `None`: planning never reached that phase."""

    total_s: float
    """From the start of planning (of genrun in the process, with `startup_s`) to the end of freezing."""
    startup_s: float | None
    """From genrun's start in the process (`process_start`) to planning: genrun's imports, reading the command line."""
    checks_s: float | None
    """Reading the request and checking it: the backend's own validation (which reads the checkpoint's config, importing
    what that needs), the model path, the device, user code's references."""
    imports_s: float | None
    """Importing the backend's module; its libraries (torch, transformers, ...) are imported by the first check that uses them (in `checks`)."""
    hashing_s: float | None
    """Identifying what the run depends on: sha256 of input files, code and weights (through the hash cache)."""
    budget_s: float | None
    """The pre-flight token and memory budget."""
    environment_s: float | None
    """Recording the environment: package versions, git state, the accelerator (which imports torch where nothing had)."""
    freeze_s: float | None
    """Writing the snapshot's frozen files and its frozen manifest."""

    def parts(self) -> list[tuple[str, float]]:
        """`[(phase, seconds)]` for the phases reached, in order."""
        return [(phase, seconds) for phase in get_args(PlanPhase) if (seconds := getattr(self, f"{phase}_s")) is not None]


class PlanClock(_Clock[PlanPhase]):
    """Started in `checks` now, or in `startup` at `started` (`process_start()`); `enter` the next phase at each boundary."""

    def __init__(self, started: float | None = None, on_enter: Callable[[PlanPhase], None] | None = None) -> None:
        if started is None:
            super().__init__(time.monotonic(), "checks", on_enter)
        else:
            super().__init__(started, "startup", on_enter)

    def stop(self) -> PlanPhases:
        """Planning's phases, ending now."""
        total, seconds = self._stop()
        return PlanPhases(total_s=total, **{f"{phase}_s": seconds.get(f"{phase}_s") for phase in get_args(PlanPhase)})


assert [f"{p}_s" for p in get_args(PlanPhase)] == list(PlanPhases._fields[1:]), "PlanPhase and PlanPhases name the same phases, in order"


def process_start() -> float:
    """When this process began to run genrun, on the `time.monotonic()` clock: the later of the process's start and
    genrun's first import (`genrun._started`).

    The process's start alone (Linux: `/proc/self/stat`, 10 ms ticks) counts what a shell ran before it exec'd genrun
    in its own process (`bash -c 'pip install ...; genrun run ...'`); the first import alone counts from a parent's
    import in a process forked from one that had imported genrun. Python's own start before genrun's first import
    (tens of milliseconds) is left out."""
    from genrun import _started

    forked = _os_process_start()
    return max(forked, _started.MONOTONIC) if forked is not None else _started.MONOTONIC


def _os_process_start() -> float | None:
    """This process's start (its fork, not its exec) on the `time.monotonic()` clock; `None` where unknown."""
    try:  # the fields after "pid (command)": starttime, in clock ticks after boot, is the 20th of them
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        after_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        running_for = time.clock_gettime(time.CLOCK_BOOTTIME) - after_boot
    except (OSError, ValueError, IndexError, AttributeError):  # no /proc, no CLOCK_BOOTTIME (not Linux)
        return None
    return time.monotonic() - running_for if running_for >= 0 else None
