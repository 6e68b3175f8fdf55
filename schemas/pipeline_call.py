"""`pipeline-call.before-call.json`: a diffusers pipeline call exactly as genrun is about to make it."""

from typing import Any, Literal

from ._versioning import Versioned

StepObservation = Literal["callback_on_step_end", "progress_bar"]
StepsSource = Literal["request", "pipeline_default"]


class PipelineCallBeforeCall(Versioned):
    """Written after loading, before the pipeline is called (the diffusion counterpart of the effective generation config)."""

    pipeline_class: str
    """Class of the loaded pipeline, e.g. `DDIMPipeline`."""
    components: dict[str, str | None]
    """Component name -> class (`None` for an absent optional component)."""
    scheduler_class: str
    """Class of the pipeline's scheduler."""
    scheduler_config: dict[str, Any]
    """The scheduler's full config as loaded (every field, defaults included)."""
    num_inference_steps: int | None
    """Denoising steps requested (`None` when the pipeline's call takes no such argument)."""
    num_inference_steps_source: StepsSource | None
    """`request` ([generation]) or `pipeline_default` (the default in the pipeline's `__call__` signature)."""
    timesteps_planned: int | None
    """`len(scheduler.timesteps)` after `set_timesteps(num_inference_steps)` on a copy of the scheduler; can differ
    from `num_inference_steps` (PNDM: one more). `None` when the dry run was not possible (see `timesteps_note`)."""
    timesteps_note: str | None
    """Why `timesteps_planned` is unknown, when it is."""
    guidance_scale: float | None
    """Effective classifier-free guidance scale (`None` when the pipeline has none)."""
    height: int | None
    """Requested image/video height in pixels (`None`: the pipeline derives it from the model config)."""
    width: int | None
    """Requested image/video width in pixels (`None`: the pipeline derives it from the model config)."""
    num_frames: int | None
    """Requested video frames, for video pipelines."""
    duration_s: float | None
    """Requested audio duration in seconds (`audio_length_in_s` / `audio_end_in_s` / `duration`), for audio pipelines."""
    sample_size: int | tuple[int, ...] | None
    """`sample_size` of the denoiser config (pixels for pixel-space models, latent cells otherwise)."""
    seed: int
    """Seed of the `torch.Generator` passed as `generator`, and of `torch.manual_seed`."""
    dtype: str
    """Parameter dtype of the denoiser (`unet` / `transformer`) as loaded."""
    device: str
    """Device the pipeline runs on."""
    overrides: dict[str, Any]
    """`[generation]` exactly as requested."""
    call_arguments: dict[str, Any]
    """Every argument of the call: overrides, then the signature's defaults; objects genrun supplies are described in words."""
    step_observation: StepObservation
    """How steps are counted: the pipeline's `callback_on_step_end`, or its progress bar (pipelines without a callback)."""
