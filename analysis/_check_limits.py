"""Limit checks: suspected hidden caps, library defaults, truncation by the budget, frame outputs cut short."""

from typing import Any

from genrun.schemas import GenerationConfigBeforeGenerate, SequenceStop, layout
from genrun.schemas.budget import describe_requested
from genrun.schemas.stop import ENDED_BY_EVENT

from ._context import CheckContext
from ._finding import Examined, Finding, skip
from ._load import Snapshot
from ._rows import audio_frames, eos_positions, rows_of, token_facts, total_ids
from ._check_stages import stages_early_stop
from ._produced_duration import judge_produced_duration

COMMON_BUDGETS = frozenset({16, 20, 100, 256, 512, 1000, 1024, 2048, 4096, 8192, 16384, 32768, 65536})
"""Budgets seen as hidden caps in clients and servers (../shared/notes/anchors.md)."""
MIN_POWER_OF_TWO = 16
"""Powers of two below this (1..8) are ordinary short outputs, not flagged."""
_LENGTH_REASONS = ("max_new_tokens", "max_length")


def is_suspicious_count(count: int) -> bool:
    """A power of two (>= 16) or a common default budget."""
    power_of_two = count >= MIN_POWER_OF_TWO and count & (count - 1) == 0
    return power_of_two or count in COMMON_BUDGETS


def _config_of(snap: Snapshot, stop: SequenceStop) -> GenerationConfigBeforeGenerate | None:
    return next((c for c in snap.generation_configs if c.call_index == stop.call_index), None)


def check_hidden_cap(snap: Snapshot, ctx: CheckContext) -> Finding:
    """No EOS evidence and a count that is a power of two or a common default budget: WARN, unless the request's own limit explains it.

    A row ended by a signal or an exception (`ENDED_BY_EVENT`) is explained by that event. Otherwise explained means:
    the recorded reason is `max_new_tokens`/`max_length`, the count equals that
    limit as the call's effective config has it, and the user set it: its source (`limit_sources`)
    is the request, or an entry point that passed the request's own value through. A limit from the
    model's generation_config, a library default, an entry point's own number, `unknown` or any
    other reason is a WARN: that is what a run silently cut at 16,384 tokens looks like.
    """
    name = "hidden_cap"
    if snap.stop is None:
        return skip(name, "no generation-stop.json (the run did not finish)")
    warns, notes, evidence = [], [], {}
    for row in rows_of(snap):
        stop = row.stop
        if stop is None:
            continue
        count = len(row.ids) if row.ids is not None else stop.generated
        has_eos = stop.reason == "eos" or (row.ids is not None and bool(eos_positions(row.ids, token_facts(stop).eos_token_ids)))
        if has_eos or not is_suspicious_count(count):
            continue
        by_event = stop.reason in ENDED_BY_EVENT
        explanation = (f"where the run was {'interrupted' if stop.reason == 'interrupted' else 'ended by an exception'}, not a limit"
                       if by_event else _request_limit_explains(snap, stop, count))
        evidence[layout.sequence_name(row.index)] = {"count": count, "reason": stop.reason, "explained_by_event": by_event,
                                                     "explained_by_request": explanation is not None and not by_event}
        if explanation is not None:
            notes.append(f"sequence {row.index}: {count} tokens is {_kind(count)} without EOS, but it is {explanation}")
        else:
            warns.append(f"suspected hidden cap: sequence {row.index} stopped at {count:,} tokens ({_kind(count)}) without EOS; "
                         f"recorded reason {stop.reason!r}{_limit_origin(snap, stop)}. Nothing the request set explains this count")
    examined = Examined(files=2, token_ids=total_ids(snap))
    if warns:
        return Finding(name=name, status="WARN", message="; ".join(warns + notes), evidence=evidence, examined=examined)
    message = "; ".join(notes) if notes else "no row stopped at a power-of-two or common-budget count without EOS"
    return Finding(name=name, status="PASS", message=message, evidence=evidence, examined=examined)


