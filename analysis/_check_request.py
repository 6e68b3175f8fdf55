"""Request checks: the source re-parses to the frozen request, and its limits reached generate."""

from typing import Any

from pydantic import ValidationError

from genrun.schemas import GenerationConfigBeforeGenerate, Request, layout
from genrun.schemas.evidence import typed_call_config_model

from ._context import CheckContext
from ._diffing import ABSENT, Change, diff_values, same_json, short_value
from ._finding import Examined, Finding, Status, skip, worst
from ._load import Snapshot

_LENGTH_KEYS = ("max_new_tokens", "max_length")


def check_request_round_trip(snap: Snapshot, ctx: CheckContext) -> Finding:
    """`request.source.<ext>` re-parses and validates to exactly `request.json`; no source key is dropped or changed."""
    name = "request_round_trip"
    examined = Examined(files=2)
    if snap.request_source_name is None or snap.request_source is None:
        return Finding(name=name, status="FAIL", message="no readable request.source.<ext>: the request bytes as given are not in the snapshot",
                       examined=examined)
    if snap.request_json is None:
        return Finding(name=name, status="FAIL", message=f"request.json cannot be compared: {snap.problems.get(layout.REQUEST, 'missing')}",
                       examined=examined)
    parsed = _parse_source(snap.request_source_name, snap.request_source)
    if isinstance(parsed, str):
        return Finding(name=name, status="FAIL", message=f"{snap.request_source_name} no longer parses: {parsed}", examined=examined)
    try:
        reparsed = Request.model_validate(parsed).model_dump(mode="json")
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)[:5])
        return Finding(name=name, status="FAIL", message=f"{snap.request_source_name} does not validate as a Request: {problems}", examined=examined)
    try:  # an older request.json lacks fields a later genrun added: both sides get the current model's defaults
        frozen = Request.model_validate(snap.request_json).model_dump(mode="json")
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)[:5])
        return Finding(name=name, status="FAIL", message=f"request.json does not validate as a Request: {problems}", examined=examined)
    normalised = diff_values(reparsed, frozen)
    # a backend's own tables (`[loop]`) sit under `backend_tables` in request.json, and at the top level of a source written by
    # hand (a sweep item's source is the model's dump, with `backend_tables`): either spelling finds them
    as_written = dict(snap.request_json) | dict(snap.request_json.get("backend_tables") or {})
    dropped = [c for c in _source_leaf_changes(parsed, as_written) if c.b is ABSENT or not same_json(c.a, c.b)]
    evidence = {"source": snap.request_source_name, "normalised_differences": [c.as_json() for c in normalised],
                "source_keys_changed": [c.as_json() for c in dropped]}
    if normalised or dropped:
        shown = ", ".join(f"{c.path} ({short_value(c.a)} vs {short_value(c.b)})" for c in (normalised or dropped)[:5])
        return Finding(name=name, status="FAIL", message=f"request.json differs from the re-parsed {snap.request_source_name} at: {shown}",
                       evidence=evidence, examined=examined)
    keys = _count_leaves(parsed)
    return Finding(name=name, status="PASS",
                   message=f"{snap.request_source_name} re-parses to request.json exactly ({keys} source values, none dropped or changed)",
                   evidence=evidence, examined=examined)


def _parse_source(file_name: str, data: bytes) -> dict[str, Any] | str:
    """The source as a dict (the format module's decoding, shared with the runner), or why it does not parse."""
    fmt = file_name.removeprefix(layout.REQUEST_SOURCE_PREFIX + ".")
    try:
        return layout.decode_request_source(data, fmt, file_name)
    except layout.RequestSourceError as exc:
        return str(exc)


def _source_leaf_changes(source: Any, normalised: Any, path: str = "") -> list[Change]:
    """Each value written in the source, compared with the same place in request.json (defaults added there are fine)."""
    if isinstance(source, dict):
        changes: list[Change] = []
        for key, value in source.items():
            sub = f"{path}.{key}" if path else key
            there = normalised.get(key, ABSENT) if isinstance(normalised, dict) else ABSENT
            changes += _source_leaf_changes(value, there, sub)
        return changes
    return [Change(path, source, normalised)]


