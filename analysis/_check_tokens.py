"""Token checks: counts agree across files, summaries match the ids, stop reasons match the ids, text matches the ids."""

from array import array
from typing import Any

from genrun.schemas import TERMINAL_REASONS, SequenceStop, layout

from ._context import CheckContext
from ._finding import Examined, Finding, Status, skip, worst
from ._load import Snapshot
from ._rows import Row, audio_frames, eos_positions, rows_of, token_facts, total_ids, units_of
from ._tokenizer import DecoderUnavailable, TextDecoder


def _no_ids_reason(snap: Snapshot) -> Finding | None:
    """A FAIL when a finished run lacks its ids; None when the ids are there."""
    if snap.token_ids is not None:
        return None
    why = snap.problems.get(layout.TOKEN_IDS, "missing")
    return Finding(name="", status="FAIL" if layout.RESULT in snap.files else "SKIP",
                   message=f"generated-token-ids.safetensors is {why}" + ("" if layout.RESULT in snap.files else " (the run did not finish)"),
                   examined=Examined(files=1))


def check_token_counts(snap: Snapshot, ctx: CheckContext) -> Finding:
    """The count per row agrees across the ids file, its summary and the stop file; totals agree with result.json and the last progress record."""
    name = "token_counts"
    if (missing := _no_ids_reason(snap)) is not None:
        return missing.model_copy(update={"name": name})
    rows = rows_of(snap)
    problems: list[str] = []
    counts: dict[int, int] = {}
    for row in rows:
        seen = {"safetensors": None if row.ids is None else len(row.ids),
                "generated-token-ids.json": None if row.summary is None else row.summary.count,
                "generation-stop.json": None if row.stop is None else row.stop.generated}
        loaded = {"safetensors": True, "generated-token-ids.json": snap.token_summary is not None, "generation-stop.json": snap.stop is not None}
        absent = [f for f, v in seen.items() if v is None and loaded[f]]
        if absent:
            problems.append(f"sequence {row.index} is missing from {', '.join(absent)}")
        values = {v for v in seen.values() if v is not None}
        if len(values) > 1:
            problems.append(f"sequence {row.index} counts disagree: " + ", ".join(f"{f} {v}" for f, v in seen.items() if v is not None))
        if row.ids is not None:
            counts[row.index] = len(row.ids)
    total = sum(counts.values())
    evidence: dict[str, Any] = {"per_sequence": {layout.sequence_name(i): c for i, c in counts.items()}, "total_tokens": total}
    if snap.result is not None:
        evidence["result_generated_tokens"] = snap.result.generated_tokens
        evidence["result_generated"] = snap.result.generated
        if snap.result.generated_tokens != total:
            problems.append(f"result.json generated_tokens {snap.result.generated_tokens} != {total} ids saved")
        audio = audio_frames(snap)  # decoded audio: frames per batch item, not per row
        units = sum(audio.frames) if audio is not None else sum(units_of(snap, c) for c in counts.values())
        if snap.result.generated != units:
            problems.append(f"result.json generated {snap.result.generated} != {units} {snap.unit}s from the saved ids")
    last = snap.progress.last if snap.progress else None
    if last is not None and counts:
        furthest = units_of(snap, _decoding_steps(snap, counts))
        evidence["last_progress_generated"] = last.generated
        if last.event in ("end", "exception", "interrupted") and last.generated != furthest:
            problems.append(f"final progress record ('{last.event}', seq {last.seq}) says generated {last.generated}, "
                            f"the saved ids make {furthest}")
        elif last.generated > furthest:
            problems.append(f"progress record seq {last.seq} says generated {last.generated}, more than the {furthest} saved")
    examined = Examined(files=4, token_ids=total, progress_records=1 if last is not None else 0)
    if problems:
        return Finding(name=name, status="FAIL", message="; ".join(problems), evidence=evidence, examined=examined)
    return Finding(name=name, status="PASS", message=f"{len(counts)} sequence(s), {total} tokens: counts agree across ids, summary, stop file"
                   + (", result.json and the final progress record" if snap.result and last else ""), evidence=evidence, examined=examined)


def _decoding_steps(snap: Snapshot, counts: dict[int, int]) -> int:
    """Tokens the progress stream counts: per outermost call its longest row (one token per row per step), summed over calls."""
    if snap.stop is None:
        return max(counts.values())
    longest: dict[int, int] = {}
    for s in snap.stop.sequences:
        if s.index in counts:
            longest[s.call_index] = max(longest.get(s.call_index, 0), counts[s.index])
    return sum(longest.values()) if longest else max(counts.values())


