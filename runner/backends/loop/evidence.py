"""What the `loop` backend declares: its call config (`loop-call.json`) and one stop-evidence model per reason.

Every stop record of a loop names its stage (`call_index` is the stage's position) and carries the
stage's counts for the row; the reason's own fact is what verify checks against the ids.
"""

from typing import Any, Literal

from pydantic import ConfigDict

from genrun.backends import CallConfigRecord, EvidenceDeclaration, Failed, Interrupted, StopEvidence

__all__ = ["CALL_CONFIG", "EVIDENCE", "LOOP_STOP_EVIDENCE", "LoopCall", "stop_evidence_model"]

CALL_CONFIG = "loop-call.json"
"""The call config's file: the loop called and the configuration it froze before its first unit."""


class LoopCall(CallConfigRecord):
    """`loop-call.json`: the loop the `loop` backend called and the configuration it froze before its first unit."""

    callable: str
    """`[loop] callable`: `module:function`."""
    kwargs: dict[str, Any]
    """`[loop] kwargs`, passed as keyword arguments."""
    budget: str | None
    """`[loop] budget`: the plan-time budget callable (`None`: none)."""
    config: dict[str, Any] | None
    """What the loop passed to `rec.config(...)` (`None`: it declared no configuration before its first stage)."""



class _StageFacts(StopEvidence):
    """Shared by every reason: the stage and the row's counts in it."""

    model_config = ConfigDict(frozen=True, extra="allow", use_attribute_docstrings=True)

    stage: str
    """The stage the record belongs to."""
    units: int
    """Units the row counted in the stage."""
    ids: int
    """Ids the row emitted in the stage."""


class LoopEos(_StageFacts):
    """`eos`: the loop says the row ended on an end-of-sequence id."""

    reason: Literal["eos"] = "eos"
    eos_token_id: int
    """The id that ended the row (verify: the row's last id)."""
    eos_token_ids: tuple[int, ...] | None = None
    """The declared EOS set (else the call config's `eos_token_ids`; verify: the last id is in it)."""


class LoopMaxNewTokens(_StageFacts):
    """`max_new_tokens`: the row reached the loop's limit of new units."""

    reason: Literal["max_new_tokens"] = "max_new_tokens"
    limit: int
    """The limit (verify: the row has exactly this many units)."""


class LoopMaxLength(_StageFacts):
    """`max_length`: the row reached its total length limit (prompt included)."""

    reason: Literal["max_length"] = "max_length"
    limit: int
    """The limit."""


class LoopStopString(_StageFacts):
    """`stop_string`: a stop string appeared in the row's text."""

    reason: Literal["stop_string"] = "stop_string"
    stop_string: str
    """The string."""


class LoopMaxTime(_StageFacts):
    """`max_time`: the loop's time limit passed."""

    reason: Literal["max_time"] = "max_time"
    limit_s: float
    """The limit, seconds."""


class LoopCompleted(_StageFacts):
    """`completed`: the stage did all the work it planned for the row."""

    reason: Literal["completed"] = "completed"


class LoopCustom(_StageFacts):
    """`custom`: a reason of the loop's own, with the evidence it gave."""

    reason: Literal["custom"] = "custom"
    loop_reason: str
    """The loop's name for it (e.g. `frame_budget`)."""


class LoopInterrupted(Interrupted, _StageFacts):
    """`interrupted`: a signal ended the run while the row had no stop."""


class LoopException(Failed, _StageFacts):
    """`exception`: the loop raised while the row had no stop."""


class LoopUnknown(_StageFacts):
    """`unknown`: the loop returned without saying why the row stopped."""

    reason: Literal["unknown"] = "unknown"


LOOP_STOP_EVIDENCE = (LoopEos, LoopMaxNewTokens, LoopMaxLength, LoopStopString, LoopMaxTime, LoopCompleted, LoopCustom,
                      LoopInterrupted, LoopException, LoopUnknown)


EVIDENCE = EvidenceDeclaration(kinds=("call_config", "stop_records", "stages"), stop_evidence=LOOP_STOP_EVIDENCE,
                               call_config_name=CALL_CONFIG, call_config_model=LoopCall)
"""What the loop provides and analysis may check (frozen as `backend.json` at plan time)."""


def stop_evidence_model(reason: str) -> type[_StageFacts]:
    """The evidence model of `reason` (one of `LOOP_STOP_EVIDENCE`'s)."""
    return next(m for m in LOOP_STOP_EVIDENCE if m.model_fields["reason"].default == reason)
