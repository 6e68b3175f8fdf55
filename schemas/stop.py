"""`generation-stop.json`: why each sequence stopped, recorded live, with its evidence.

The stop vocabulary (`StopReason`) and the wording of each reason (`STOP_REASON_MEANING`) live
here, once; `evidence` is one model per reason, tagged by `reason` (format 2; format-1 files,
whose evidence was an untyped object, are migrated in memory).
"""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from ._base import Strict
from ._versioning import Versioned
from .generation_config import LimitSource

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

STOP_REASON_MEANING: Mapping[str, str] = MappingProxyType({
    "eos": "an end-of-sequence token was generated",
    "stop_string": "a configured stop string appeared in the text",
    "max_new_tokens": "the row reached `max_new_tokens`",
    "max_length": "the row reached `max_length` (prompt included)",
    "max_time": "generation ran past `max_time`",
    "custom": "only the caller's own StoppingCriteria fired (genrun names them, it does not interpret them)",
    "interrupted": "a signal (SIGINT/SIGTERM) ended the run",
    "exception": "generate (or the pipeline) raised",
    "unknown": "no recorded criterion explains the stop (e.g. a callable custom_generate, or evidence genrun could not attach)",
    "completed": "the diffusion pipeline ran all its steps",
})
"""Reason -> what it means, in words shown by `execute`, `report` and the format doc."""


class ExceptionInfo(Strict):
    """An exception that ended the run."""

    type: str
    """Qualified exception class name."""
    message: str
    """`str(exception)`."""
    traceback: str
    """Formatted traceback."""


class DiffusionSteps(Strict):
    """Diffusion: steps done of steps planned, and how they were observed."""

    steps_done: int
    """Denoising steps observed."""
    steps_planned: int | None
    """Steps planned, best evidence first (see `steps_planned_source`)."""
    steps_planned_source: Literal["denoising_loop", "set_timesteps_dry_run", "requested_num_inference_steps"]
    """Where `steps_planned` came from."""
    num_inference_steps: int | None
    """`num_inference_steps` of the call."""
    timesteps_planned_dry_run: int | None
    """Timesteps from a dry run of the scheduler's `set_timesteps`."""
    step_observation: str | None
    """`callback_on_step_end` or `progress_bar`."""
    denoising_loops: int
    """Denoising loops the pipeline opened."""
    output_returned: bool
    """The pipeline returned an output."""


class _TokenStop(Strict):
    """Shared by reasons a recorded stopping criterion explains."""

    stop_length: int | None
    """Sequence length (prompt included) at the step the row finished."""
    source: LimitSource | None
    """Who set the limit (or EOS set, stop strings) that fired: request, model, library default, entry point."""
    custom_criteria: tuple[str, ...] = ()
    """User criteria that fired at the same step (genrun does not interpret them)."""
    rule: str | None = None
    """Set when no live criterion decided (continuous batching): the completion rule that was applied."""


class EosEvidence(_TokenStop):
    """`eos`."""

    reason: Literal["eos"] = "eos"
    """Tag."""
    eos_token_id: int | None
    """The EOS id generated last."""


class StopStringEvidence(_TokenStop):
    """`stop_string`."""

    reason: Literal["stop_string"] = "stop_string"
    """Tag."""
    stop_strings: tuple[str, ...]
    """Configured stop strings."""
    stop_string: str | None
    """The one that matched latest in the decoded tail (`None` when no tokenizer could tell)."""


class MaxNewTokensEvidence(_TokenStop):
    """`max_new_tokens`."""

    reason: Literal["max_new_tokens"] = "max_new_tokens"
    """Tag."""
    limit: int | None
    """Effective `max_new_tokens`."""


class MaxLengthEvidence(_TokenStop):
    """`max_length`."""

    reason: Literal["max_length"] = "max_length"
    """Tag."""
    limit: int | None
    """Effective `max_length` (prompt included)."""


class MaxTimeEvidence(_TokenStop):
    """`max_time`."""

    reason: Literal["max_time"] = "max_time"
    """Tag."""
    max_time: float | None
    """Effective `max_time`, seconds."""


class CustomEvidence(Strict):
    """`custom`: only the caller's own `StoppingCriteria` fired."""

    reason: Literal["custom"] = "custom"
    """Tag."""
    custom_criteria: tuple[str, ...]
    """Class names of the user criteria that fired."""
    stop_length: int | None
    """Sequence length (prompt included) at the step the row finished."""


