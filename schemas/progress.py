"""`progress.ndjson`: append-only events, one JSON object per line, as a tagged union."""

from typing import Annotated, Literal

from pydantic import Field, TypeAdapter

from ._base import Strict

Unit = Literal["token", "frame", "step"]
"""The unit vocabulary, declared once: what `generated` counts (diffusion counts `step`s)."""


class _Event(Strict):
    seq: int
    """0-based position in the stream; contiguous."""
    t: float
    """Seconds since the run's start (monotonic clock)."""
    generated: int
    """Units generated so far (per row, the furthest row)."""
    rss_bytes: int | None = None
    """Resident set size of the process."""
    cuda_allocated_bytes: int | None = None
    """`allocated_bytes.all.current` (CUDA only)."""
    cuda_reserved_bytes: int | None = None
    """`reserved_bytes.all.current` (CUDA only)."""
    cuda_peak_allocated_bytes: int | None = None
    """`allocated_bytes.all.peak` (CUDA only)."""


class StartEvent(_Event):
    """The run started (weights are loaded; generation is about to begin)."""

    event: Literal["start"] = "start"
    """Event tag."""
    wall_time: str
    """UTC ISO-8601 time of the start."""
    unit: Unit
    """What `generated` counts."""
    planned_units: int | None
    """Units the budget allows (`None` when unknown)."""
    rows: int | None
    """Rows decoded in parallel."""
    schema_version: int = 1
    """Snapshot format of the stream (absent in format 1, genrun 0.1.0); a reader refuses a newer one."""


class FirstTokenEvent(_Event):
    """The first unit was produced (time to first token)."""

    event: Literal["first_token"] = "first_token"
    """Event tag."""


class ProgressEvent(_Event):
    """Periodic throughput and memory."""

    event: Literal["progress"] = "progress"
    """Event tag."""
    units_per_s: float
    """Cumulative rate since the first unit, per row (like `generated`; result.json's `units_per_s` sums rows)."""
    window_units_per_s: float
    """Rate since the previous progress record, per row."""
    last_ids: tuple[int, ...] = ()
    """Last few token ids of row 0."""


class EndEvent(_Event):
    """Generation finished normally."""

    event: Literal["end"] = "end"
    """Event tag."""
    units_per_s: float
    """Cumulative rate since the first unit, per row (like `generated`)."""
    last_ids: tuple[int, ...] = ()
    """Last few token ids of row 0."""


class ExceptionEvent(_Event):
    """Generation (or the user's code) raised."""

    event: Literal["exception"] = "exception"
    """Event tag."""
    type: str
    """Exception class name."""
    message: str
    """`str(exception)`."""


class InterruptedEvent(_Event):
    """A signal stopped the run."""

    event: Literal["interrupted"] = "interrupted"
    """Event tag."""
    signal: str
    """`SIGINT` or `SIGTERM`."""


AnyEvent = Annotated[
    StartEvent | FirstTokenEvent | ProgressEvent | EndEvent | ExceptionEvent | InterruptedEvent,
    Field(discriminator="event"),
]
EVENT_ADAPTER: TypeAdapter[AnyEvent] = TypeAdapter(AnyEvent)
"""Parse one line: `EVENT_ADAPTER.validate_json(line)`."""
