"""Diffusion pipelines: steps done against steps planned, across the stop file, progress and result."""

from ._context import CheckContext
from ._finding import Examined, Finding, skip
from ._load import Snapshot


def check_diffusion_steps(snap: Snapshot, ctx: CheckContext) -> Finding:
    """`completed` means every planned step ran; an interruption or exception ran at most that many; progress and result agree."""
    name = "diffusion_steps"
    if not snap.counts_steps:
        return skip(name, "the run counted tokens, not steps (token checks apply instead)")
    if snap.stop is None or not snap.stop.sequences:
        return skip(name, "no generation-stop.json record (the run did not finish)")
    problems: list[str] = []
    evidence = {}
    for stop in snap.stop.sequences:
        planned, done = stop.steps_planned, stop.generated
        evidence[f"call_{stop.index}"] = {"reason": stop.reason, "steps_done": done, "steps_planned": planned}
        if planned is None:
            problems.append(f"call {stop.index}: steps_planned is not recorded")
        elif stop.reason == "completed" and done != planned:
            problems.append(f"call {stop.index}: 'completed' after {done} of {planned} planned steps")
        elif done > planned:
            problems.append(f"call {stop.index}: {done} steps done, more than the {planned} planned")
    call = snap.pipeline_call
    if call is not None and call.timesteps_planned is not None and snap.stop.sequences[0].steps_planned not in (None, call.timesteps_planned):
        problems.append(f"the stop file plans {snap.stop.sequences[0].steps_planned} steps, the pipeline call "
                        f"{call.timesteps_planned} scheduler timesteps")
    done_total = sum(s.generated for s in snap.stop.sequences)
    events = snap.progress.events if snap.progress else ()
    start = next((e for e in events if e.event == "start"), None)
    planned_first = snap.stop.sequences[0].steps_planned
    if start is not None and start.planned_units not in (None, planned_first):
        problems.append(f"progress 'start' planned {start.planned_units} steps, the stop file {planned_first}")
    if events and events[-1].generated != snap.stop.sequences[-1].generated:
        problems.append(f"the last progress record says {events[-1].generated} steps, the stop file {snap.stop.sequences[-1].generated}")
    if snap.result is not None:
        if snap.result.generated != done_total:
            problems.append(f"result.json generated {snap.result.generated} != {done_total} steps in the stop file")
        if snap.result.status == "succeeded" and not snap.result.outputs:
            problems.append("the pipeline completed but result.json lists no output files")
    examined = Examined(files=3, progress_records=len(events))
    if problems:
        return Finding(name=name, status="FAIL", message="; ".join(problems), evidence=evidence, examined=examined)
    described = ", ".join(f"{s.reason} after {s.generated}/{s.steps_planned} steps" for s in snap.stop.sequences)
    return Finding(name=name, status="PASS", message=f"steps agree across the stop file, progress and result.json ({described})",
                   evidence=evidence, examined=examined)
