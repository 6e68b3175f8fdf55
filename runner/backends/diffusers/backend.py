"""Diffusion pipelines through diffusers: load, record the call, count every denoising step, save the outputs.

Steps are counted by `steps.StepObserver` (the step callback, or the pipeline's
progress bar for pipelines without one); loading is `loading`; the stop record is
`stop`.

Interruption: with a callback, a SIGINT/SIGTERM is held (`interrupts.deferred`) while the
pipeline runs; the next callback sets the pipeline's `_interrupt` flag, the loop skips the
remaining steps, the VAE still decodes what there is, and the held signal is raised once the
call returns, so the partial output is saved too. Without a callback the signal raises where
it lands (the only way to stop those loops).
"""

import copy
import inspect
import time
from pathlib import Path
from typing import Any

from genrun.backends import Request, TokenBudget, Unit, jsonable
from genrun.backends import BackendOutcome, ExecutionContext, GenerationEnd, LoadContext, LoadedModel, PlanContext, RequestError, deferred, generation_timings, refuse_generation, save_output_fields, unknown_key_message, user_import_paths

from . import _files as files
from .budget import DIFFUSERS_RUNTIME, DURATION_KEYS, CallPlan, estimate_diffusers_budget, plan_call
from .evidence import CALL_CONFIG, EVIDENCE, PipelineCallBeforeCall
from .loading import denoiser_of, load_pipeline
from .steps import StepObserver
from .stop import stop_record

CALLBACK = "callback_on_step_end"
SAMPLE_RATE_SOURCES = (("vocoder", "sampling_rate"), ("vae", "sampling_rate"), ("unet", "sample_rate"), ("transformer", "sample_rate"))
"""(component, config key) where audio pipelines keep their output sample rate, in lookup order."""


class DiffusersBackend:
    """`[model] backend = "diffusers"`."""

    name = "diffusers"
    runtime = DIFFUSERS_RUNTIME  # devices, determinism, threads and versions as torch sees them
    evidence = EVIDENCE  # what analysis may check (frozen as backend.json at plan time)

    def validate_request(self, request: Request, model_dir: Path, context: PlanContext) -> None:
        """`[generation]` keys must be parameters of the pipeline's `__call__`; `[input]` is optional (unconditional pipelines)."""
        if request.input.media_files():  # nothing here would feed them to the pipeline: refuse rather than ignore
            raise RequestError("[input] audio/images are not passed to diffusers pipelines by genrun (media inputs are "
                               "prepared by the transformers backend); remove them from the request")
        if request.model.processor is not None:  # a pipeline loads its own tokenizers and image processors
            raise RequestError("[model] processor is not used by diffusers pipelines (each loads its own components from the "
                               "model directory); remove it from the request")
        valid = files.pipeline_call_parameters(model_dir)
        refuse_generation([unknown_key_message(("generation",), key, valid) for key in request.generation if key not in valid])

    def prepare_inputs(self, request: Request, processor: Any) -> dict[str, Any]:
        """`prompt` keyword(s) from `[input]` (none for an unconditional pipeline); diffusers has no separate processor."""
        given = request.input
        if given.prompt is not None:
            return {"prompt": given.prompt}
        if given.prompts is not None:
            return {"prompt": list(given.prompts)}
        return {}

    def estimate_budget(self, request: Request, model_dir: Path, weight_bytes: int, force: bool, context: PlanContext) -> TokenBudget:
        """Weights at the run dtype + latents and activations per denoising step."""
        return estimate_diffusers_budget(request, model_dir, weight_bytes, force)

    def progress_unit(self, request: Request) -> tuple[Unit, int]:
        """Scheduler steps, one recorder step each."""
        return "step", 1

    def load(self, ctx: LoadContext) -> LoadedModel:
        """`[model] loader`, else `DiffusionPipeline.from_pretrained`, offline; raises on failure."""
        started = time.monotonic()
        with user_import_paths(ctx.import_paths):
            pipe = load_pipeline(ctx)
        spec = ctx.request.model
        return LoadedModel(backend=self.name, model_digest=ctx.model.digest, dtype=spec.dtype, device=ctx.device, loader=spec.loader,
                           model=pipe, processor=None, load_s=time.monotonic() - started)

    def start(self, ctx: ExecutionContext) -> "DiffusersRun":
        """One pipeline call with every step observed (the core loads the pipeline for it, or a sweep worker reuses one)."""
        return DiffusersRun(ctx, self.prepare_inputs(ctx.request, None))