class UnknownEvidence(Strict):
    """`unknown`."""

    reason: Literal["unknown"] = "unknown"
    """Tag."""
    note: str
    """Why genrun cannot tell."""
    stop_length: int | None = None
    """Set when only user criteria fired."""
    custom_criteria: tuple[str, ...] = ()
    """User criteria that fired."""


class InterruptedEvidence(Strict):
    """`interrupted`."""

    reason: Literal["interrupted"] = "interrupted"
    """Tag."""
    signal: str
    """`SIGINT` or `SIGTERM`."""
    interrupt_flag_set_at_step: int | None = None
    """Diffusion: the step at which the pipeline's interrupt flag was set."""
    steps: DiffusionSteps | None = None
    """Diffusion: steps done and planned."""


class ExceptionEvidence(Strict):
    """`exception` (the traceback is in `SequenceStop.exception`)."""

    reason: Literal["exception"] = "exception"
    """Tag."""
    type: str | None
    """Qualified exception class name."""
    message: str | None
    """`str(exception)`."""
    steps: DiffusionSteps | None = None
    """Diffusion: steps done and planned."""


class CompletedEvidence(Strict):
    """`completed` (diffusion)."""

    reason: Literal["completed"] = "completed"
    """Tag."""
    steps: DiffusionSteps
    """Steps done and planned."""


StopEvidence = Annotated[
    EosEvidence | StopStringEvidence | MaxNewTokensEvidence | MaxLengthEvidence | MaxTimeEvidence
    | CustomEvidence | UnknownEvidence | InterruptedEvidence | ExceptionEvidence | CompletedEvidence,
    Field(discriminator="reason"),
]
"""Evidence of one stop, one model per reason."""


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
    evidence: StopEvidence
    """Reason-specific facts, tagged by the same `reason`."""

    @model_validator(mode="after")
    def _evidence_matches_reason(self) -> "SequenceStop":
        if self.evidence.reason != self.reason:
            raise ValueError(f"evidence is tagged {self.evidence.reason!r} but reason is {self.reason!r}; they must agree")
        return self


def describe_stop(seq: SequenceStop) -> str:
    """The reason in words with its deciding fact: `eos (id 2)`, `max_new_tokens (limit 8, request)`, `interrupted (SIGINT)`."""
    evidence = seq.evidence
    if isinstance(evidence, EosEvidence):
        return f"eos (id {evidence.eos_token_id})"
    if isinstance(evidence, StopStringEvidence):
        return f"stop_string {evidence.stop_string!r}"
    if isinstance(evidence, MaxNewTokensEvidence | MaxLengthEvidence):
        return f"{seq.reason} (limit {evidence.limit}{', ' + evidence.source if evidence.source else ''})"
    if seq.reason == "exception" and seq.exception is not None:
        return f"exception {seq.exception.type}"
    if isinstance(evidence, InterruptedEvidence):
        return f"interrupted ({evidence.signal})"
    if isinstance(evidence, CustomEvidence):
        return f"custom ({', '.join(evidence.custom_criteria)})"
    if isinstance(evidence, UnknownEvidence) and evidence.custom_criteria:
        return f"unknown (custom criteria fired: {', '.join(evidence.custom_criteria)})"
    return seq.reason


_DIFFUSION_STEP_KEYS = tuple(DiffusionSteps.model_fields)


def _evidence_1_to_2(sequence: dict[str, Any]) -> dict[str, Any]:
    """Format-1 evidence (an untyped object) -> the tagged model of its reason."""
    reason = sequence.get("reason")
    old = dict(sequence.get("evidence") or {})
    steps = {k: old.pop(k) for k in _DIFFUSION_STEP_KEYS if k in old}
    new: dict[str, Any] = {"reason": reason, **old}
    if steps:
        new["steps"] = steps
    if reason == "exception" and "type" not in new:  # format-1 diffusion kept these only in `exception`
        info = sequence.get("exception") or {}
        new["type"], new["message"] = info.get("type"), info.get("message")
    return {**sequence, "evidence": new}


class GenerationStop(Versioned):
    """Stop records for every row of every outermost generate call."""

    MIGRATIONS = MappingProxyType({1: lambda data: {**data, "sequences": [_evidence_1_to_2(s) for s in data.get("sequences", [])]}})

    sequences: tuple[SequenceStop, ...]
    """One record per row."""
