"""`generation-stop.json`: why each sequence stopped, recorded live, with its evidence."""

from typing import Any, Literal

from ._base import Strict

StopReason = Literal[
    "eos",
    "stop_string",
    "max_new_tokens",
    "max_length",
    "max_time",
    "custom",
    "interrupted",
    "exception",
    "unknown",
    "completed",
]


class ExceptionInfo(Strict):
    """An exception that ended the run."""

    type: str
    """Qualified exception class name."""
    message: str
    """`str(exception)`."""
    traceback: str
    """Formatted traceback."""


class SequenceStop(Strict):
    """Stop record of one row (or, for diffusion, of the pipeline call)."""

    index: int
    """Row index (`sequence_<index>`)."""
    call_index: int
    """Outermost generate call the row belongs to."""
    reason: StopReason
    """Classified reason; `custom` when only the caller's own StoppingCriteria fired; `unknown` when no recorded criterion explains the stop."""
    generated: int
    """Units generated for this row (tokens; steps for diffusion)."""
    last_token_id: int | None
    """Last generated id (`None` for diffusion or no tokens)."""
    fired: tuple[str, ...]
    """Criteria that fired at the step the row finished, e.g. `EosTokenCriteria`."""
    eos_token_ids: tuple[int, ...]
    """Effective EOS set."""
    max_new_tokens: int | None
    """Effective `max_new_tokens`."""
    max_length: int | None
    """Effective `max_length` (prompt included)."""
    prompt_length: int | None
    """Padded prompt length."""
    steps_planned: int | None = None
    """Diffusion: scheduler timesteps planned."""
    exception: ExceptionInfo | None = None
    """Set when `reason` is `exception`."""
    evidence: dict[str, Any]
    """Reason-specific facts: `eos_token_id`, `stop_string`, `limit`, `signal`, `max_time`, ..."""


class GenerationStop(Strict):
    """Stop records for every row of every outermost generate call."""

    schema_version: Literal[1] = 1
    """Version of this file's layout."""
    sequences: tuple[SequenceStop, ...]
    """One record per row."""
