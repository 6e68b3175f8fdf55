"""Diffusion pipelines through diffusers: load, record the call, count every denoising step, save the outputs.

Steps are observed in one of two ways (notes §6, measured on diffusers 0.42.1):

- pipelines whose `__call__` takes `callback_on_step_end` call it once per scheduler timestep
  (`len(timesteps)`, which can differ from `num_inference_steps`: PNDM runs one more);
  genrun passes its own callback and counts there;
- older pipelines (DDPM, DDIM, DiT, ...) have no callback; their loop runs through
  `self.progress_bar(...)`, so genrun wraps that method on the instance and counts the
  iterations (`for t in progress_bar(timesteps)`) or the `update()` calls (`total=` form).

The progress bar is wrapped either way: its creation, right before the denoising loop, is when
the real number of timesteps is known, and that is when the `start` event is written.

Interruption: with a callback, a SIGINT/SIGTERM is held (`interrupts.deferred`) while the
pipeline runs; the next callback sets the pipeline's `_interrupt` flag, the loop skips the
remaining steps, the VAE still decodes what there is, and the held signal is raised once the
call returns, so the partial output is saved too. Without a callback the signal raises where
it lands (the only way to stop those loops).
"""

import copy
import inspect
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from genrun.schemas import (
    DIFFUSION_EVIDENCE,
    CompletedEvidence,
    DiffusionExceptionEvidence,
    DiffusionInterruptedEvidence,
    DiffusionSteps,
    PipelineCallBeforeCall,
    Request,
    SequenceStop,
    StopEvidence,
    TokenBudget,
    layout,
)
from genrun.schemas.progress import Unit
from genrun.schemas.rendering import jsonable

from .. import interrupts
from .._io import write_model_atomic
from ..errors import RequestError
from ..interrupts import RunInterrupted
from ..recorder import ProgressRecorder
from ..request_loading import unknown_key_message
from . import BackendOutcome, ExecutionContext, LoadContext, LoadedModel, exception_info, refuse_generation
from . import _diffusers_files as files
from ._media import pipeline_sample_rate, save_pipeline_output
from .diffusers_budget import DURATION_KEYS, CallPlan, estimate_diffusers_budget, plan_call
from .entrypoint import resolve_callable, user_import_paths

CALLBACK = "callback_on_step_end"


class StepObserver:
    """Counts denoising steps into the recorder and, with a callback, turns a held signal into the pipeline's interrupt flag."""

    def __init__(self, recorder: ProgressRecorder, *, by_callback: bool, fallback_planned: int | None, rows: int) -> None:
        self._recorder = recorder
        self.by_callback = by_callback
        """Count in `callback_on_step_end` (else in the progress bar)."""
        self._fallback_planned = fallback_planned
        self._rows = rows
        self.steps = 0
        """Denoising steps completed."""
        self.planned: int | None = None
        """Timesteps of the loop, as the pipeline set them up (sum over loops when it runs several)."""
        self.loops = 0
        """Progress bars the pipeline opened (one per denoising loop)."""
        self.started = False
        """The `start` event was written."""
        self.interrupt_flag_set_at: int | None = None
        """Steps done when the pipeline's `_interrupt` flag was set."""

    def begin(self, planned: int | None) -> None:
        """A denoising loop is about to run `planned` timesteps; the first one writes `start`."""
        if self.loops == 0:
            self.planned = planned
        elif planned is not None:
            self.planned = (self.planned or 0) + planned
        self.loops += 1
        self.ensure_started()

    def ensure_started(self) -> None:
        """Write `start` once: at the first loop, or at the first counted step / the end when no loop was seen
        (a pipeline without a progress bar, or a failure before its loop), with the dry-run count."""
        if not self.started:
            self.started = True
            self._recorder.start(self.planned if self.loops else self._fallback_planned, self._rows)

    def count(self, n: int = 1) -> None:
        """`n` steps finished."""
        self.ensure_started()
        self._recorder.step(n)
        self.steps += n

    def on_step_end(self, pipe: Any, step: int, timestep: Any, callback_kwargs: dict[str, Any]) -> dict[str, Any]:
        """`callback_on_step_end(pipe, i, t, kwargs)`: count; on a held signal, ask the loop to skip what remains."""
        self.count()
        signal_name = interrupts.first_signal()
        if signal_name is not None and self.interrupt_flag_set_at is None:
            if not isinstance(getattr(type(pipe), "interrupt", None), property):
                raise RunInterrupted(signal_name)  # this loop never reads the flag: stopping it means raising
            pipe._interrupt = True
            self.interrupt_flag_set_at = self.steps
        return {}

    def wrap_progress_bar(self, pipe: Any) -> None:
        """Shadow `pipe.progress_bar` on the instance: learn the loop length, and count steps when there is no callback."""
        original = pipe.progress_bar
        observer = self

        def progress_bar(iterable: Any = None, total: int | None = None) -> "_ObservedBar":
            bar = original(iterable=iterable, total=total)
            planned = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
            real = getattr(pipe, "_num_timesteps", None)
            if observer.by_callback and isinstance(real, int):
                planned = real  # the callback fires once per timestep; the bar may count scheduler-order updates
            observer.begin(planned)
            return _ObservedBar(bar, None if observer.by_callback else observer)

        pipe.progress_bar = progress_bar