def check_token_summary(snap: Snapshot, ctx: CheckContext) -> Finding:
    """`generated-token-ids.json` describes the saved ids: last `LAST_IDS_KEPT` ids, EOS positions, EOS set and prompt length."""
    name = "token_summary"
    if snap.token_ids is None or snap.token_summary is None:
        return skip(name, "generated-token-ids.safetensors or generated-token-ids.json is missing or invalid (see token_counts)")
    summary = snap.token_summary
    problems = []
    eos = summary.eos_token_ids
    config = snap.generation_configs[0] if snap.generation_configs else None
    if config is not None and set(config.eos_token_ids) != set(eos):
        problems.append(f"EOS set {list(eos)} differs from the effective config's {list(config.eos_token_ids)}")
    if config is not None and summary.prompt_length not in (None, config.prompt_length):
        problems.append(f"prompt_length {summary.prompt_length} differs from the effective config's {config.prompt_length}")
    for row in rows_of(snap):
        if row.ids is None or row.summary is None:
            continue
        tail = row.ids[-layout.LAST_IDS_KEPT:].tolist()
        if list(row.summary.last_ids) != tail:
            problems.append(f"sequence {row.index}: last_ids differ from the last {len(tail)} saved ids")
        found = eos_positions(row.ids, eos)
        if list(row.summary.eos_positions) != found:
            problems.append(f"sequence {row.index}: eos_positions {list(row.summary.eos_positions)[:8]} != {found[:8]} found in the ids")
    examined = Examined(files=2, token_ids=total_ids(snap))
    evidence = {"eos_token_ids": list(eos), "prompt_length": summary.prompt_length}
    if problems:
        return Finding(name=name, status="FAIL", message="; ".join(problems), evidence=evidence, examined=examined)
    return Finding(name=name, status="PASS", message="last ids, EOS positions, EOS set and prompt length match the saved ids",
                   evidence=evidence, examined=examined)


def check_stop_reasons(snap: Snapshot, ctx: CheckContext) -> Finding:
    """Each recorded stop reason is consistent with the ids, the limits and result.json's status."""
    name = "stop_reasons"
    if snap.stop is None:
        if layout.RESULT in snap.files:
            return Finding(name=name, status="FAIL", message=f"generation-stop.json is {snap.problems.get(layout.STOP, 'missing')}",
                           examined=Examined(files=1))
        return skip(name, "no generation-stop.json (the run did not finish)")
    ids = snap.token_ids or {}
    judge = _judge_stop if snap.declares("token_ids") else _judge_without_ids
    verdicts = [judge(s, ids.get(s.index), snap, ctx.decoder) for s in snap.stop.sequences]
    verdicts.append(_judge_status(snap))
    status = worst(v[0] for v in verdicts)
    notes = [v[1] for v in verdicts if v[1]]
    evidence: dict[str, Any] = {layout.sequence_name(s.index): {"reason": s.reason, "generated": s.generated, "evidence": s.evidence.model_dump(mode="json")}
                for s in snap.stop.sequences}
    if snap.result is not None:
        evidence["result_status"] = snap.result.status
    examined = Examined(files=3, token_ids=total_ids(snap))
    if status == "PASS":
        reasons = ", ".join(f"{s.index}: {s.reason}" for s in snap.stop.sequences)
        return Finding(name=name, status=status, message=f"stop reasons agree with the ids and limits ({reasons})" + (
            f"; {'; '.join(notes)}" if notes else ""), evidence=evidence, examined=examined)
    bad = [v[1] for v in verdicts if v[0] in ("FAIL", "WARN") and v[1]]
    return Finding(name=name, status=status, message="; ".join(bad), evidence=evidence, examined=examined)


def _judge_without_ids(stop: SequenceStop, ids: array | None, snap: Snapshot, decoder: TextDecoder | DecoderUnavailable) -> tuple[Status, str]:
    """(status, note) for one row of a backend that declares no token ids: terminal reasons against result.json."""
    where = f"sequence {stop.index} ({stop.reason})"
    if stop.reason in TERMINAL_REASONS:
        return _judge_terminal(stop, snap, where)
    return "PASS", f"sequence {stop.index}: {stop.reason} (no token ids declared to hold it against)"


