"""The progress stream: contiguous, monotonic, opened by `start`, closed by the event that matches result.json."""

from collections.abc import Sequence
from typing import Any

from genrun.schemas import layout

from ._context import CheckContext
from ._finding import Examined, Finding, skip
from ._load import Snapshot

TERMINAL_STATUS = {"end": "succeeded", "exception": "failed", "interrupted": "interrupted"}
"""The last event a finished run writes, and the result status it means."""


def check_progress_stream(snap: Snapshot, ctx: CheckContext) -> Finding:
    """`seq` contiguous from 0; `t` and `generated` never decrease; one `start` first; a terminal event last that agrees with result.json."""
    name = "progress_stream"
    log = snap.progress
    if log is None:
        if layout.RESULT in snap.files or layout.PROGRESS in snap.problems:
            return Finding(name=name, status="FAIL", message=f"progress.ndjson is {snap.problems.get(layout.PROGRESS, 'missing')}",
                           examined=Examined(files=1))
        return skip(name, "no progress.ndjson (generation never started)")
    events = log.events
    problems: list[str] = []
    warns: list[str] = []
    if log.invalid_lines:
        shown = "; ".join(f"line {n}: {why}" for n, why in log.invalid_lines[:3])
        problems.append(f"{len(log.invalid_lines)} line(s) do not parse ({shown})")
    problems += _order_problems(events)
    if events and events[0].event != "start" and not _ended_while_loading(events):
        problems.append(f"the first record is '{events[0].event}', not 'start'")
    starts = sum(1 for e in events if e.event == "start")
    if starts > 1:
        problems.append(f"{starts} 'start' records; a run has one")
    unit = next((e.unit for e in events if e.event == "start"), None)
    if unit is not None and snap.result is not None and unit != snap.result.unit:
        problems.append(f"progress counts {unit}s, result.json counts {snap.result.unit}s")
    terminals = [(i, e) for i, e in enumerate(events) if e.event in TERMINAL_STATUS]
    if snap.result is not None:
        if not terminals:
            problems.append("no 'end', 'exception' or 'interrupted' record, yet result.json exists")
        else:
            index, last = terminals[-1]
            if len(terminals) > 1 or index != len(events) - 1:
                problems.append(f"the terminal '{last.event}' record (seq {last.seq}) is not the single last record")
            if last.event == "end" and snap.result.status == "failed" and snap.result.exception is not None:
                # generation ended; writing the run's evidence then failed (the terminal record comes before the files)
                warns.append(f"the stream ends with 'end', then the run failed: {snap.result.exception.type}: {snap.result.exception.message}")
            elif TERMINAL_STATUS[last.event] != snap.result.status:
                problems.append(f"the stream ends with '{last.event}' but result.json status is {snap.result.status!r}")
            problems += _count_beyond_the_recorder(snap, last)
    elif terminals:
        warns.append(f"the stream ends with '{terminals[-1][1].event}' but no result.json was written")
    if log.truncated_tail:
        warns.append(f"the last line was cut off mid-write: {log.truncated_tail}")
    evidence = {"records": len(events), "lines": log.lines, "invalid_lines": [list(x) for x in log.invalid_lines],
                "truncated_tail": log.truncated_tail, "unit": unit,
                "last": events[-1].model_dump(mode="json", include={"seq", "event", "t", "generated"}) if events else None}
    examined = Examined(files=1, progress_records=log.lines)
    if problems or warns:
        return Finding(name=name, status="FAIL" if problems else "WARN", message="; ".join(problems + warns), evidence=evidence, examined=examined)
    final = events[-1] if events else None
    tail = f", last '{final.event}' at t={final.t:.3f} s with {final.generated} {unit or 'unit'}s" if final else ""
    return Finding(name=name, status="PASS", message=f"{len(events)} records, seq contiguous, t and generated monotonic{tail}",
                   evidence=evidence, examined=examined)


def _order_problems(events: tuple) -> list[str]:
    """The first break in `seq`, `t` and `generated` (one message each, with where it happens)."""
    problems = []
    seq_break = next((i for i, e in enumerate(events) if e.seq != i), None)
    if seq_break is not None:
        problems.append(f"seq is not contiguous: record {seq_break} has seq {events[seq_break].seq}")
    for field in ("t", "generated"):
        back = next((i for i in range(1, len(events)) if getattr(events[i], field) < getattr(events[i - 1], field)), None)
        if back is not None:
            problems.append(f"{field} goes backwards at seq {events[back].seq}: {getattr(events[back - 1], field)} -> {getattr(events[back], field)}")
    return problems


def _ended_while_loading(events: Sequence[Any]) -> bool:
    """A run that failed or was interrupted while loading writes only its terminal record (no `start`)."""
    return len(events) == 1 and events[0].event in ("exception", "interrupted") and events[0].generated == 0


def _count_beyond_the_recorder(snap: Snapshot, terminal: Any) -> list[str]:
    """result.json's `generated` is the backend's count; the terminal record's is genrun's recorder (the furthest row).
    Rows of a call advance together and calls add up, so an honest count is at most the recorder's times the rows."""
    result = snap.result
    rows = max(1, len(snap.stop.sequences) if snap.stop is not None else 0)
    if result is None or result.generated <= terminal.generated * rows:
        return []
    return [f"result.json says generated {result.generated:,} {result.unit}s, but genrun's recorder counted {terminal.generated:,} "
            f"(its '{terminal.event}' record, seq {terminal.seq}): at most {terminal.generated * rows:,} over {rows} row(s)"]