class _ObservedBar:
    """A tqdm bar whose iterations / updates are counted as steps (when `observer` is given)."""

    def __init__(self, inner: Any, observer: StepObserver | None) -> None:
        self._inner = inner
        self._observer = observer

    def __iter__(self) -> Any:
        for item in self._inner:
            yield item
            if self._observer is not None:  # resumed: the loop body for `item` finished
                self._observer.count()

    def __enter__(self) -> "_ObservedBar":
        self._inner.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._inner.__exit__(*exc)

    def update(self, n: int = 1) -> Any:
        result = self._inner.update(n)
        if self._observer is not None:
            self._observer.count(n)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@dataclass
class _RunState:
    """What one run accumulated, however far it got."""

    pipe: Any = None
    load_s: float | None = None
    observer: StepObserver | None = None
    call: PipelineCallBeforeCall | None = None
    started: float | None = None
    ended: float | None = None
    output: Any = None
    returned: bool = False
    exception: BaseException | None = None
    signal: str | None = None
    notes: list[str] = field(default_factory=list)


class DiffusersBackend:
    """`[model] backend = "diffusers"`."""

    name = "diffusers"
    call_config_artifact = layout.PIPELINE_CALL
    evidence = DIFFUSION_EVIDENCE  # what analysis may check (frozen as backend.json at plan time)

    def validate_request(self, request: Request, model_dir: Path) -> None:
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

    def estimate_budget(self, request: Request, model_dir: Path, weight_bytes: int, force: bool) -> TokenBudget:
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

    def run(self, ctx: ExecutionContext, loaded: LoadedModel | None = None) -> BackendOutcome:
        """Call the pipeline with every step observed (loading first when `loaded` is None), save outputs;
        failures, a failed load included, are returned, not raised."""
        state = _RunState()
        try:
            with user_import_paths(ctx.import_paths):
                self._load_and_call(ctx, state, loaded)
        except RunInterrupted as exc:
            state.exception, state.signal = exc, exc.signal_name
        except KeyboardInterrupt as exc:  # only when genrun's handler is not installed (not the main thread)
            state.exception, state.signal = exc, "SIGINT"
        except BaseException as exc:  # the pipeline's or the user's failure is evidence, not a crash
            state.exception = exc
        finally:
            if state.started is not None and state.ended is None:
                state.ended = time.monotonic()
        outcome = None
        try:
            with interrupts.deferred():  # a first signal now must not cost the evidence of a run that already ended
                outcome = self._finish(ctx, state)
        except RunInterrupted as exc:
            if outcome is None:
                raise
            note = f"{exc.signal_name} arrived after the pipeline call ended, while its outputs were being saved"
            outcome = replace(outcome, signal=exc.signal_name, exception=None, notes=(*outcome.notes, note))
        return outcome

    def _load_and_call(self, ctx: ExecutionContext, state: _RunState, loaded: LoadedModel | None) -> None:
        if loaded is None:
            loaded = self.load(ctx)
        else:
            state.notes.append(loaded.reuse_note)
        pipe = state.pipe = loaded.model
        state.load_s = loaded.load_s
        import torch

        torch.manual_seed(ctx.request.seed)
        plan = plan_call(ctx.request, type(pipe))
        by_callback = CALLBACK in plan.defaults
        kwargs = call_kwargs(ctx, plan.defaults, self.prepare_inputs(ctx.request, None))
        timesteps, note = dry_run_timesteps(pipe.scheduler, plan.steps)
        observer = state.observer = StepObserver(ctx.recorder, by_callback=by_callback, fallback_planned=timesteps, rows=plan.batch)
        if by_callback:
            kwargs[CALLBACK] = observer.on_step_end
        observer.wrap_progress_bar(pipe)
        pipe.set_progress_bar_config(disable=True)  # genrun draws its own bar; tqdm would interleave with it on stderr
        state.call = describe_call(ctx, pipe, plan, kwargs, timesteps, note, by_callback)
        with interrupts.deferred():  # complete or absent, never half-written
            write_model_atomic(ctx.snapshot_dir / layout.PIPELINE_CALL, state.call)
        state.started = time.monotonic()
        if by_callback:
            with interrupts.deferred():  # a signal waits for the next step's callback, which sets the interrupt flag
                self._call(pipe, kwargs, state)
        else:
            self._call(pipe, kwargs, state)

    @staticmethod
    def _call(pipe: Any, kwargs: dict[str, Any], state: _RunState) -> None:
        state.output = pipe(**kwargs)
        state.ended = time.monotonic()
        state.returned = True

    def _finish(self, ctx: ExecutionContext, state: _RunState) -> BackendOutcome:
        observer = state.observer
        if observer is not None:  # (a failure while loading writes no `start`, as on the transformers path)
            observer.ensure_started()
            ctx.recorder.sync_steps(observer.steps)
        outputs: tuple[str, ...] = ()
        if state.output is not None:  # also after an interrupt: the partial image is evidence
            ctx.outputs_dir.mkdir(exist_ok=True)
            latents = state.call is not None and state.call.call_arguments.get("output_type") == "latent"
            try:
                outputs = save_pipeline_output(ctx.outputs_dir, state.output, pipeline_sample_rate(state.pipe), latents=latents)
            except Exception as exc:  # outputs that could not be written fail the run, with this exception as its evidence
                state.exception = state.exception or exc
                written = (p for p in ctx.outputs_dir.rglob("*") if p.is_file() and not p.name.startswith("."))
                outputs = tuple(sorted(p.relative_to(ctx.outputs_dir).as_posix() for p in written))
            if state.signal is not None:
                state.notes.append(f"outputs/ holds the image decoded after {observer.steps if observer else 0} steps (interrupted)")
        if state.pipe is not None and getattr(state.pipe, "_interrupt", False) and state.signal is None:
            state.notes.append("the pipeline's interrupt flag was set although no signal arrived")
        return self._outcome(ctx, state, outputs)

    def _outcome(self, ctx: ExecutionContext, state: _RunState, outputs: tuple[str, ...]) -> BackendOutcome:
        observer = state.observer
        steps = observer.steps if observer else 0
        first_unit_at = ctx.recorder.first_unit_at
        first_unit_s = decode_s = None
        if first_unit_at is not None and state.started is not None:
            first_unit_s = first_unit_at - state.started
            decode_s = (state.ended or time.monotonic()) - first_unit_at
        failed = state.exception is not None and state.signal is None
        return BackendOutcome(
            unit="step",
            generated=steps,
            generated_tokens=0,
            load_s=state.load_s,
            first_unit_s=first_unit_s,
            decode_s=decode_s,
            stops=(stop_record(state, ctx.planned_units),),
            outputs=outputs,
            exception=exception_info(state.exception) if failed else None,
            signal=state.signal,
            notes=tuple(state.notes),
        )


