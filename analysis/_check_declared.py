"""Checks every backend gets from its declaration (`backend.json`): its call config and its stop evidence
validate against the models it declared. genrun's own models are applied directly (older formats
migrated); a third-party backend's are applied through the JSON Schemas recorded at plan time, so
its artifacts are checked without its code.

JSON Schema validation uses `jsonschema-rs` (a dependency of genrun: its regex engine cannot backtrack, so a hostile
pattern cannot make verify hang; `genrun.schemas.declared_schema`); without it these checks say so (SKIP) instead of
guessing, and a declared schema that cannot be applied safely is a FAIL naming it.
"""

from typing import Any

from pydantic import ValidationError

from genrun.schemas import layout
from genrun.schemas.declared_schema import MAX_ERRORS, UnsafeSchema, compile_declared, schema_errors
from genrun.schemas.evidence import genrun_evidence_model, stop_evidence_adapter

from ._context import CheckContext
from ._finding import Examined, Finding, skip
from ._load import Snapshot

MAX_SCHEMA_ERRORS = MAX_ERRORS
"""Schema errors named per file (enough to find the damage)."""


def _schema_errors(schema: dict[str, Any], data: Any, what: str) -> list[str] | None:
    """`path: message` per violation (at most `MAX_SCHEMA_ERRORS`); `None` when `jsonschema-rs` is not installed; a schema
    that cannot be applied safely is one violation naming it."""
    try:
        validator = compile_declared(schema, what)
    except UnsafeSchema as exc:
        return [f"(schema) {exc}"]
    return None if validator is None else schema_errors(validator, data, what)


def _model_errors(validate: Any, data: Any) -> list[str]:
    """`path: message` per violation of one of genrun's own models (at most `MAX_SCHEMA_ERRORS`)."""
    try:
        validate(data)
    except ValidationError as exc:
        return [f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}" for e in exc.errors(include_url=False)[:MAX_SCHEMA_ERRORS]]
    return []


def _unknown_models(names: tuple[str, ...]) -> list[str]:
    return [n for n in names if genrun_evidence_model(n) is None]


def _known(name: str) -> Any:
    """genrun's own model named `name` (the caller has checked that it is one: `_unknown_models`)."""
    model = genrun_evidence_model(name)
    if model is None:
        raise LookupError(f"{name} is not one of genrun's evidence models")
    return model


NO_JSONSCHEMA = "jsonschema-rs is not installed, so the recorded schema cannot be applied (pip install jsonschema-rs)"


def check_call_config(snap: Snapshot, ctx: CheckContext) -> Finding:
    """The declared call-config artifact was written (when generation ran) and validates against the model declared at plan time."""
    name = "call_config"
    declared = snap.declaration.call_config
    if declared is None:
        return skip(name, f"the {snap.declaration.backend!r} backend declares no call-config artifact")
    evidence = {"artifact": declared.name, "model": declared.model}
    if declared.name not in snap.files:
        if snap.result is not None and snap.result.status == "succeeded":
            return Finding(name=name, status="FAIL", message=f"{declared.name} is missing: the call configuration of a run that "
                           "succeeded was never recorded", evidence=evidence, examined=Examined(files=1))
        return skip(name, f"no {declared.name} (generation never started)", **evidence)
    if snap.call_config_json is None:
        why = snap.problems.get(declared.name, "unreadable")
        return Finding(name=name, status="FAIL", message=f"{declared.name}: {why}", evidence=evidence, examined=Examined(files=1))
    if declared.json_schema is not None:
        errors = _schema_errors(declared.json_schema, snap.call_config_json, f"the call-config schema of {declared.model}")
    elif _unknown_models((declared.model,)):
        return Finding(name=name, status="FAIL", message=f"{layout.BACKEND} names {declared.model} as the call config's model, "
                       "which is not one of genrun's, and records no schema for it", evidence=evidence, examined=Examined(files=1))
    else:
        errors = _model_errors(_known(declared.model).model_validate, snap.call_config_json)
    if errors is None:
        return skip(name, f"{declared.name} is present; {NO_JSONSCHEMA}", **evidence)
    if errors:
        return Finding(name=name, status="FAIL", message=f"{declared.name} does not match {declared.model} as declared in "
                       f"{layout.BACKEND}: " + "; ".join(errors), evidence=evidence, examined=Examined(files=2))
    return Finding(name=name, status="PASS", message=f"{declared.name} validates against {declared.model}, as declared",
                   evidence=evidence, examined=Examined(files=2))


def check_stop_evidence(snap: Snapshot, ctx: CheckContext) -> Finding:
    """Each stop record's reason is one the backend declared and its evidence validates against the declared models;
    without token ids, the units recorded per row add up to result.json's `generated`."""
    name = "stop_evidence"
    if snap.stop is None:
        return skip(name, "no generation-stop.json (see stop_reasons)")
    declared = snap.declaration
    problems: list[str] = []
    for stop in snap.stop.sequences:
        if stop.reason not in declared.stop_reasons:
            problems.append(f"sequence {stop.index}: reason {stop.reason!r} is not one the {declared.backend!r} backend declared "
                            f"({', '.join(declared.stop_reasons)})")
    schema, unknown = declared.stop_evidence_schema, _unknown_models(declared.stop_evidence_models)
    if schema is None and unknown:
        problems.append(f"{layout.BACKEND} names stop-evidence models that are not genrun's and records no schema for them: {', '.join(unknown)}")
    adapter = stop_evidence_adapter(tuple(_known(m) for m in declared.stop_evidence_models)) if schema is None and not unknown else None
    validator, what = None, f"the stop-evidence schema of the {declared.backend!r} backend"
    if schema is not None:
        try:
            validator = compile_declared(schema, what)  # once for every row
        except UnsafeSchema as exc:
            problems.append(str(exc))
            schema = None
    validated = 0
    for stop in snap.stop.sequences if validator is not None or adapter is not None else ():
        facts = stop.evidence.model_dump(mode="json")
        errors = _model_errors(adapter.validate_python, facts) if adapter is not None else schema_errors(validator, facts, what)
        validated += 1
        if errors:
            problems.append(f"sequence {stop.index}: evidence does not match the declared models: " + "; ".join(errors))
    total = sum(s.generated for s in snap.stop.sequences)
    if snap.result is not None and not declared.declares("token_ids") and snap.result.generated != total:
        problems.append(f"result.json generated {snap.result.generated} != {total} {snap.unit}s in the stop records")
    evidence = {"stop_reasons": list(declared.stop_reasons), "models": list(declared.stop_evidence_models), "validated": validated,
                "derived_declaration": declared.derived}
    examined = Examined(files=3)
    if problems:
        return Finding(name=name, status="FAIL", message="; ".join(problems), evidence=evidence, examined=examined)
    if validated < len(snap.stop.sequences):  # only when jsonschema-rs is missing (a problem above is reported first)
        return Finding(name=name, status="SKIP", message=f"reasons are declared ones; {NO_JSONSCHEMA}", evidence=evidence, examined=examined)
    models = ", ".join(m.rsplit(":", 1)[-1] for m in declared.stop_evidence_models)
    return Finding(name=name, status="PASS", message=f"{validated} stop record(s): declared reasons, evidence valid against {models}",
                   evidence=evidence, examined=examined)
