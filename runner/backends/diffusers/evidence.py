"""What the `diffusers` backend declares: its call config (`pipeline-call.before-call.json`) and one stop-evidence model
per reason, each with the call's steps (`DiffusionSteps`, which the `diffusion_steps` evidence kind reads).

genrun finds this declaration through the `genrun.evidence` entry points (readers resolve its models by the names
`backend.json` records); reading a snapshot never imports torch or diffusers.
"""

from typing import Literal

from genrun.backends import DiffusionSteps, EvidenceDeclaration, FailedWithMessage, Interrupted, StopEvidence
from genrun.schemas.layout import PIPELINE_CALL
from genrun.schemas.pipeline_call import PipelineCallBeforeCall


class _StepStop(StopEvidence):
    """Shared by every diffusion reason: the steps done and planned (the `diffusion_steps` evidence kind reads `steps`)."""

    model_config = {**StopEvidence.model_config, "extra": "forbid"}

    steps: DiffusionSteps
    """Steps done and planned."""


class CompletedEvidence(_StepStop):
    """`completed`: the pipeline ran all its steps."""

    reason: Literal["completed"] = "completed"
    """Tag."""


class DiffusionInterruptedEvidence(Interrupted, _StepStop):
    """`interrupted`: a signal stopped the pipeline."""

    interrupt_flag_set_at_step: int | None = None
    """The step at which the pipeline's interrupt flag was set."""


class DiffusionExceptionEvidence(FailedWithMessage, _StepStop):
    """`exception` (the traceback is in the record's `exception`)."""


DIFFUSION_STOP_EVIDENCE: tuple[type[StopEvidence], ...] = (CompletedEvidence, DiffusionInterruptedEvidence, DiffusionExceptionEvidence)
"""One model per reason."""


EVIDENCE = EvidenceDeclaration(
    kinds=("call_config", "stop_records", "diffusion_steps"),
    stop_evidence=DIFFUSION_STOP_EVIDENCE,
    call_config_name=PIPELINE_CALL,
    call_config_model=PipelineCallBeforeCall,
)
"""Diffusion pipelines: the pipeline call as made, steps done of steps planned (frozen as `backend.json` at plan time)."""