def _kind(count: int) -> str:
    return "a power of two" if count & (count - 1) == 0 else "a common default budget"


def user_set_limit(snap: Snapshot, stop: SequenceStop) -> str | None:
    """Who set the limit that cut this row, when it was the user: the request, or an entry point passing the request's value.

    Read from the call's effective config and `limit_sources` (or, for a backend that records no generate config,
    the stop evidence's `limit` and `source` facts); None when the limit came from anywhere else (model
    generation_config, library default, an entry point's own number).
    """
    if stop.reason not in _LENGTH_REASONS:
        return None
    config = _config_of(snap, stop)
    if config is None:  # a backend without generate's config records the limit and its source in the stop evidence
        return "the request" if stop.evidence.fact("source") == "request" and stop.evidence.fact("limit") is not None else None
    source = config.limit_sources.get(stop.reason)
    effective = config.effective.get(stop.reason)
    if source == "request":
        return "the request"
    requested = snap.request.generation.get(stop.reason) if snap.request is not None else None
    if source == "entrypoint" and requested is not None and requested == effective:
        return "the request (passed through by the entry point)"
    return None


def _request_limit_explains(snap: Snapshot, stop: SequenceStop, count: int) -> str | None:
    """'the request's own max_new_tokens=16 (recorded stop)' when the user's limit explains the count."""
    who = user_set_limit(snap, stop)
    if who is None:
        return None
    config = _config_of(snap, stop)
    effective = config.effective.get(stop.reason) if config is not None else stop.evidence.fact("limit")
    if stop.reason == "max_new_tokens" and effective == count:
        return f"max_new_tokens={count} set by {who} (recorded stop max_new_tokens)"
    prompt_length = token_facts(stop).prompt_length
    if stop.reason == "max_length" and prompt_length is not None and effective == prompt_length + count:
        return f"max_length={effective} set by {who} (prompt {prompt_length} + {count}; recorded stop max_length)"
    return None


def _limit_origin(snap: Snapshot, stop: SequenceStop) -> str:
    config = _config_of(snap, stop)
    if config is None:
        return ""
    parts = [f"{k}={config.effective.get(k)} from {config.limit_sources.get(k, '?')}" for k in _LENGTH_REASONS if config.effective.get(k) is not None]
    return f"; effective {', '.join(parts)}" if parts else ""


def check_library_default_limit(snap: Snapshot, ctx: CheckContext) -> Finding:
    """A row cut by a length nobody set (transformers 5.x: `max_length` = prompt + 20) is a WARN."""
    name = "library_default_limit"
    if not snap.generation_configs:
        return skip(name, "no generation-config.before-generate.json")
    defaults = {c.call_index: c for c in snap.generation_configs if "library_default" in (c.limit_sources.get(k) for k in _LENGTH_REASONS)}
    cut = [s for s in (snap.stop.sequences if snap.stop else ()) if s.call_index in defaults and s.reason in _LENGTH_REASONS]
    evidence: dict[str, Any] = {f"call_{i}": {"max_length": c.effective.get("max_length"), "prompt_length": c.prompt_length,
                                             "limit_sources": c.limit_sources} for i, c in defaults.items()}
    examined = Examined(files=len(snap.generation_configs) + 1)
    if cut:
        parts = []
        for stop in cut:
            config = defaults[stop.call_index]
            length = config.effective.get("max_length")
            parts.append(f"sequence {stop.index} was cut at {stop.generated} tokens by the library default max_length={length} "
                         f"(prompt {config.prompt_length} + {length - config.prompt_length if isinstance(length, int) else '?'})")
        return Finding(name=name, status="WARN", message="; ".join(parts) + ". Nobody set a length: set [generation] max_new_tokens",
                       evidence=evidence, examined=examined)
    if defaults:
        lengths = ", ".join(str(c.effective.get("max_length")) for c in defaults.values())
        return Finding(name=name, status="PASS", message=f"a library-default max_length ({lengths}) was in effect but no row reached it",
                       evidence=evidence, examined=examined)
    return Finding(name=name, status="PASS", message="no length limit came from a library default", evidence=evidence, examined=examined)


