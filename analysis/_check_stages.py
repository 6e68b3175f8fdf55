"""Staged runs (the `stages` evidence kind): ids, counts, stop claims and consumption, per stage and row.

`stage-ids.json` is the ids; `stage-progress.ndjson` is what the recorder counted while the run went
(each stage's last record); `stages.json` is the summary; `generation-stop.json` names each record's
stage in its evidence. A row's units are either all ids it emitted or all units it advanced: a row
that counted more units than it saved ids is a FAIL. Stop claims are re-derived from the ids.
"""

from typing import Any

from genrun.schemas import SequenceStop, describe_stop, layout
from genrun.schemas.stages import StageIds, Stages

from ._context import CheckContext
from ._finding import Examined, Finding, skip
from ._load import Snapshot
from ._produced_duration import judge_produced_duration


def check_stages(snap: Snapshot, ctx: CheckContext) -> Finding:
    """Each stage's ids agree with its counted units per row, `eos` claims end with a declared EOS id, `max_new_tokens` claims
    have exactly the limit, every row has a stop (`unknown` is a WARN naming it), a consuming stage read what its source made."""
    name = "stages"
    stages, stage_ids = snap.stages, snap.stage_ids
    if stages is None or stage_ids is None:
        files = (layout.STAGES, layout.STAGE_IDS, layout.STAGE_PROGRESS)
        if not any(f in snap.files for f in files):
            return skip(name, "no stage evidence (no stage was started)")
        why = "; ".join(f"{f}: {snap.problems.get(f, 'missing')}" for f in files[:2] if f not in snap.files or f in snap.problems)
        return Finding(name=name, status="FAIL", message=f"the stage evidence is incomplete: {why}", examined=Examined(files=3))
    problems: list[str] = []
    warns: list[str] = []
    last_event = {e.stage: e for e in snap.stage_events or ()}
    produced: dict[str, int] = {}
    total_ids = 0
    for stage in stages.stages:
        ids = stage_ids.ids.get(stage.name)
        if ids is None:
            problems.append(f"stage {stage.name!r}: no ids in {layout.STAGE_IDS}")
            continue
        total_ids += sum(len(r) for r in ids)
        produced[stage.name] = sum(stage.units)
        if len(ids) != stage.rows or len(stage.units) != stage.rows:
            problems.append(f"stage {stage.name!r}: {stage.rows} rows declared, {len(ids)} id lists, {len(stage.units)} unit counts")
            continue
        live = last_event.get(stage.name)
        if live is None:
            problems.append(f"stage {stage.name!r}: no record in {layout.STAGE_PROGRESS}")
        elif tuple(live.units) != tuple(stage.units) or tuple(live.ids) != tuple(len(r) for r in ids):
            problems.append(f"stage {stage.name!r}: {layout.STAGE_PROGRESS} last counted units {list(live.units)} / ids {list(live.ids)}, "
                            f"but {layout.STAGES} says units {list(stage.units)} and {layout.STAGE_IDS} holds {[len(r) for r in ids]} ids")
        for row, (row_ids, units) in enumerate(zip(ids, stage.units, strict=True)):
            if row_ids and len(row_ids) != units:
                problems.append(f"stage {stage.name!r} row {row}: {units} units counted but {len(row_ids)} ids saved")
        if stage.consumes is not None:
            source = produced.get(stage.consumes)
            consumed = stage.consumed
            if consumed is not None and source is not None and not 0 <= consumed <= source:  # both counted by genrun: a contradiction
                problems.append(f"stage {stage.name!r} consumed {consumed} of the {source} {stage.consumes!r} units its source produced; "
                                f"a stage reads between 0 and what its source made")
            elif source is not None and consumed != source:  # reading less than was made is allowed, and named
                warns.append(f"stage {stage.name!r} consumed {consumed} of the {source} {stage.consumes!r} units its source produced")
    claims = _stop_problems(snap, stages, stage_ids, problems, warns)
    evidence: dict[str, Any] = {"stages": [s.model_dump(mode="json", include={"name", "unit", "rows", "units", "consumed", "seconds"})
                                           for s in stages.stages], "stop_claims_checked": claims}
    examined = Examined(files=4, token_ids=total_ids)
    if problems or warns:
        return Finding(name=name, status="FAIL" if problems else "WARN", message="; ".join(problems + warns), evidence=evidence, examined=examined)
    summary = ", ".join(f"{s.name} {sum(s.units)} {s.unit}s" for s in stages.stages)
    return Finding(name=name, status="PASS", message=f"{len(stages.stages)} stage(s) ({summary}): ids agree with the counts, "
                   f"{claims} stop claim(s) hold", evidence=evidence, examined=examined)


