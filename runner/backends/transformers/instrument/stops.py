"""Per-row stop records (`generation-stop.json`) from what the criteria list recorded live.

Rules (the stop vocabulary, `genrun.backends.StopReason`), per row of every outermost call:
- the row finished and its stop step is among the kept ids: the criteria that fired at that step,
  attributed by `KIND_PRIORITY` (eos > stop_string > max_new_tokens > max_length > max_time);
- only criteria genrun does not know fired (a user's own `StoppingCriteria`): `custom`, with
  the class names in `fired` and `evidence.custom_criteria` (genrun does not guess what a user
  criterion means);
- beam search: the candidate the beam search finalised for the returned sequence, matched by its
  ids among those the criteria list saw finish (`criteria.returned_row_states`);
- continuous batching: the request's own completion rule (`batching.py`);
- the row did not finish: `interrupted` (a signal), `exception` (generate raised), or
  `unknown` (generate returned without any criterion firing for the row, e.g. a callable
  `custom_generate`, whose rows the criteria list does not map to), with the reason in `note`.
"""

from collections.abc import Sequence
from typing import Any, NamedTuple

from ..evidence import (
    CustomEvidence,
    EosEvidence,
    ExceptionEvidence,
    InterruptedEvidence,
    MaxLengthEvidence,
    MaxNewTokensEvidence,
    MaxTimeEvidence,
    StopStringEvidence,
    UnknownEvidence,
)
from genrun.backends import ExceptionInfo, GenerationEnd, SequenceStop, StopEvidence

from .capture import CallCapture, RowTokens
from .criteria import RowCriteria, primary_kind

STOP_STRING_WINDOW = 32  # tokens decoded from the end to find which stop string matched


class ClassifiedRow(NamedTuple):
    """A row's kept ids and its stop record; `index` is the row's number over the whole run."""

    index: int  # type: ignore[assignment]  # a field named like tuple.index (a method no caller uses on these)
    tokens: RowTokens
    stop: SequenceStop


def classify_calls(calls: Sequence[CallCapture], tokenizer: Any, exception_info: Any) -> tuple[ClassifiedRow, ...]:
    """Every row of every outermost call, numbered in call order; `exception_info(exc)` formats exceptions."""
    classified: list[ClassifiedRow] = []
    for call in calls:
        for tokens in call.row_tokens():
            stop = classify_row(call, tokens, len(classified), tokenizer, exception_info)
            classified.append(ClassifiedRow(len(classified), tokens, stop))
    return tuple(classified)


def stop_records(rows: Sequence[ClassifiedRow]) -> tuple[SequenceStop, ...]:
    """The `sequences` of `generation-stop.json`."""
    return tuple(r.stop for r in rows)


def classify_row(call: CallCapture, tokens: RowTokens, index: int, tokenizer: Any, exception_info: Any) -> SequenceStop:
    """One row's reason, criteria fired, limits and evidence."""
    config = call.config
    ids = tokens.ids
    base: dict[str, Any] = dict(index=index, call_index=call.index, generated=int(ids.shape[0]))
    facts: dict[str, Any] = dict(  # `TokenStopFacts`: in every row's evidence
        last_token_id=int(ids[-1]) if ids.shape[0] else None,
        eos_token_ids=config.eos_token_ids if config else (),
        max_new_tokens=config.effective.get("max_new_tokens") if config else None,
        max_length=config.effective.get("max_length") if config else None,
        prompt_length=tokens.prompt_length if tokens.prompt_length is not None else call.prompt_length,  # a request's own prompt
    )
    state = tokens.criteria
    if state is not None and state.finished and tokens.stop_within_ids:
        evidence = _finished(call, tokens, tokenizer, {**facts, "fired": state.fired})
        return SequenceStop(reason=evidence.reason, evidence=evidence, **base)
    if call.exception is not None:
        return _unfinished(call.exception, base, facts, exception_info)
    note = "generate returned but no recorded stopping criterion fired for this row"
    if call.missing:
        note = "; ".join(call.missing)
    elif call.criteria is None:
        note = "generate returned without building its stopping criteria (e.g. custom_generate)"
    elif call.path == "beam_search":
        note = "beam search: no finished candidate the criteria list saw matches this returned sequence"
    return SequenceStop(reason="unknown", evidence=UnknownEvidence(note=note, **facts), **base)


def _unfinished(exc: BaseException, base: dict[str, Any], facts: dict[str, Any], exception_info: Any) -> SequenceStop:
    if (signal := GenerationEnd.raised(exc).signal) is not None:
        return SequenceStop(reason="interrupted", evidence=InterruptedEvidence(signal=signal, **facts), **base)
    info: ExceptionInfo = exception_info(exc)
    return SequenceStop(reason="exception", exception=info, evidence=ExceptionEvidence(type=info.type, message=info.message, **facts), **base)


def _finished(call: CallCapture, tokens: RowTokens, tokenizer: Any, facts: dict[str, Any]) -> StopEvidence:
    state = tokens.criteria
    assert state is not None, "classify_row passes only rows whose criteria finished"
    config = call.config
    kind = primary_kind(state.kinds)
    common: dict[str, Any] = {
        **facts,
        "stop_length": state.stop_length,
        "custom_criteria": tuple(name for name, k in zip(state.fired, state.kinds) if k == "custom"),
    }
    if kind is None:
        return CustomEvidence(**common)
    if call.path == "continuous_batching":
        common["rule"] = "generate_batch's completion rule: the last id is in the EOS set, else the max_new_tokens limit"
    sources = config.limit_sources if config else {}
    effective = config.effective if config else {}
    if kind == "eos":
        return EosEvidence(eos_token_id=state.last_token_id, source=sources.get("eos_token_id"), **common)
    if kind == "stop_string":
        configured = effective.get("stop_strings")
        configured = [configured] if isinstance(configured, str) else list(configured or [])
        matched = matched_stop_string(tokens.ids.tolist(), configured, tokenizer)
        return StopStringEvidence(stop_strings=tuple(configured), stop_string=matched, source=sources.get("stop_strings"), **common)
    if kind == "max_new_tokens":
        return MaxNewTokensEvidence(limit=effective.get("max_new_tokens"), source=sources.get("max_new_tokens"), **common)
    if kind == "max_length":
        return MaxLengthEvidence(limit=effective.get("max_length"), source=sources.get("max_length"), **common)
    if kind == "max_time":
        return MaxTimeEvidence(max_time=effective.get("max_time"), source=sources.get("max_time"), **common)
    return UnknownEvidence(note=f"criterion kind {kind!r} is not in the stop vocabulary", stop_length=common["stop_length"],
                           custom_criteria=common["custom_criteria"], **facts)


def matched_stop_string(ids: list[int], stop_strings: list[str], tokenizer: Any) -> str | None:
    """The configured stop string that ends latest in the decoded tail of the row (`None` if none is found)."""
    decode = getattr(tokenizer, "decode", None)
    if decode is None or not stop_strings:
        return None
    tail = decode(ids[-STOP_STRING_WINDOW:], skip_special_tokens=False)
    best, best_end = None, -1
    for candidate in stop_strings:
        position = tail.rfind(candidate)
        if position >= 0 and position + len(candidate) > best_end:
            best, best_end = candidate, position + len(candidate)
    return best