def create_backend() -> DiffusersBackend:
    """The `genrun.backends` entry point `diffusers` (pyproject.toml)."""
    return DiffusersBackend()


def load_pipeline(ctx: LoadContext) -> Any:
    """`[model] loader` when given (it may return the pipeline or `(pipeline, anything)`), else
    `DiffusionPipeline.from_pretrained` from the frozen directory, offline, at the request's dtype, on its device."""
    from diffusers import DiffusionPipeline

    spec = ctx.request.model
    if spec.loader is not None:
        loader = resolve_callable(spec.loader, "[model] loader")
        loaded = loader(str(ctx.model_dir), spec.dtype, ctx.device, **spec.loader_kwargs)
        pipe = loaded[0] if isinstance(loaded, tuple) and loaded else loaded
        if not isinstance(pipe, DiffusionPipeline):
            raise TypeError(f"[model] loader {spec.loader!r} returned {type(pipe).__name__}; it must return a diffusers DiffusionPipeline")
        return pipe
    dtype = load_dtype(ctx.model_dir, spec.dtype)
    pipe = DiffusionPipeline.from_pretrained(str(ctx.model_dir), local_files_only=True, **{dtype_keyword(): dtype})
    pipe.to(ctx.device)
    check_loaded_dtype(pipe, spec.dtype)
    return pipe


