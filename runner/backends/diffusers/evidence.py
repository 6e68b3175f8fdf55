"""What the `diffusers` backend declares: its call config (`pipeline-call.before-call.json`) and one stop-evidence model
per reason, each with the call's steps (`DiffusionSteps`, which the `diffusion_steps` evidence kind reads).

genrun finds this declaration through the `genrun.evidence` entry points (readers resolve its models by the names
`backend.json` records); reading a snapshot never imports torch or diffusers.
"""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Literal

from genrun.backends import CallConfigRecord, DiffusionSteps, EvidenceDeclaration, FailedWithMessage, Interrupted, StopEvidence

CALL_CONFIG = "pipeline-call.before-call.json"
"""The call config's file: the pipeline call exactly as genrun is about to make it."""

StepObservation = Literal["callback_on_step_end", "progress_bar"]
StepsSource = Literal["request", "pipeline_default"]


class PipelineCallBeforeCall(CallConfigRecord):
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

    diff_section: ClassVar[str] = "pipeline_call"
    title: ClassVar[str | None] = "Pipeline call (as made)"
    shown_fields: ClassVar[tuple[str, ...] | None] = (
        "pipeline_class", "scheduler_class", "num_inference_steps", "num_inference_steps_source", "timesteps_planned",
        "guidance_scale", "height", "width", "num_frames", "duration_s", "seed", "step_observation")
    call_noun: ClassVar[str] = "the pipeline call"
    request_fields: ClassVar[Mapping[str, str]] = MappingProxyType({"overrides": "overrides", "call": "call_arguments"})

    def request_problems(self, generation: Mapping[str, Any]) -> list[str]:
        """A requested `num_inference_steps` is the one the call records, set by the request."""
        steps = generation.get("num_inference_steps")
        if steps is not None and (self.num_inference_steps != steps or self.num_inference_steps_source != "request"):
            return [f"num_inference_steps {self.num_inference_steps} (from {self.num_inference_steps_source}) != the request's {steps}"]
        return []

    def request_evidence(self) -> dict[str, Any]:
        """The overrides and the step count planned."""
        return {"overrides": self.overrides, "num_inference_steps": self.num_inference_steps,
                "num_inference_steps_source": self.num_inference_steps_source, "timesteps_planned": self.timesteps_planned}

    def request_summary(self) -> str:
        """`DDIMPipeline: num_inference_steps=4 (request), 4 timesteps planned`."""
        return (f"{self.pipeline_class}: num_inference_steps={self.num_inference_steps} ({self.num_inference_steps_source}), "
                f"{self.timesteps_planned} timesteps planned")

    def planned_units(self) -> int | None:
        """The scheduler's timesteps after `set_timesteps` (the steps the denoising loop will run)."""
        return self.timesteps_planned


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
    call_config_name=CALL_CONFIG,
    call_config_model=PipelineCallBeforeCall,
)
"""Diffusion pipelines: the pipeline call as made, steps done of steps planned (frozen as `backend.json` at plan time)."""