def _count_leaves(value: Any) -> int:
    return sum(_count_leaves(v) for v in value.values()) if isinstance(value, dict) else 1

def check_limits_reached_config(snap: Snapshot, ctx: CheckContext) -> Finding:
    """Each `[generation]` value reached the call: where the declared call config says it carries them, else (the
    `generation_config` kind) generate's overrides and effective config, derived `max_length` = prompt + `max_new_tokens`."""
    name = "limits_reached_config"
    if snap.request is None:
        return skip(name, "request.json is missing or invalid")
    model = typed_call_config_model(snap.declaration)
    if model is not None and model.request_fields:  # the call as made carries the request's values: checked there
        return _call_limits(snap, name)
    if not snap.declares("generation_config"):
        return skip(name, f"the {snap.declaration.backend!r} backend declares no generation-config evidence and no call config "
                          f"that records where the request's values went; its call configuration is checked by call_config")
    if not snap.generation_configs:
        if snap.result is not None and snap.result.status != "succeeded":
            return skip(name, f"the run {snap.result.status} before generate recorded its effective config")
        if layout.RESULT in snap.files:
            return Finding(name=name, status="FAIL", message="no generation-config.before-generate.json: the effective config was never recorded",
                           examined=Examined(files=1))
        return skip(name, "no generation-config.before-generate.json (generation never started, or the backend records none)")
    results = [_limits_of_call(snap, cfg) for cfg in snap.generation_configs]
    status = worst(s for s, _, _ in results)
    messages = [m for _, ms, _ in results for m in ms]
    evidence = {f"call_{cfg.call_index}": ev for cfg, (_, _, ev) in zip(snap.generation_configs, results)}
    examined = Examined(files=len(snap.generation_configs) + 1)
    if status == "PASS":
        summary = "; ".join(_describe_limits(cfg) for cfg in snap.generation_configs)
        return Finding(name=name, status="PASS", message=f"the request's limits reached generate: {summary}", evidence=evidence, examined=examined)
    return Finding(name=name, status=status, message="; ".join(messages), evidence=evidence, examined=examined)


def _limits_of_call(snap: Snapshot, cfg: GenerationConfigBeforeGenerate) -> tuple[Status, list[str], dict[str, Any]]:
    """(status, problems, evidence) for one outermost generate call."""
    request = snap.request
    assert request is not None  # checked by the caller
    via_entrypoint = request.entrypoint is not None
    fails: list[str] = []
    warns: list[str] = []
    derived_length = "max_new_tokens" in request.generation
    for key, wanted in request.generation.items():
        passed = cfg.overrides.get(key, ABSENT)
        effective = cfg.effective.get(key, ABSENT)
        if key == "max_length" and derived_length:
            effective = wanted  # max_new_tokens wins; max_length is derived below
        lost = [] if _same(passed, wanted) else [f"passed {short_value(passed)}"]
        lost += [] if _same(effective, wanted) else [f"effective {short_value(effective)}"]
        if lost:
            problem = f"call {cfg.call_index}: [generation] {key} = {short_value(wanted)} did not reach generate ({', '.join(lost)})"
            (warns if via_entrypoint else fails).append(problem + (" — the entry point passed its own value" if via_entrypoint else ""))
        elif not via_entrypoint and cfg.limit_sources.get(key, "request") != "request":
            fails.append(f"call {cfg.call_index}: limit_sources says {key} came from {cfg.limit_sources[key]!r}, but the request set it")
    fails += _derivation_problems(cfg)
    warns += _length_warnings(snap, cfg)
    status: Status = "FAIL" if fails else "WARN" if warns else "PASS"
    evidence: dict[str, Any] = {"overrides": cfg.overrides, "effective_limits": {k: cfg.effective.get(k) for k in (*_LENGTH_KEYS, "max_time", "stop_strings")},
                "limit_sources": cfg.limit_sources, "prompt_length": cfg.prompt_length, "context_limit": cfg.context_limit}
    return status, fails + warns, evidence


