"""The run template every backend fills: start -> load -> generate -> finish.

The signal gate, the classification of what ended generation, `disarm()` and the handling of a step
that fails live here, once, for every backend (the protocol is in `genrun.runner.backends`). A
backend never catches `BaseException` to classify its run and never disarms: a signal that
arrives after generation ended is counted by the disarmed gate and noted in `result.json`, never
acted on, whichever backend ran.
"""

from dataclasses import replace
from typing import NamedTuple

from genrun.schemas import ExceptionInfo

from .backends import Backend, BackendOutcome, ExecutionContext, GenerationEnd, LoadedModel, Run, exception_info
from .errors import BackendContractError, ForkedChildReturned
from .executing_process import forked_returns, refuse_other_process
from .interrupts import disarm, interrupt_gate, stop_if_requested
from .phases import PhaseClock
from .recorder import ProgressRecorder


class RunRecord(NamedTuple):
    """A finished run as the core records it: the backend's outcome, how the run ended, and the core's own facts."""

    outcome: BackendOutcome
    """What the backend's `finish` reported (a bare count from the recorder when there was no run to finish)."""
    signal: str | None
    """`SIGINT`/`SIGTERM` when a signal stopped the run."""
    exception: ExceptionInfo | None
    """The exception that failed the run (`None` when it succeeded or a signal stopped it)."""
    load_s: float | None
    """Seconds the model's load took (`None` when loading never finished)."""
    notes: tuple[str, ...] = ()
    """The core's remarks (a reused model), before the backend's own."""
    loaded_here: LoadedModel | None = None
    """The model this run loaded itself (not a preloaded one): kept until the snapshot is sealed, then released by the
    caller (`execute`), so that stopping it (vLLM's engine core takes seconds) is neither the run's time nor its risk."""


def run_template(backend: Backend, ctx: ExecutionContext, preloaded: LoadedModel | None = None, clock: PhaseClock | None = None) -> RunRecord:
    """Start the run, load (unless `preloaded`) and generate inside the signal gate; disarm; finish. Never raises for a
    failure of the model, of user code or of the backend: each is recorded, and the caller seals the snapshot.
    `clock` (execute's) is told when loading, generating and writing the evidence begin."""
    enter = clock.enter if clock is not None else (lambda phase: None)
    loaded, run, end = preloaded, None, GenerationEnd()
    notes = (preloaded.reuse_note,) if preloaded is not None else ()
    with interrupt_gate():  # nested in execute's gate: shares its handlers; a first signal raises where it lands
        try:
            try:
                run = backend.start(ctx)
                if loaded is None:
                    enter("load")
                    loaded = backend.load(ctx)
                enter("generate")
                run.generate(loaded)
                stop_if_requested()  # a signal the backend's or user code swallowed still ends the run as interrupted
            finally:
                disarm()  # generation is over: from here a signal is counted, never acted on
        except BaseException as exc:  # what ended the run is evidence: classified, never re-raised
            end = GenerationEnd.raised(exc)
    refuse_other_process("the run's generate step ended", ctx.snapshot_dir)  # a child forked by user code ends here
    end = _with_forked_returns(end, ctx)
    load_s = loaded.load_s if loaded is not None else None
    if run is None:  # the backend could not even start a run: no stop records, the exception in result.json
        return _record(bare_outcome(ctx.recorder), end, None, load_s, notes)
    enter("evidence")
    outcome, finish_failure = _finish(run, end, ctx.recorder)
    outcome, contradiction = held_to_the_recorder(outcome, ctx.recorder, backend.name)
    record = _record(outcome, end, finish_failure or contradiction, load_s, notes)
    return record if loaded is preloaded else record._replace(loaded_here=loaded)


def _with_forked_returns(end: GenerationEnd, ctx: ExecutionContext) -> GenerationEnd:
    """A child forked by user code that returned into genrun fails the run (it was stopped before writing anything)."""
    returned = forked_returns(ctx.snapshot_dir)
    if not returned or end.signal is not None:  # a signal's interruption stays what ended the run
        return end
    return GenerationEnd.raised(ForkedChildReturned(
        f"{len(returned)} process(es) forked by user code returned into genrun (or called its recorder) instead of ending "
        "with os._exit(): "
        f"{'; '.join(returned)}; each was stopped before it touched the snapshot, and this run is failed because its code "
        "ran twice"))


def _finish(run: Run, end: GenerationEnd, recorder: ProgressRecorder) -> tuple[BackendOutcome, BaseException | None]:
    try:
        outcome = run.finish(end)
    except BaseException as exc:  # a failure of the backend's own evidence writing: still a sealed, failed snapshot
        return bare_outcome(recorder), exc
    return outcome, outcome.failure


def held_to_the_recorder(outcome: BackendOutcome, recorder: ProgressRecorder, backend: str) -> tuple[BackendOutcome, BaseException | None]:
    """A backend's count is its claim; genrun's recorder counted the furthest row itself. Rows of one call advance together
    and sequential calls add up, so no honest count exceeds the recorder's times the rows (stop records). A count beyond
    that is not written as the run's: result.json gets the recorder's count, and the run fails naming both."""
    rows = max(1, len(outcome.stops))
    if outcome.generated <= recorder.generated * rows:
        return outcome, None
    claim = BackendContractError(f"the {backend!r} backend reported generated={outcome.generated:,} {outcome.unit}s, but genrun's recorder "
                                 f"counted {recorder.generated:,} (at most {recorder.generated * rows:,} over {rows} row(s)); "
                                 "result.json records genrun's count")
    return replace(outcome, generated=recorder.generated), claim


def _record(outcome: BackendOutcome, end: GenerationEnd, finish_failure: BaseException | None, load_s: float | None,
            notes: tuple[str, ...]) -> RunRecord:
    """How generation ended decides the status; a failure while finishing fails a run that had returned."""
    failure = finish_failure if end.returned else end.failure
    return RunRecord(outcome=outcome, signal=end.signal, exception=exception_info(failure) if failure is not None else None,
                     load_s=load_s, notes=notes)


def interrupted_before_running(recorder: ProgressRecorder, signal: str) -> RunRecord:
    """A signal after `progress.ndjson` opened but before the template ran (e.g. while the context was built)."""
    return RunRecord(outcome=bare_outcome(recorder), signal=signal, exception=None, load_s=None)


def failed_run(recorder: ProgressRecorder, exc: BaseException, outcome: BackendOutcome | None = None) -> RunRecord:
    """A run failed by genrun's own step (the backend's import, the runtime, the run log, writing the evidence): the
    backend's `outcome` when it has one (generation ended before the failure), else what the recorder counted."""
    return RunRecord(outcome=outcome or bare_outcome(recorder), signal=None, exception=exception_info(exc), load_s=None)


def bare_outcome(recorder: ProgressRecorder) -> BackendOutcome:
    """What the recorder counted, without stop records, timings or outputs: a run no backend could finish."""
    return BackendOutcome(unit=recorder.unit, generated=recorder.generated, generated_tokens=recorder.steps,
                          first_unit_s=None, decode_s=None, stops=())