class DiffusersRun:
    """`generate`: record the call, then call the pipeline with every step observed; `finish`: save what it returned
    (a partial image after an interrupt too) and the stop record."""

    def __init__(self, ctx: ExecutionContext, inputs: dict[str, Any]) -> None:
        self._ctx = ctx
        self.pipe: Any = None
        """The pipeline, once loaded."""
        self._inputs = inputs
        """The `[input]` keywords (`DiffusersBackend.prepare_inputs`)."""
        self.observer: StepObserver | None = None
        self.call: PipelineCallBeforeCall | None = None
        self.started: float | None = None
        self.ended: float | None = None
        self.output: Any = None

    def generate(self, loaded: LoadedModel) -> None:
        """Seed, plan the call's keywords, write `pipeline-call.before-call.json`, call the pipeline."""
        ctx, pipe = self._ctx, loaded.model
        self.pipe = pipe
        with user_import_paths(ctx.import_paths):
            import torch

            torch.manual_seed(ctx.request.seed)
            plan = plan_call(ctx.request, type(pipe))
            by_callback = CALLBACK in plan.defaults
            kwargs = call_kwargs(ctx, plan.defaults, self._inputs)
            timesteps, note = dry_run_timesteps(pipe.scheduler, plan.steps)
            observer = self.observer = StepObserver(ctx.recorder, by_callback=by_callback, fallback_planned=timesteps, rows=plan.batch)
            if by_callback:
                kwargs[CALLBACK] = observer.on_step_end
            observer.wrap_progress_bar(pipe)
            pipe.set_progress_bar_config(disable=True)  # genrun draws its own bar; tqdm would interleave with it on stderr
            self.call = describe_call(ctx, pipe, plan, kwargs, timesteps, note, by_callback)
            with deferred():  # complete or absent, never half-written
                ctx.snapshot.write(CALL_CONFIG, self.call)
            self.started = time.monotonic()
            try:
                if by_callback:
                    with deferred():  # a signal waits for the next step's callback, which sets the interrupt flag
                        self.output = pipe(**kwargs)
                else:
                    self.output = pipe(**kwargs)
            finally:
                self.ended = time.monotonic()

    def finish(self, end: GenerationEnd) -> BackendOutcome:
        """Save the pipeline's output (also after an interrupt: the partial image is evidence) and the stop record;
        an output that cannot be written fails the run with that exception as its evidence."""
        ctx, observer = self._ctx, self.observer
        notes: list[str] = []
        if observer is not None:
            observer.ensure_started()
            ctx.recorder.sync_steps(observer.steps)
        outputs: tuple[str, ...] = ()
        save_failure: Exception | None = None
        if self.output is not None:
            ctx.outputs_dir.mkdir(exist_ok=True)
            latents = self.call is not None and self.call.call_arguments.get("output_type") == "latent"
            try:
                outputs = save_output_fields(ctx.outputs_dir, self.output, pipeline_sample_rate(self.pipe), latents=latents)
            except Exception as exc:  # recorded as the run's failure (below), with the files that were written
                save_failure = exc
                written = (p for p in ctx.outputs_dir.rglob("*") if p.is_file() and not p.name.startswith("."))
                outputs = tuple(sorted(p.relative_to(ctx.outputs_dir).as_posix() for p in written))
            if end.signal is not None:
                notes.append(f"outputs/ holds the image decoded after {observer.steps if observer else 0} steps (interrupted)")
        if getattr(self.pipe, "_interrupt", False) and end.signal is None:
            notes.append("the pipeline's interrupt flag was set although no signal arrived")
        failure = end.failure or save_failure
        stop = stop_record(observer, self.call, signal=end.signal, failure=failure, output_returned=self.output is not None,
                           requested_steps=ctx.planned_units)
        first_unit_s, decode_s = generation_timings(ctx.recorder, self.started, self.ended)
        return BackendOutcome(unit="step", generated=observer.steps if observer else 0, generated_tokens=0, first_unit_s=first_unit_s,
                              decode_s=decode_s, stops=(stop,), outputs=outputs, notes=tuple(notes), failure=save_failure)


