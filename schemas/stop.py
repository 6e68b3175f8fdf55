"""`generation-stop.json`: why each row stopped, recorded live, with its evidence.

The stop vocabulary (`StopReason`) and the wording of each reason (`STOP_REASON_MEANING`) live
here, once. A stop record (`SequenceStop`) is the same for every backend: row, call, reason,
units generated, exception, and `evidence`, an object tagged by the same `reason` whose shape is
the backend's own (one model per reason, declared in `backend.json`): each built-in backend keeps
its models in its own package (`genrun.runner.backends.<name>`), as a third-party backend does. Readers validate the core record here and a row's evidence against the schema the
snapshot recorded, never by guessing the family.

Format history of this file: format 1 had an untyped evidence object (migrated to per-reason
models, format 2); format 2 kept language-model and diffusion facts on the record itself
(moved into the evidence, format 3). Both are migrated in memory.
"""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

from pydantic import ConfigDict, SerializeAsAny, model_validator

from ._base import Strict
from ._versioning import Versioned

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
    "completed": "the run did all the work it planned (e.g. every denoising step)",
})
"""Reason -> what it means, in words shown by `execute`, `report` and the format doc."""

TERMINAL_REASONS: tuple[StopReason, ...] = ("completed", "interrupted", "exception")
"""Reasons that must agree with `result.json`'s status, whatever the backend."""
ENDED_BY_EVENT: tuple[StopReason, ...] = ("interrupted", "exception")
"""Reasons whose count is wherever a signal or a raise found the row: no limit is behind it (16 tokens when a signal
lands is not a hidden cap)."""


class ExceptionInfo(Strict):
    """An exception that ended the run."""

    type: str
    """Qualified exception class name."""
    message: str
    """`str(exception)`."""
    traceback: str
    """Formatted traceback."""


class StopEvidence(Strict):
    """Base of every stop-evidence model: tagged by `reason`; a backend's model adds its own facts.

    Loaded from a file, the facts a reader does not model stay as plain JSON values (extra keys are
    kept); the snapshot's `backend.json` holds the schema they are validated against.
    """

    model_config = ConfigDict(frozen=True, extra="allow", use_attribute_docstrings=True)

    reason: StopReason
    """Tag: the same reason as the record."""

    def fact(self, name: str, default: Any = None) -> Any:
        """A fact of the evidence by name, typed field or loaded extra alike (`default` when absent)."""
        return self.model_dump(mode="json").get(name, default)


class Interrupted(StopEvidence):
    """`interrupted`: a signal (SIGINT/SIGTERM) ended the run before this row stopped on its own.

    Every backend's model of this reason: subclass it first, before your own shared facts
    (`class MyInterrupted(Interrupted, MyFacts)`), to add what the row had counted."""

    reason: Literal["interrupted"] = "interrupted"
    """Tag."""
    signal: str
    """`SIGINT` or `SIGTERM`."""


class Failed(StopEvidence):
    """`exception`: the run raised before this row stopped on its own (the traceback is in the record's `exception`).

    Subclass it first, as `Interrupted`, to add your own shared facts."""

    reason: Literal["exception"] = "exception"
    """Tag."""
    raised: str
    """The exception's class name."""


class FailedWithMessage(StopEvidence):
    """`exception`, recorded as the exception's qualified type and message rather than `Failed`'s class name (the
    traceback is in the record's `exception`). Subclass it first, as `Interrupted`."""

    reason: Literal["exception"] = "exception"
    """Tag."""
    type: str | None
    """Qualified exception class name."""
    message: str | None
    """`str(exception)`."""


class SequenceStop(Strict):
    """Stop record of one row (or of one call, for a backend without rows): the same for every backend."""

    index: int
    """Row index (`sequence_<index>`)."""
    call_index: int
    """Outermost generate call the row belongs to."""
    reason: StopReason
    """Classified reason from the stop vocabulary; `custom` when only the caller's own StoppingCriteria fired; `unknown` when no recorded criterion explains the stop."""
    generated: int
    """Units generated for this row (tokens, frames' tokens or steps: the run's unit)."""
    exception: ExceptionInfo | None = None
    """Set when `reason` is `exception`."""
    evidence: SerializeAsAny[StopEvidence]
    """Reason-specific facts in the backend's declared model, tagged by the same `reason`."""

    @model_validator(mode="after")
    def _evidence_matches_reason(self) -> "SequenceStop":
        if self.evidence.reason != self.reason:
            raise ValueError(f"evidence is tagged {self.evidence.reason!r} but reason is {self.reason!r}; they must agree")
        return self


