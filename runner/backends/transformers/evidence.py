"""What the `transformers` backend declares: its call config (`generation-config.before-generate.json`, genrun's
`GenerationConfigBeforeGenerate`) and one stop-evidence model per reason.

Every model carries `TokenStopFacts`, the facts the token checks judge a row by (last id, EOS set, limits, prompt
length), so `verify` holds the recorded reason against the saved ids. genrun finds this declaration through the
`genrun.evidence` entry points (readers resolve its models by the names `backend.json` records); this module imports
only pydantic and `genrun.backends`, so reading a snapshot never imports torch or transformers.
"""

from typing import Literal

from genrun.backends import (EvidenceDeclaration, FailedWithMessage, GenerationConfigBeforeGenerate, Interrupted, LimitSource, StopEvidence,
                             TokenStopFacts, generation_config_name)


class _Closed(TokenStopFacts):
    """The genrun-written models refuse keys they do not know (only the base keeps unknown facts)."""

    model_config = {**TokenStopFacts.model_config, "extra": "forbid"}


class _TokenStop(_Closed):
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


class CustomEvidence(_Closed):
    """`custom`: only the caller's own `StoppingCriteria` fired."""

    reason: Literal["custom"] = "custom"
    """Tag."""
    custom_criteria: tuple[str, ...]
    """Class names of the user criteria that fired."""
    stop_length: int | None
    """Sequence length (prompt included) at the step the row finished."""


class UnknownEvidence(_Closed):
    """`unknown`."""

    reason: Literal["unknown"] = "unknown"
    """Tag."""
    note: str
    """Why genrun cannot tell."""
    stop_length: int | None = None
    """Set when only user criteria fired."""
    custom_criteria: tuple[str, ...] = ()
    """User criteria that fired."""


class InterruptedEvidence(Interrupted, _Closed):
    """`interrupted`: a signal ended generation (the row keeps the ids generated so far)."""


class ExceptionEvidence(FailedWithMessage, _Closed):
    """`exception` (the traceback is in the record's `exception`)."""


TOKEN_STOP_EVIDENCE: tuple[type[StopEvidence], ...] = (
    EosEvidence, StopStringEvidence, MaxNewTokensEvidence, MaxLengthEvidence, MaxTimeEvidence, CustomEvidence, UnknownEvidence,
    InterruptedEvidence, ExceptionEvidence,
)
"""One model per reason."""


EVIDENCE = EvidenceDeclaration(
    kinds=("call_config", "stop_records", "token_ids", "generation_config", "generation_calls"),
    stop_evidence=TOKEN_STOP_EVIDENCE,
    call_config_name=generation_config_name(0),
    call_config_model=GenerationConfigBeforeGenerate,
)
"""Language models: token ids, effective generation configs, per-call evidence (frozen as `backend.json` at plan time)."""
