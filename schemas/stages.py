"""The `stages` evidence: a run made of stages in sequence (an autoregressive stage, then an acoustic one, ...).

Three files, written by the stage recorder of a backend that declares the `stages` evidence kind
(the `loop` backend's `rec`): `stage-progress.ndjson` (live: `start`, periodic `progress`, `end`
per stage, each with per-row counts), `stage-ids.json` (the ids each stage emitted, per row) and
`stages.json` (the summary written when the run ends: unit, rows, counts, what a consuming stage
read, seconds and memory per stage). verify re-derives the counts from the ids and compares them
with the live stream (`analysis/_check_stages.py`).
"""

from typing import Annotated, Literal

from pydantic import Field, TypeAdapter

from ._base import Strict
from ._versioning import Versioned

StageUnit = Literal["token", "frame", "window", "step", "sample"]
"""What one unit of a stage is."""


class _StageEvent(Strict):
    seq: int
    """0-based position in the stream; contiguous."""
    t: float
    """Seconds since the stage recorder started (monotonic clock)."""
    stage: str
    """The stage's name."""
    units: tuple[int, ...]
    """Units counted so far, per row (`emit`ted ids plus `advance`d units)."""
    ids: tuple[int, ...]
    """Ids emitted so far, per row."""
    rss_bytes: int | None = None
    """Resident set size of the process when the record was written."""


class StageStartEvent(_StageEvent):
    """A stage began."""

    event: Literal["start"] = "start"
    """Event tag."""
    unit: StageUnit
    """What the stage counts."""


class StageProgressEvent(_StageEvent):
    """Periodic counts of a running stage."""

    event: Literal["progress"] = "progress"
    """Event tag."""


class StageEndEvent(_StageEvent):
    """A stage ended (returned, raised or was interrupted): its final counts."""

    event: Literal["end"] = "end"
    """Event tag."""
    consumed: int | None = None
    """Units of its source stage a consuming stage read (`None`: it consumes none)."""


AnyStageEvent = Annotated[StageStartEvent | StageProgressEvent | StageEndEvent, Field(discriminator="event")]
STAGE_EVENT: TypeAdapter[StageStartEvent | StageProgressEvent | StageEndEvent] = TypeAdapter(AnyStageEvent)
"""Parses one line of `stage-progress.ndjson`."""


class StageRecord(Strict):
    """One stage, as it ended."""

    name: str
    """The stage's name (unique in the run)."""
    unit: StageUnit
    """What it counts."""
    per_second: float | None
    """Units per second of output (frames: the frame rate), `None` when units are not timed output."""
    rows: int
    """Rows the stage ran."""
    consumes: str | None
    """The earlier stage whose units it reads (`None`: none)."""
    consumed: int | None
    """Units of that stage it read (`None` when it consumes none)."""
    units: tuple[int, ...]
    """Units per row."""
    ids: tuple[int, ...]
    """Ids emitted per row (0 for a row counted with `advance` only)."""
    started_t: float
    """When it began, seconds since the stage recorder started."""
    seconds: float
    """How long it ran."""
    rss_peak_bytes: int | None
    """Peak resident set size of the process when it ended (`None` where the platform does not say)."""


class Stages(Versioned):
    """`stages.json`: every stage of the run in the order they ran."""

    stages: tuple[StageRecord, ...]
    """The stages."""


class StageIds(Versioned):
    """`stage-ids.json`: the ids each stage emitted, per row (`ids[stage][row]`)."""

    ids: dict[str, tuple[tuple[int, ...], ...]]
    """Stage name -> one id list per row."""