def describe_stop(seq: SequenceStop) -> str:
    """The reason in words with its deciding fact: `eos (id 2)`, `max_new_tokens (limit 8, request)`, `interrupted (SIGINT)`.

    Reads the facts the stop vocabulary names (`eos_token_id`, `limit`, `source`, `stop_string`,
    `signal`, `custom_criteria`) wherever a backend's evidence carries them.
    """
    facts = seq.evidence.model_dump(mode="json")
    if seq.reason == "eos" and "eos_token_id" in facts:
        return f"eos (id {facts['eos_token_id']})"
    if seq.reason == "stop_string" and "stop_string" in facts:
        return f"stop_string {facts['stop_string']!r}"
    if seq.reason in ("max_new_tokens", "max_length") and "limit" in facts:
        source = facts.get("source")
        return f"{seq.reason} (limit {facts['limit']}{', ' + source if source else ''})"
    if seq.reason == "exception" and seq.exception is not None:
        return f"exception {seq.exception.type}"
    if seq.reason == "interrupted" and facts.get("signal"):
        return f"interrupted ({facts['signal']})"
    criteria = facts.get("custom_criteria") or ()
    if seq.reason == "custom" and criteria:
        return f"custom ({', '.join(criteria)})"
    if seq.reason == "unknown" and criteria:
        return f"unknown (custom criteria fired: {', '.join(criteria)})"
    return seq.reason


# -- migrations of older files (in memory; the files are never rewritten) --------------------------------------------
_DIFFUSION_STEP_KEYS = ("steps_done", "steps_planned", "steps_planned_source", "num_inference_steps", "timesteps_planned_dry_run",
                        "step_observation", "denoising_loops", "output_returned")
"""Format 1 kept a diffusion call's step facts flat in `evidence`."""

_FORMAT_2_TOKEN_FACTS = ("last_token_id", "fired", "eos_token_ids", "max_new_tokens", "max_length", "prompt_length")
"""Format 2 kept these language-model facts on the record; format 3 keeps them in the evidence."""


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


def _record_2_to_3(sequence: dict[str, Any]) -> dict[str, Any]:
    """Format-2 record -> the core record: the family facts move into the evidence.

    Format 2 had exactly two families: a diffusion call's evidence carries `steps` (its
    `steps_planned` is `steps.steps_planned`, and its token fields were empty); any other row is a
    language-model row, whose token facts join its evidence.
    """
    record = dict(sequence)
    facts = {k: record.pop(k) for k in (*_FORMAT_2_TOKEN_FACTS, "steps_planned") if k in record}
    evidence = dict(record.get("evidence") or {})
    if evidence.get("steps") is None:  # format 2 wrote the diffusion-only keys as null on language-model rows
        evidence = {k: v for k, v in evidence.items() if not (k in ("steps", "interrupt_flag_set_at_step") and v is None)}
        evidence.update({k: facts[k] for k in _FORMAT_2_TOKEN_FACTS if k in facts})
    return {**record, "evidence": evidence}


def _each_record(data: dict[str, Any], migrate: Any) -> dict[str, Any]:
    """`migrate` applied to every record that is an object (anything else is left for validation to report)."""
    sequences = data.get("sequences")
    if not isinstance(sequences, list):
        return dict(data)
    return {**data, "sequences": [migrate(s) if isinstance(s, dict) else s for s in sequences]}


class GenerationStop(Versioned):
    """Stop records for every row of every outermost generate call."""

    MIGRATIONS = MappingProxyType({1: lambda data: _each_record(data, _evidence_1_to_2), 2: lambda data: _each_record(data, _record_2_to_3)})

    sequences: tuple[SequenceStop, ...]
    """One record per row."""