def check_budget_truncation(snap: Snapshot, ctx: CheckContext) -> Finding:
    """A row cut by `max_new_tokens`/`max_length` is a WARN when that limit came from elsewhere than the user, or the plan's estimate needed more.

    A limit the user set and reached is information (PASS, with the numbers): `verify --strict`
    must pass on ordinary runs that asked for N tokens and got N.
    """
    name = "budget_truncation"
    if snap.stop is None:
        return skip(name, "no generation-stop.json (the run did not finish)")
    cut = [s for s in snap.stop.sequences if s.reason in _LENGTH_REASONS]
    budget = snap.budget
    estimate: dict[str, Any] = {}
    if budget is not None:
        estimate = {"requested_units": budget.requested_units, "requested_units_source": budget.requested_units_source,
                    "effective_max_length": budget.effective_max_length, "context_limit": budget.context_limit,
                    "fits_context": budget.fits_context}
        if budget.domain is not None:
            estimate["domain"] = budget.domain.model_dump(mode="json")
    facts = {s.index: token_facts(s) for s in cut}
    evidence: dict[str, Any] = {"budget_estimate": estimate, "cut": {layout.sequence_name(s.index): {
        "reason": s.reason, "generated": s.generated, "max_new_tokens": facts[s.index].max_new_tokens,
        "max_length": facts[s.index].max_length, "prompt_length": facts[s.index].prompt_length} for s in cut}}
    examined = Examined(files=2)
    if not cut:
        return Finding(name=name, status="PASS", message=f"no row was cut by a length limit ({len(snap.stop.sequences)} row(s))",
                       evidence=evidence, examined=examined)
    parts = [f"sequence {s.index} was cut by max_new_tokens: {s.generated} of {f.max_new_tokens} new tokens (prompt {f.prompt_length}, "
             f"max_length {f.max_length})" if s.reason == "max_new_tokens" else
             f"sequence {s.index} was cut by max_length: prompt {f.prompt_length} + {s.generated} new tokens = max_length {f.max_length}"
             for s, f in ((s, facts[s.index]) for s in cut)]
    setters = {s.index: user_set_limit(snap, s) for s in cut}
    needed = _estimate_needs_more(budget)
    evidence.update(set_by_user={f"sequence_{i}": who is not None for i, who in setters.items()}, estimate_needs_more=needed)
    if needed is None and all(setters.values()):
        who = sorted(set(filter(None, setters.values())))
        message = (f"reached the limit set by {' and '.join(who)} (information, not a problem): " + "; ".join(parts)
                   + ". Raise max_new_tokens if the output should be longer.")
        return Finding(name=name, status="PASS", message=message, evidence=evidence, examined=examined)
    why = needed or "the limit did not come from the request (see limits_reached_config / hidden_cap)"
    message = "output truncated by the budget: " + "; ".join(parts) + f"; {why}. {_describe_estimate(budget)}"
    return Finding(name=name, status="WARN", message=message, evidence=evidence, examined=examined)


def _estimate_needs_more(budget: Any) -> str | None:
    """'the plan's own estimate needed 750 units' when the domain estimate exceeds the requested budget; else None."""
    domain = budget.domain if budget is not None else None
    if domain is None or not budget.requested_units:
        return None
    wanted = max(domain.observed_units or 0, domain.conservative_units or 0)
    if wanted > budget.requested_units:
        return f"the plan's own estimate needed up to {wanted:,} {budget.units}s, more than the {budget.requested_units:,} requested"
    return None


