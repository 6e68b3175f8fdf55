"""The `diffusion_steps` evidence kind: the steps every row's stop evidence carries (`steps`), done of planned."""

from typing import Literal

from ._base import Strict

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