def _stop_problems(snap: Snapshot, stages: Stages, stage_ids: StageIds, problems: list[str], warns: list[str]) -> int:
    """Check each stop record against its stage's ids; returns how many claims were checked."""
    config = snap.call_config_json.get("config") if isinstance(snap.call_config_json, dict) else None
    declared_eos = config.get("eos_token_ids") if isinstance(config, dict) else None
    if isinstance(declared_eos, int) and not isinstance(declared_eos, bool):
        declared_eos = [declared_eos]  # one id, as a GenerationConfig may give it
    rows = {(s.name, r) for s in stages.stages for r in range(s.rows)}
    checked = 0
    for stop in snap.stop.sequences if snap.stop else ():
        stage = stop.evidence.fact("stage")
        ids = stage_ids.ids.get(stage, ())
        row_ids = ids[stop.index] if stop.index < len(ids) else None
        rows.discard((stage, stop.index))
        where = f"stage {stage!r} row {stop.index}"
        if row_ids is None:
            problems.append(f"{where}: a stop record for a row the stage does not have")
            continue
        checked += 1
        problem = _claim_problem(stop, row_ids, declared_eos)
        if problem:
            problems.append(f"{where}: {problem}")
        elif stop.reason == "unknown":
            warns.append(f"{where}: unknown: the run returned without saying why the row stopped (call stage.stop(row, reason))")
    for stage, row in sorted(rows):
        warns.append(f"stage {stage!r} row {row}: no stop record")
    return checked


def _claim_problem(stop: SequenceStop, row_ids: tuple[int, ...], declared_eos: Any) -> str | None:
    if stop.reason == "eos":
        claimed = stop.evidence.fact("eos_token_id")
        claimed_set = stop.evidence.fact("eos_token_ids")
        if isinstance(declared_eos, list) and claimed_set and not set(claimed_set) <= set(declared_eos):
            return f"claims eos with the set {list(claimed_set)}, but the run declared eos_token_ids {declared_eos} in its call config"
        eos_set = declared_eos if isinstance(declared_eos, list) else claimed_set or [claimed]  # the declared set, when there is one
        last = row_ids[-1] if row_ids else None
        if last is None or last != claimed or last not in eos_set:
            return f"claims eos (id {claimed}, declared set {list(eos_set)}) but its last id is {last}"
    if stop.reason == "max_new_tokens":
        limit, units = stop.evidence.fact("limit"), stop.evidence.fact("units")
        if units != limit or (row_ids and len(row_ids) != limit):
            return f"claims max_new_tokens (limit {limit}) but has {len(row_ids) if row_ids else units} units"
    return None


def stages_early_stop(snap: Snapshot, requested: float | None) -> Finding:
    """`early_stop` for a staged frame run: the first timed frame stage's longest row against `[units] requested_seconds`."""
    name = "early_stop"
    if requested is None:
        return skip(name, "[units] requested_seconds is not set: nothing to compare the produced duration with")
    stage = next((s for s in snap.stages.stages if s.unit == "frame" and s.per_second), None) if snap.stages else None
    if stage is None or stage.per_second is None or snap.result is None:
        return skip(name, "no frame stage with a frame rate, or no result.json (the run did not finish)")
    longest = max(range(stage.rows), key=stage.units.__getitem__)
    computed = stage.units[longest] / stage.per_second
    evidence: dict[str, Any] = {"stage": stage.name, "requested_seconds": requested, "produced_seconds": snap.result.produced_seconds,
                                "computed_seconds": computed, "frames": list(stage.units), "per_second": stage.per_second}

    def cause() -> str:
        stop = next((s for s in snap.stop.sequences if s.index == longest and s.evidence.fact("stage") == stage.name), None) if snap.stop else None
        return (f"stage {stage.name!r} stopped with {describe_stop(stop)} at frame {stage.units[longest]}" if stop is not None
                else "the stop reason is not recorded")

    return judge_produced_duration(requested, snap.result.produced_seconds, computed, stage.per_second, cause=cause, evidence=evidence,
                                   frames_from=f"stage {stage.name!r} ({stage.units[longest]} frames at {stage.per_second}/s)",
                                   examined=Examined(files=3))
