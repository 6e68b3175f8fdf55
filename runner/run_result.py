"""`result.json` from a finished run: status and exit code from how the run ended, timings, rates, peaks, identities,
and the note of signals that arrived after generation ended; and the terminal progress event that agrees with it."""

from collections import Counter
from collections.abc import Sequence

from genrun.schemas import ExecutionIdentity, PeakMemory, Phases, Result, RunStatus, SequenceStop, Timings

from .frozen_plan import FrozenPlan, VerifiedIdentity
from .interrupts import EXIT_CODES, later_signals
from .memory import MemoryProbe
from .recorder import ProgressRecorder
from .run_template import RunRecord


def write_terminal_event(recorder: ProgressRecorder, record: RunRecord) -> None:
    """`interrupted`, `exception` or `end`, unless the stream is already closed."""
    if recorder.closed:
        return
    if record.signal is not None:
        recorder.interrupted(record.signal)
    elif record.exception is not None:
        recorder.exception(record.exception.type, record.exception.message)
    else:
        recorder.end()


def build_result(plan: FrozenPlan, identity: VerifiedIdentity, record: RunRecord, memory: MemoryProbe, elapsed: tuple[float, Phases],
                 per_row: int | None = None) -> Result:
    """`result.json` from the run: status and exit code, timings, rates (summed over rows and per row), peaks, identities.

    `elapsed` is `(total_s, phases)` from execute's phase clock.

    `per_row` is the furthest row's unit count as progress.ndjson counts it.
    """
    status: RunStatus
    if record.signal is not None:
        status, exit_code = "interrupted", EXIT_CODES.get(record.signal, 130)
    elif record.exception is not None:
        status, exit_code = "failed", 1
    else:
        status, exit_code = "succeeded", 0
    outcome = record.outcome
    total_s, phases = elapsed
    rate = outcome.generated / outcome.decode_s if outcome.decode_s else None
    cuda = memory.cuda()
    units = plan.request.units
    return Result(
        status=status,
        exit_code=exit_code,
        unit=outcome.unit,
        generated=outcome.generated,
        generated_tokens=outcome.generated_tokens,
        units_per_s=rate,
        rows=outcome.rows or parallel_rows(outcome.stops),
        units_per_s_per_row=per_row / outcome.decode_s if outcome.decode_s and per_row is not None else None,
        produced_seconds=outcome.produced_seconds,
        requested_seconds=units.requested_seconds if outcome.unit == "frame" else None,
        timings=Timings(load_s=record.load_s, first_token_s=outcome.first_unit_s, decode_s=outcome.decode_s, total_s=total_s,
                        phases=phases),
        peak_memory=PeakMemory(
            rss_bytes=memory.peak_rss_bytes(),
            cuda_allocated_bytes=cuda.peak_allocated if cuda else None,
            cuda_reserved_bytes=cuda.peak_reserved if cuda else None,
        ),
        exception=record.exception,
        signal=record.signal,
        execution_identity=ExecutionIdentity(code_digest=identity.code_digest, model_digest=identity.model_digest, plan_digest=identity.plan_digest),
        outputs=outcome.outputs,
        forced=plan.budget.forced,
        notes=(*record.notes, *outcome.notes, *late_signal_notes(record.signal)),
    )


def parallel_rows(stops: Sequence[SequenceStop]) -> int | None:
    """Rows decoded side by side: the most stop records of one generate call. Sequential calls (Whisper's long-form
    windows) add sequences, not rows: two 30 s windows of one recording are one row decoded twice."""
    per_call = Counter(stop.call_index for stop in stops)
    return max(per_call.values(), default=0) or None


def late_signal_notes(signal: str | None) -> tuple[str, ...]:
    """The note for signals counted, not acted on: after the one that stopped the run, or after generation ended."""
    later = later_signals()
    if not later:
        return ()
    first = f" after {signal}" if signal else " after generation ended"
    return (f"received {', '.join(later)}{first}; counted, not acted on, so the evidence could be written and sealed",)