def _describe_estimate(budget: Any) -> str:
    if budget is None:
        return "No token-budget.json estimate to compare."
    parts = [describe_requested(budget)] + [f"{name} {value}" for name, value in (
        ("max length", budget.effective_max_length), ("context", budget.context_limit)) if value is not None]
    text = "Plan estimate: " + ", ".join(parts)
    domain = budget.domain
    if domain is not None and (domain.observed_units or domain.conservative_units):
        text += f"; domain estimate {domain.observed_units} observed / {domain.conservative_units} conservative units"
    return text + ". Raise max_new_tokens if the output should be complete."


def check_early_stop(snap: Snapshot, ctx: CheckContext) -> Finding:
    """Frame units: produced seconds below 95 % of the requested seconds is a WARN `early_stop` naming the cause."""
    name = "early_stop"
    request = snap.request
    if request is not None and request.units.name == "frame" and snap.declares("stages"):
        return stages_early_stop(snap, request.units.requested_seconds)
    if request is None or request.units.name != "frame" or not snap.declares("token_ids"):
        return skip(name, "not frame units of saved token ids: no requested duration to compare")
    requested = request.units.requested_seconds
    if requested is None:
        return skip(name, "[units] requested_seconds is not set: nothing to compare the produced duration with")
    if snap.result is None or snap.token_ids is None:
        return skip(name, "no result.json or saved ids (the run did not finish)")
    units = request.units
    planned = snap.budget.domain.frames_per_second if snap.budget is not None and snap.budget.domain is not None else None
    per_second, tokens_per_frame = units.per_second or planned or 1.0, units.tokens_per_frame
    frames = {i: len(ids) // tokens_per_frame for i, ids in snap.token_ids.items()}
    audio = audio_frames(snap)
    if audio is not None:  # decoded audio: frames per batch item, at the codec's rate
        per_second, frames = audio.frames_per_second, dict(enumerate(audio.frames))
    longest = max(frames, key=frames.__getitem__, default=0)
    computed = frames.get(longest, 0) / per_second
    evidence: dict[str, Any] = {"requested_seconds": requested, "produced_seconds": snap.result.produced_seconds, "computed_seconds": computed,
                "frames": {layout.sequence_name(i): f for i, f in frames.items()}, "per_second": per_second, "tokens_per_frame": tokens_per_frame}

    def cause() -> str:
        first_audio = snap.generation_calls.calls[0].audio if audio is not None and snap.generation_calls is not None else None
        row = longest * first_audio.codebooks if first_audio is not None else longest
        return _early_stop_cause(snap, row, tokens_per_frame, frames.get(longest, 0))

    return judge_produced_duration(requested, snap.result.produced_seconds, computed, per_second, cause=cause, evidence=evidence,
                                   frames_from=f"the saved ids ({frames.get(longest, 0)} frames at {per_second}/s)",
                                   examined=Examined(files=2, token_ids=total_ids(snap)))


def _early_stop_cause(snap: Snapshot, index: int, tokens_per_frame: int, frames: int) -> str:
    """Why row `index` (the longest) ended; `frames` is what it produced (MusicGen's delay pattern makes it fewer than its steps)."""
    stop = next((s for s in snap.stop.sequences if s.index == index), None) if snap.stop else None
    if stop is None:
        return "the stop reason is not recorded"
    facts = token_facts(stop)
    if stop.reason == "eos":
        ids = snap.token_ids[index] if snap.token_ids else None
        found = eos_positions(ids, facts.eos_token_ids) if ids is not None else []
        position = found[0] if found else stop.generated - 1
        return f"the model emitted EOS (id {facts.last_token_id}) at frame {position // tokens_per_frame}"
    if stop.reason in _LENGTH_REASONS:
        limit = facts.max_new_tokens if stop.reason == "max_new_tokens" else facts.max_length
        return f"the {stop.reason} limit ({limit}) was reached after {frames} frames"
    return f"generation stopped with reason {stop.reason!r} at frame {stop.generated // tokens_per_frame}"
