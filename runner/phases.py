"""The execution's phase clock: which phase the run is in, so that `result.json` says where `total_s` went.

Phases are consecutive: entering one ends the one before, and the last one ends when `result.json`
is built, so the phases reached sum to `total_s` by construction (one clock, no gaps, no overlap).
"""

import time
from typing import Literal, get_args

from genrun.schemas import Phases

Phase = Literal["checks", "imports", "prepare", "load", "generate", "evidence"]
"""In order; each is a `Phases` field (`<phase>_s`), whose docstring says what it covers."""

assert [f"{p}_s" for p in get_args(Phase)] == list(Phases.model_fields), "Phase and Phases name the same phases, in order"


class PhaseClock:
    """Started when `execute` is called (in `checks`); `enter` the next phase at each boundary."""

    def __init__(self, origin: float) -> None:
        self.origin = origin
        """`time.monotonic()` when execution began: the same origin as `progress.ndjson`'s `t`."""
        self._entered: list[tuple[Phase, float]] = [("checks", origin)]

    def enter(self, phase: Phase) -> None:
        """End the current phase now and begin `phase`."""
        self._entered.append((phase, time.monotonic()))

    def stop(self) -> tuple[float, Phases]:
        """`(total_s, phases)`, both ending now."""
        until = time.monotonic()
        seconds: dict[str, float] = {}
        for (phase, began), (_, ended) in zip(self._entered, [*self._entered[1:], ("evidence", until)]):
            seconds[f"{phase}_s"] = seconds.get(f"{phase}_s", 0.0) + ended - began
        return until - self.origin, Phases(**{field: seconds.get(field) for field in Phases.model_fields})