def load_dtype(model_dir: Path, requested: str) -> Any:
    """The torch dtype for `from_pretrained`; for `auto`, each component's stored dtype (diffusers alone would load float32)."""
    import torch

    if requested != "auto":
        return getattr(torch, requested)
    index = files.read_index(model_dir)
    per_component = {name: files.stored_float_dtype(w) for name, w in files.component_weights(model_dir, index).items()}
    mapping = {name: getattr(torch, dtype) for name, dtype in per_component.items() if dtype is not None}
    mapping["default"] = torch.float32
    return mapping


def dtype_keyword() -> str:
    """`dtype` on diffusers >= 0.42 (where `torch_dtype` is deprecated), `torch_dtype` before."""
    import diffusers

    major, minor = (int(p) for p in diffusers.__version__.split(".")[:2])
    return "dtype" if (major, minor) >= (0, 42) else "torch_dtype"


def check_loaded_dtype(pipe: Any, requested: str) -> None:
    """An explicit dtype must really be what the denoiser holds (an ignored keyword would be a silent change)."""
    if requested == "auto":
        return
    denoiser = _denoiser(pipe)
    actual = str(getattr(denoiser, "dtype", "")).removeprefix("torch.")
    if denoiser is not None and actual != requested:
        raise RuntimeError(f"[model] dtype = {requested!r} but the pipeline's denoiser loaded as {actual}; diffusers ignored the dtype")


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
    denoiser = _denoiser(pipe)
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


def stop_record(state: _RunState, requested_steps: int | None) -> SequenceStop:
    """`completed`, `interrupted` or `exception`, with steps done of steps planned and how they were observed.

    Steps planned, best evidence first: the loop's own length (seen when its progress bar opened),
    the dry run of `set_timesteps`, and when the run ended before either (e.g. a signal while
    loading) the requested `num_inference_steps` from the budget; `steps_planned_source` says which.
    """
    observer = state.observer
    steps = observer.steps if observer else 0
    if observer is not None and observer.loops and observer.planned is not None:
        planned, source = observer.planned, "denoising_loop"
    elif state.call is not None and state.call.timesteps_planned is not None:
        planned, source = state.call.timesteps_planned, "set_timesteps_dry_run"
    else:
        planned, source = requested_steps, "requested_num_inference_steps"
    progress = DiffusionSteps(
        steps_done=steps,
        steps_planned=planned,
        steps_planned_source=source,
        num_inference_steps=state.call.num_inference_steps if state.call else None,
        timesteps_planned_dry_run=state.call.timesteps_planned if state.call else None,
        step_observation=state.call.step_observation if state.call else None,
        denoising_loops=observer.loops if observer else 0,
        output_returned=state.returned,
    )
    info = exception_info(state.exception) if state.signal is None and state.exception is not None else None
    evidence: StopEvidence
    if state.signal is not None:
        flag_step = observer.interrupt_flag_set_at if observer else None
        evidence = DiffusionInterruptedEvidence(signal=state.signal, interrupt_flag_set_at_step=flag_step, steps=progress)
    elif info is not None:
        evidence = DiffusionExceptionEvidence(type=info.type, message=info.message, steps=progress)
    else:
        evidence = CompletedEvidence(steps=progress)
    return SequenceStop(index=0, call_index=0, reason=evidence.reason, generated=steps, exception=info, evidence=evidence)


def _denoiser(pipe: Any) -> Any:
    return next((getattr(pipe, name) for name in files.DENOISER_COMPONENTS if getattr(pipe, name, None) is not None), None)


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
