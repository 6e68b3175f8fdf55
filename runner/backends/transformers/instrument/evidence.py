"""`generation-calls.json` from a capture session: each call's path and what could not be recorded."""

from collections.abc import Mapping

from genrun.backends import AudioEvidence, CallEvidence, GenerationCalls

from .capture import CallCapture, CaptureSession


def call_evidence(call: CallCapture, audio: AudioEvidence | None = None) -> CallEvidence:
    """One call's record; `partial` whenever `missing` names something."""
    return CallEvidence(
        call_index=call.index,
        model_class=type(call.model).__name__,
        path=call.path,
        evidence_level="partial" if call.missing else "full",
        missing=tuple(dict.fromkeys(call.missing)),
        nested_calls=call.nested_calls,
        draft_tokens_proposed=call.draft_tokens_proposed,
        draft_tokens_accepted=call.draft_tokens_accepted,
        audio=audio,
    )


def generation_calls(session: CaptureSession, audio: Mapping[int, AudioEvidence] | None = None) -> GenerationCalls:
    """The run's file: `partial` when the self-check found a problem or any call is partial; `audio` by call index."""
    calls = tuple(call_evidence(c, (audio or {}).get(c.index)) for c in session.calls)
    partial = bool(session.self_check.problems) or any(c.evidence_level == "partial" for c in calls)
    return GenerationCalls(
        transformers_version=session.self_check.transformers_version,
        self_check_problems=session.self_check.problems,
        evidence_level="partial" if partial else "full",
        calls=calls,
        foreign_thread_calls=session.foreign_thread_calls,
    )
