"""The `diffusion_steps` evidence kind: steps done against steps planned, across the stop file, progress and result."""

from ._context import CheckContext
from ._finding import Examined, Finding, skip
from ._load import Snapshot
from ._rows import steps_of


def check_diffusion_steps(snap: Snapshot, ctx: CheckContext) -> Finding:
    """`completed` means every planned step ran; an interruption or exception ran at most that many; progress and result agree."""
    name = "diffusion_steps"
    if snap.stop is None or not snap.stop.sequences:
        return skip(name, "no generation-stop.json record (the run did not finish)")
    problems: list[str] = []
    evidence = {}
    planned_of: dict[int, int | None] = {}
    for stop in snap.stop.sequences:
        steps = steps_of(stop)
        planned, done = steps.steps_planned if steps is not None else None, stop.generated
        planned_of[stop.index] = planned
        evidence[f"call_{stop.index}"] = {"reason": stop.reason, "steps_done": done, "steps_planned": planned}
        if steps is None:
            problems.append(f"call {stop.index}: the evidence records no steps (the diffusion_steps kind promises `evidence.steps`)")
        elif planned is None:
            problems.append(f"call {stop.index}: steps_planned is not recorded")
        elif stop.reason == "completed" and done != planned:
            problems.append(f"call {stop.index}: 'completed' after {done} of {planned} planned steps")
        elif done > planned:
            problems.append(f"call {stop.index}: {done} steps done, more than the {planned} planned")
    call_planned = snap.call_config.planned_units() if snap.call_config is not None else None
    planned_first = planned_of[snap.stop.sequences[0].index]
    if call_planned is not None and planned_first not in (None, call_planned):
        problems.append(f"the stop file plans {planned_first} steps, the call config {call_planned}")
    done_total = sum(s.generated for s in snap.stop.sequences)
    events = snap.progress.events if snap.progress else ()
    start = next((e for e in events if e.event == "start"), None)
    if start is not None and start.planned_units not in (None, planned_first):
        problems.append(f"progress 'start' planned {start.planned_units} steps, the stop file {planned_first}")
    if events and events[-1].generated != snap.stop.sequences[-1].generated:
        problems.append(f"the last progress record says {events[-1].generated} steps, the stop file {snap.stop.sequences[-1].generated}")
    if snap.result is not None:
        if snap.result.generated != done_total:
            problems.append(f"result.json generated {snap.result.generated} != {done_total} steps in the stop file")
        if snap.result.status == "succeeded" and not snap.result.outputs:
            problems.append("the run completed but result.json lists no output files")
    examined = Examined(files=3, progress_records=len(events))
    if problems:
        return Finding(name=name, status="FAIL", message="; ".join(problems), evidence=evidence, examined=examined)
    described = ", ".join(f"{s.reason} after {s.generated}/{planned_of[s.index]} steps" for s in snap.stop.sequences)
    return Finding(name=name, status="PASS", message=f"steps agree across the stop file, progress and result.json ({described})",
                   evidence=evidence, examined=examined)