def _judge_stop(stop: SequenceStop, ids: array | None, snap: Snapshot, decoder: TextDecoder | DecoderUnavailable) -> tuple[Status, str]:
    """(status, note) for one row's recorded reason, against its saved ids and the token facts of its evidence."""
    where = f"sequence {stop.index} ({stop.reason})"
    facts = token_facts(stop)
    if ids is not None:
        last = ids[-1] if ids else None
        if facts.last_token_id != last:
            return "FAIL", f"{where}: last_token_id {facts.last_token_id} but the last saved id is {last}"
    if stop.reason in TERMINAL_REASONS:
        return _judge_terminal(stop, snap, where)
    if ids is None:
        return "FAIL", f"{where}: no saved ids to check the reason against"
    count = len(ids)
    last = ids[-1] if count else None
    eos_at = eos_positions(ids, facts.eos_token_ids)
    if stop.reason == "eos":
        if last is None or last not in facts.eos_token_ids:
            return "FAIL", f"{where}: the last id {last} is not in the EOS set {list(facts.eos_token_ids)}"
        if len(eos_at) > 1:
            return "FAIL", f"{where}: EOS also at position {eos_at[0]}, before the end; the row should have stopped there"
        return "PASS", ""
    if stop.reason in ("max_new_tokens", "max_length") and eos_at:
        return "FAIL", f"{where}: EOS id {ids[eos_at[0]]} at position {eos_at[0]}, so the row ended by EOS, not by a length limit"
    if stop.reason == "max_new_tokens":
        if facts.max_new_tokens is None or count != facts.max_new_tokens:
            return "FAIL", f"{where}: {count} tokens but max_new_tokens is {facts.max_new_tokens}"
        return "PASS", ""
    if stop.reason == "max_length":
        if facts.max_length is None or facts.prompt_length is None or facts.prompt_length + count != facts.max_length:
            return "FAIL", f"{where}: prompt {facts.prompt_length} + {count} tokens != max_length {facts.max_length}"
        return "PASS", ""
    if stop.reason == "stop_string":
        return _judge_stop_string(stop, ids, decoder, where)
    if stop.reason == "max_time":
        limit = stop.evidence.fact("max_time")
        elapsed = snap.progress.last.t if snap.progress and snap.progress.last else None
        if isinstance(limit, (int, float)) and elapsed is not None and elapsed < limit:
            return "FAIL", f"{where}: the run lasted {elapsed:.3f} s, less than max_time {limit} s"
        return "PASS", f"sequence {stop.index}: max_time {limit} s (time limits are not visible in the ids)"
    if stop.reason == "custom":
        names = list(stop.evidence.fact("custom_criteria") or facts.fired)
        if not names:
            return "FAIL", f"{where}: reason 'custom' but no criterion is named in fired or evidence.custom_criteria"
        return "PASS", f"sequence {stop.index}: stopped by the caller's own criteria {names}"
    if stop.reason == "unknown":
        return "WARN", f"{where}: no recorded criterion explains the stop (last id {last}, {count} tokens, fired {list(facts.fired)})"
    return "FAIL", f"{where}: reason {stop.reason!r} is not valid for a token row"


def _judge_stop_string(stop: SequenceStop, ids: array, decoder: TextDecoder | DecoderUnavailable, where: str) -> tuple[Status, str]:
    string = stop.evidence.fact("stop_string")
    if not isinstance(string, str):
        return "FAIL", f"{where}: evidence does not name the stop string"
    if isinstance(decoder, DecoderUnavailable):
        return "PASS", f"sequence {stop.index}: stop string {string!r} not confirmed ({decoder.reason})"
    tail = decoder.decode(ids[-max(len(string) + 8, 16):].tolist(), skip_special_tokens=False)
    if string not in tail:
        return "FAIL", f"{where}: the decoded tail {tail[-40:]!r} does not contain {string!r}"
    return "PASS", ""


def _judge_terminal(stop: SequenceStop, snap: Snapshot, where: str) -> tuple[Status, str]:
    """interrupted / exception / completed must agree with result.json."""
    result = snap.result
    if result is None:
        return "FAIL", f"{where}: no result.json to agree with"
    if stop.reason == "interrupted" and (result.status != "interrupted" or not result.signal):
        return "FAIL", f"{where}: result.json says status {result.status!r}, signal {result.signal!r}"
    if stop.reason == "exception" and (result.status != "failed" or result.exception is None or stop.exception is None):
        return "FAIL", f"{where}: result.json says status {result.status!r}; the exception must be recorded in both files"
    if stop.reason == "completed" and result.status != "succeeded" and not _failed_after_the_rows(snap):
        return "FAIL", f"{where}: result.json says status {result.status!r}"
    return "PASS", ""


