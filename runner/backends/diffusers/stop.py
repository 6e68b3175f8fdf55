"""The one stop record of a pipeline call: `completed`, `interrupted` or `exception`, with steps done of steps planned."""

from genrun.backends import DiffusionSteps, SequenceStop, StepsPlannedSource, StopEvidence, exception_info

from .evidence import CompletedEvidence, DiffusionExceptionEvidence, DiffusionInterruptedEvidence, PipelineCallBeforeCall
from .steps import StepObserver


def stop_record(observer: StepObserver | None, call: PipelineCallBeforeCall | None, *, signal: str | None, failure: BaseException | None,
                output_returned: bool, requested_steps: int | None) -> SequenceStop:
    """The call's stop record: interrupted by `signal`, else failed by `failure`, else completed.

    Steps planned, best evidence first: the loop's own length (seen when its progress bar opened),
    the dry run of `set_timesteps`, and when the run ended before either (e.g. a signal before the
    loop began) the requested `num_inference_steps` from the budget; `steps_planned_source` says which.
    """
    steps = observer.steps if observer else 0
    planned: int | None
    source: StepsPlannedSource
    if observer is not None and observer.loops and observer.planned is not None:
        planned, source = observer.planned, "denoising_loop"
    elif call is not None and call.timesteps_planned is not None:
        planned, source = call.timesteps_planned, "set_timesteps_dry_run"
    else:
        planned, source = requested_steps, "requested_num_inference_steps"
    progress = DiffusionSteps(
        steps_done=steps,
        steps_planned=planned,
        steps_planned_source=source,
        num_inference_steps=call.num_inference_steps if call else None,
        timesteps_planned_dry_run=call.timesteps_planned if call else None,
        step_observation=call.step_observation if call else None,
        denoising_loops=observer.loops if observer else 0,
        output_returned=output_returned,
    )
    info = exception_info(failure) if signal is None and failure is not None else None
    evidence: StopEvidence
    if signal is not None:
        flag_step = observer.interrupt_flag_set_at if observer else None
        evidence = DiffusionInterruptedEvidence(signal=signal, interrupt_flag_set_at_step=flag_step, steps=progress)
    elif info is not None:
        evidence = DiffusionExceptionEvidence(type=info.type, message=info.message, steps=progress)
    else:
        evidence = CompletedEvidence(steps=progress)
    return SequenceStop(index=0, call_index=0, reason=evidence.reason, generated=steps, exception=info, evidence=evidence)