def _derivation_problems(cfg: GenerationConfigBeforeGenerate) -> list[str]:
    """transformers' own arithmetic: max_new_tokens => max_length = padded prompt + max_new_tokens."""
    new, length = cfg.effective.get("max_new_tokens"), cfg.effective.get("max_length")
    if isinstance(new, int) and length != cfg.prompt_length + new:
        return [f"call {cfg.call_index}: effective max_length {length} != prompt_length {cfg.prompt_length} + max_new_tokens {new}"]
    if new is None and cfg.limit_sources.get("max_length") == "library_default" and isinstance(length, int):
        expected = cfg.prompt_length + layout.LIBRARY_DEFAULT_NEW_TOKENS
        if cfg.context_limit is not None:
            expected = min(expected, cfg.context_limit)
        if length != expected:
            return [f"call {cfg.call_index}: library-default max_length {length} != prompt {cfg.prompt_length} + {layout.LIBRARY_DEFAULT_NEW_TOKENS} "
                    f"(capped at the context) = {expected}"]
    return []


def _length_warnings(snap: Snapshot, cfg: GenerationConfigBeforeGenerate) -> list[str]:
    """The effective length against the context and against the plan-time estimate."""
    warns = []
    length = cfg.effective.get("max_length")
    if isinstance(length, int) and cfg.context_limit is not None and length > cfg.context_limit:
        warns.append(f"call {cfg.call_index}: effective max_length {length} exceeds the context limit {cfg.context_limit}")
    budget = snap.budget
    if cfg.call_index == 0 and budget is not None and budget.prompt_tokens is not None and budget.prompt_tokens != cfg.prompt_length:
        warns.append(f"the plan estimated a {budget.prompt_tokens}-token prompt, generate saw {cfg.prompt_length}")
    elif cfg.call_index == 0 and budget is not None and budget.effective_max_length not in (None, length):
        warns.append(f"the plan estimated max_length {budget.effective_max_length}, generate used {length}")
    return warns


def _same(actual: Any, wanted: Any) -> bool:
    """Equal, treating a scalar and a one-element list alike (generate normalises eos/stop strings to lists)."""
    if actual is ABSENT:
        return False
    if same_json(actual, wanted):
        return True
    as_list = lambda v: list(v) if isinstance(v, (list, tuple)) else [v]  # noqa: E731
    return same_json(as_list(actual), as_list(wanted))


def _describe_limits(cfg: GenerationConfigBeforeGenerate) -> str:
    parts = []
    for key in _LENGTH_KEYS:
        value = cfg.effective.get(key)
        if value is not None:
            parts.append(f"{key}={value} ({cfg.limit_sources.get(key, 'derived')})")
    return f"call {cfg.call_index}: " + (", ".join(parts) or "no length limit") + f", prompt {cfg.prompt_length}"


def _call_limits(snap: Snapshot, name: str) -> Finding:
    """Each `[generation]` value is where the declared call config says the call as made carries it (`request_fields`)."""
    declared = snap.declaration.call_config
    assert declared is not None and snap.request is not None  # checked by the caller
    call = snap.call_config
    if call is None:
        if snap.result is not None and snap.result.status == "succeeded":
            return Finding(name=name, status="FAIL", message=f"no valid {declared.name}: the call configuration was never recorded",
                           examined=Examined(files=1))
        return skip(name, f"no {declared.name} (the call was never made)")
    problems = []
    for key, wanted in snap.request.generation.items():
        lost = [f"{where} {short_value(got)}" for where, field in call.request_fields.items()
                if not _same(got := getattr(call, field).get(key, ABSENT), wanted)]
        if lost:
            problems.append(f"[generation] {key} = {short_value(wanted)} did not reach {call.call_noun} ({', '.join(lost)})")
    problems += call.request_problems(snap.request.generation)
    evidence = call.request_evidence()
    if problems:
        return Finding(name=name, status="FAIL", message="; ".join(problems), evidence=evidence, examined=Examined(files=2))
    return Finding(name=name, status="PASS", message=f"the request's values reached {call.request_summary()}",
                   evidence=evidence, examined=Examined(files=2))