def create_backend() -> DiffusersBackend:
    """The `genrun.backends` entry point `diffusers` (pyproject.toml)."""
    return DiffusersBackend()


def call_kwargs(ctx: ExecutionContext, defaults: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """`[generation]` plus what genrun supplies: the prepared `[input]` keywords, a seeded generator, `return_dict`."""
    import torch

    kwargs = {**ctx.request.generation, **inputs}
    if "generator" in defaults:  # a CPU generator gives the same noise on every device
        kwargs["generator"] = torch.Generator(device="cpu").manual_seed(ctx.request.seed)
    if "return_dict" in defaults:
        kwargs["return_dict"] = True
    return kwargs


def dry_run_timesteps(scheduler: Any, steps: int | None) -> tuple[int | None, str | None]:
    """`len(timesteps)` after `set_timesteps(steps)` on a copy of the scheduler (the pipeline's own is untouched)."""
    if steps is None:
        return None, "the pipeline's __call__ takes no num_inference_steps"
    probe = copy.deepcopy(scheduler)
    params = inspect.signature(probe.set_timesteps).parameters
    try:
        probe.set_timesteps(steps, **({"device": "cpu"} if "device" in params else {}))
    except Exception as exc:  # e.g. flow-matching schedulers need `mu` from the pipeline; recorded, not hidden
        return None, f"{type(probe).__name__}.set_timesteps({steps}) needs what only the pipeline computes: {type(exc).__name__}: {exc}"
    return len(probe.timesteps), None


def describe_call(ctx: ExecutionContext, pipe: Any, plan: CallPlan, kwargs: dict[str, Any], timesteps: int | None,
                  note: str | None, by_callback: bool) -> PipelineCallBeforeCall:
    """`pipeline-call.before-call.json` from the loaded pipeline and the exact keyword arguments."""
    effective = {name: kwargs.get(name, default) for name, default in plan.defaults.items()}
    denoiser = denoiser_of(pipe)
    sample_size = getattr(getattr(denoiser, "config", None), "sample_size", None)
    return PipelineCallBeforeCall(
        pipeline_class=type(pipe).__name__,
        components={name: (type(c).__name__ if c is not None else None) for name, c in pipe.components.items()},
        scheduler_class=type(pipe.scheduler).__name__,
        scheduler_config=jsonable(dict(pipe.scheduler.config), repr),
        num_inference_steps=plan.steps,
        num_inference_steps_source=None if plan.steps is None else ("request" if plan.steps_from_request else "pipeline_default"),
        timesteps_planned=timesteps,
        timesteps_note=note,
        guidance_scale=_number(effective.get("guidance_scale")),
        height=_integer(effective.get("height")),
        width=_integer(effective.get("width")),
        num_frames=_integer(effective.get("num_frames")),
        duration_s=next((_number(effective[k]) for k in DURATION_KEYS if _number(effective.get(k)) is not None), None),
        sample_size=tuple(sample_size) if isinstance(sample_size, (list, tuple)) else sample_size,
        seed=ctx.request.seed,
        dtype=str(getattr(denoiser, "dtype", "unknown")).removeprefix("torch."),
        device=str(getattr(pipe, "device", ctx.device)),
        overrides=dict(ctx.request.generation),
        call_arguments={name: _describe(name, value, ctx.request.seed) for name, value in effective.items()},
        step_observation="callback_on_step_end" if by_callback else "progress_bar",
    )


def _describe(name: str, value: Any, seed: int) -> Any:
    """A call argument as JSON: plain values as they are, genrun's objects in words, anything else by repr."""
    if value is inspect.Parameter.empty:
        return "<required, not given>"
    if name == "generator" and value is not None:
        return f"torch.Generator(device='cpu').manual_seed({seed})"
    if name == CALLBACK and value is not None:
        return "genrun step observer (counts each step; sets the interrupt flag on SIGINT/SIGTERM)"
    return jsonable(value, repr)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def pipeline_sample_rate(pipe: Any) -> int | None:
    """The audio sample rate from the pipeline's components (vocoder, VAE, UNet config), `None` when none declares one."""
    for component, key in SAMPLE_RATE_SOURCES:
        config = getattr(getattr(pipe, component, None), "config", None)
        value = getattr(config, key, None) if config is not None else None
        if isinstance(value, int) and value > 0:
            return value
    return None
