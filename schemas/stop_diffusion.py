"""Diffusion stop evidence (the `diffusers` backend): one record per pipeline call, with its steps."""

from typing import Literal

from ._base import Strict
from .stop import FailedWithMessage, Interrupted, StopEvidence

StepsPlannedSource = Literal["denoising_loop", "set_timesteps_dry_run", "requested_num_inference_steps"]
"""Where a diffusion call's planned step count came from, best evidence first."""


class DiffusionSteps(Strict):
    """Diffusion: steps done of steps planned, and how they were observed."""

    steps_done: int
    """Denoising steps observed."""
    steps_planned: int | None
    """Steps planned, best evidence first (see `steps_planned_source`)."""
    steps_planned_source: StepsPlannedSource
    """Where `steps_planned` came from."""
    num_inference_steps: int | None
    """`num_inference_steps` of the call."""
    timesteps_planned_dry_run: int | None
    """Timesteps from a dry run of the scheduler's `set_timesteps`."""
    step_observation: str | None
    """`callback_on_step_end` or `progress_bar`."""
    denoising_loops: int
    """Denoising loops the pipeline opened."""
    output_returned: bool
    """The pipeline returned an output."""


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
"""The diffusion family's stop evidence, one model per reason."""
