"""A third-party backend defined only under tests/: a deterministic "counter" that needs no torch.

It is registered through the same `genrun.backends` entry-point group as the built-ins (the test
writes a `*.dist-info/entry_points.txt` for it), and genrun's core never learns its name. The
"model" is a directory with a `config.json` `{"start": N}`; a run counts `[generation] steps`
steps from N, one recorder step each, and writes what a step-counting backend must: its call
record (`pipeline-call.before-call.json`, the step-unit call-config artifact analysis checks),
one stop record with `steps_planned`, and an output file.
"""

import json
import time
from pathlib import Path
from typing import Any

from genrun.runner._io import write_model_atomic
from genrun.runner.backends import (BackendOutcome, ExecutionContext, GenerationEnd, LoadContext, LoadedModel, exception_info, generation_timings,
                                    refuse_generation)
from genrun.runner.budget import memory_fit, refusals_for, with_refusals
from genrun.runner.errors import RequestError
from genrun.runner.request_loading import unknown_key_message
from genrun.schemas import CompletedEvidence, DiffusionSteps, ExceptionEvidence, InterruptedEvidence, PipelineCallBeforeCall, Request, SequenceStop, TokenBudget, layout

GENERATION_KEYS = ("steps",)
DEFAULT_STEPS = 3


class CounterBackend:
    """`[model] backend = "counter"`."""

    name = "counter"
    call_config_artifact = layout.PIPELINE_CALL

    def validate_request(self, request: Request, model_dir: Path) -> None:
        """Only `steps`, a positive integer; `[input]` is optional."""
        refuse_generation([unknown_key_message(("generation",), k, list(GENERATION_KEYS)) for k in request.generation if k not in GENERATION_KEYS])
        steps = request.generation.get("steps", DEFAULT_STEPS)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise RequestError(f"[generation] steps = {steps!r} must be an integer of at least 1")

    def prepare_inputs(self, request: Request, processor: Any) -> dict[str, Any]:
        """The prompt, kept as a label."""
        return {"label": request.input.prompt or ""}

    def estimate_budget(self, request: Request, model_dir: Path, weight_bytes: int, force: bool) -> TokenBudget:
        """Steps are the units; the "weights" are the config file."""
        memory = memory_fit(request.model.device, request.budget.memory_margin_fraction, weight_bytes)
        draft = TokenBudget(
            units="step", prompt_tokens=None, batch_size=1, requested_units=_steps(request), requested_units_source="request",
            effective_max_length=None, context_limit=None, fits_context=None, kv_bytes_per_token=None, rows_per_request=1,
            kv_bytes_at_budget=None, weight_bytes=weight_bytes, activation_bytes_estimate=0, **memory._asdict(),
            domain=None, refusals=(), forced=False,
        )
        return with_refusals(draft, refusals_for(draft, "steps"), force)

    def progress_unit(self, request: Request) -> tuple[str, int]:
        """One recorder step per counted step."""
        return "step", 1

    def load(self, ctx: LoadContext) -> LoadedModel:
        """Read `config.json`."""
        started = time.monotonic()
        start = json.loads((ctx.model_dir / "config.json").read_text())["start"]
        spec = ctx.request.model
        return LoadedModel(backend=self.name, model_digest=ctx.model.digest, dtype=spec.dtype, device=ctx.device, loader=spec.loader,
                           model=int(start), processor=None, load_s=time.monotonic() - started)

    def start(self, ctx: ExecutionContext) -> "CounterRun":
        """A run counting from the loaded start value."""
        return CounterRun(ctx)


class CounterRun:
    """`generate` counts one recorder step per value; `finish` writes the values and the stop record. Failures and
    signals are the core's to classify: this run only reports what it counted."""

    def __init__(self, ctx: ExecutionContext) -> None:
        self._ctx = ctx
        self.values: list[int] = []
        self.started: float | None = None

    def generate(self, loaded: LoadedModel) -> None:
        ctx, steps = self._ctx, _steps(self._ctx.request)
        write_model_atomic(ctx.snapshot_dir / CounterBackend.call_config_artifact, _call_record(ctx, steps))
        ctx.recorder.start(steps, 1)
        self.started = time.monotonic()
        for _ in range(steps):
            self.values.append(loaded.model + len(self.values))
            ctx.recorder.step()

    def finish(self, end: GenerationEnd) -> BackendOutcome:
        ctx, steps, done = self._ctx, _steps(self._ctx.request), len(self.values)
        ctx.outputs_dir.mkdir(exist_ok=True)
        (ctx.outputs_dir / "count.txt").write_text(" ".join(map(str, self.values)) + "\n" if end.returned else "")
        reason = "completed" if end.returned else "interrupted" if end.signal else "exception"
        stop = SequenceStop(
            index=0, call_index=0, reason=reason, generated=done, last_token_id=None, fired=(), eos_token_ids=(),
            max_new_tokens=None, max_length=None, prompt_length=None, steps_planned=steps,
            exception=exception_info(end.failure) if end.failure else None,
            evidence=_evidence(end, done, steps),
        )
        first_unit_s, decode_s = generation_timings(ctx.recorder, self.started, None)
        return BackendOutcome(unit="step", generated=done, generated_tokens=0, first_unit_s=first_unit_s, decode_s=decode_s,
                              stops=(stop,), outputs=("count.txt",))


def _steps(request: Request) -> int:
    return request.generation.get("steps", DEFAULT_STEPS)


def _call_record(ctx: ExecutionContext, steps: int) -> PipelineCallBeforeCall:
    overrides = dict(ctx.request.generation)
    return PipelineCallBeforeCall(
        pipeline_class="Counter", components={}, scheduler_class="none", scheduler_config={},
        num_inference_steps=steps, num_inference_steps_source="request" if "steps" in overrides else "pipeline_default",
        timesteps_planned=steps, timesteps_note=None, guidance_scale=None, height=None, width=None, num_frames=None,
        duration_s=None, sample_size=None, seed=ctx.request.seed, dtype="none", device=ctx.device,
        overrides=overrides, call_arguments={"steps": steps}, step_observation="progress_bar",
    )


def create_backend() -> CounterBackend:
    """The entry point `counter = "counter_backend:create_backend"`."""
    return CounterBackend()


def _evidence(end: GenerationEnd, done: int, steps: int) -> CompletedEvidence | ExceptionEvidence | InterruptedEvidence:
    """Typed stop evidence (the format's per-reason models): steps done of steps planned."""
    counted = DiffusionSteps(steps_done=done, steps_planned=steps, steps_planned_source="requested_num_inference_steps",
                             num_inference_steps=steps, timesteps_planned_dry_run=None, step_observation="counter",
                             denoising_loops=1, output_returned=end.returned)
    if end.signal is not None:
        return InterruptedEvidence(signal=end.signal, interrupt_flag_set_at_step=None, steps=counted)
    if end.failure is not None:
        return ExceptionEvidence(type=type(end.failure).__name__, message=str(end.failure), steps=counted)
    return CompletedEvidence(steps=counted)