def _failed_after_the_rows(snap: Snapshot) -> bool:
    """The run failed with a recorded exception after every row had ended on its own (genrun failed a loop that returned
    leaving a thread running, a forked child that returned into genrun, a failed write of the evidence): the rows'
    reasons stand, and result.json says why the run failed."""
    return snap.result is not None and snap.result.status == "failed" and snap.result.exception is not None


def _judge_status(snap: Snapshot) -> tuple[Status, str]:
    """result.json's status follows from the rows: any exception -> failed, any interruption -> interrupted."""
    if snap.result is None or snap.stop is None:
        return "SKIP", ""
    reasons = {s.reason for s in snap.stop.sequences}
    if not reasons:  # nothing was generated: only a failure or an interruption explains that
        if (snap.result.status, bool(snap.result.exception or snap.result.signal)) in (("failed", True), ("interrupted", True)):
            return "PASS", ""
        return "WARN", f"no rows recorded in generation-stop.json, yet result.json says {snap.result.status!r}"
    expected = "failed" if "exception" in reasons else "interrupted" if "interrupted" in reasons else "succeeded"
    if expected == "succeeded" and _failed_after_the_rows(snap):
        # the rows ended on their own; then the run failed (genrun's own step after the rows, or what it refused of the
        # user's code): a WARN that names the exception, so the failure is seen beside rows that look finished
        exception = snap.result.exception
        assert exception is not None  # _failed_after_the_rows
        return "WARN", f"the rows ended {sorted(reasons)}, then the run failed: {exception.type}: {exception.message}"
    if snap.result.status != expected:
        return "FAIL", f"result.json status {snap.result.status!r}, but the stop reasons {sorted(reasons)} mean {expected!r}"
    return "PASS", ""


def check_saved_text(snap: Snapshot, ctx: CheckContext) -> Finding:
    """The saved text (summary decodes, `outputs/sequence_<i>.txt`) equals the decode of the saved ids."""
    name = "saved_text"
    if snap.token_ids is None or snap.token_summary is None:
        return skip(name, "no saved ids or summary to decode (see token_counts)")
    problems: list[str] = []
    compared = 0
    decoder = ctx.decoder
    for row in rows_of(snap):
        if row.summary is None:
            continue
        problems += _output_file_problems(snap, row)
        if isinstance(decoder, DecoderUnavailable) or row.ids is None:
            continue
        ids = row.ids.tolist()
        for field, skip_special in (("text", True), ("text_with_special", False)):
            saved = getattr(row.summary, field)
            if saved is None:
                continue
            compared += 1
            decoded = decoder.decode(ids, skip_special_tokens=skip_special)
            if decoded != saved:
                problems.append(f"sequence {row.index}: {field} differs from the decode at character {_first_difference(saved, decoded)}")
    examined = Examined(files=1 + len(snap.outputs), token_ids=total_ids(snap))
    evidence = {"decodes_compared": compared, "output_files": sorted(snap.outputs)}
    if problems:
        return Finding(name=name, status="FAIL", message="; ".join(problems), evidence=evidence, examined=examined)
    if isinstance(decoder, DecoderUnavailable):
        return Finding(name=name, status="FAIL" if decoder.hostile else "SKIP", message=f"cannot decode: {decoder.reason}" + (
            f" (outputs/*.txt do match the summary text)" if snap.outputs else ""), evidence=evidence, examined=examined)
    evidence["tokenizer"] = str(decoder.path)
    return Finding(name=name, status="PASS", message=f"{compared} saved decodes and {len(snap.outputs)} output text file(s) equal the decode "
                   f"of the saved ids (tokenizer sha256 verified)", evidence=evidence, examined=examined)


def _output_file_problems(snap: Snapshot, row: Row) -> list[str]:
    path = layout.sequence_text_path(row.index)
    data = snap.outputs.get(path)
    if data is None or row.summary is None or row.summary.text is None:
        return []
    text = data.decode("utf-8", "replace")
    if text in (row.summary.text, row.summary.text + "\n"):
        return []
    return [f"{path} differs from the summary text at character {_first_difference(text, row.summary.text)}"]


def _first_difference(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))
