"""Check: how much of each generate call genrun could record (`generation-calls.json`)."""

from genrun.schemas import layout

from ._context import CheckContext
from ._finding import Examined, Finding, skip
from ._load import Snapshot


def check_call_evidence(snap: Snapshot, ctx: CheckContext) -> Finding:
    """Every generate call was recorded with full evidence; a partial one is a WARN naming what is missing and why."""
    name = "call_evidence"
    calls = snap.generation_calls
    if calls is None:
        if layout.GENERATION_CALLS in snap.files:
            return Finding(name=name, status="FAIL", message=f"{layout.GENERATION_CALLS} is {snap.problems.get(layout.GENERATION_CALLS, 'invalid')}",
                           examined=Examined(files=1))
        return skip(name, f"no {layout.GENERATION_CALLS} (written by an older genrun, or generation never started)")
    evidence = {"transformers_version": calls.transformers_version, "foreign_thread_calls": calls.foreign_thread_calls,
                "calls": {c.call_index: {"path": c.path, "evidence_level": c.evidence_level, "nested_calls": c.nested_calls}
                          for c in calls.calls}}
    problems = [f"self-check: {p}" for p in calls.self_check_problems]
    problems += [f"call {c.call_index} ({c.path}): {m}" for c in calls.calls for m in c.missing]
    if problems or calls.evidence_level == "partial":
        return Finding(name=name, status="WARN", message="evidence partial: " + "; ".join(problems or ["(no reason recorded)"]),
                       evidence=evidence, examined=Examined(files=1))
    paths = ", ".join(f"{c.call_index}: {c.path}" for c in calls.calls) or "no calls"
    return Finding(name=name, status="PASS", message=f"full evidence for every call ({paths})", evidence=evidence, examined=Examined(files=1))
