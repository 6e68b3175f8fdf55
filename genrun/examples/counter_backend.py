"""The complete example of a genrun backend: a deterministic "counter" that needs no torch. Read it with `genrun.backends`.

It imports nothing from genrun but the public plugin module `genrun.backends` (a test parses this
file to hold it to that), as a third party's backend must. genrun does not register it: a
distribution that wants it declares it, as genrun's tests do::

    [project.entry-points."genrun.backends"]
    counter = "genrun.examples.counter_backend:create_backend"

It declares its own evidence: its call-config artifact `counter-call.json` (`CounterCall`) and one
stop-evidence model per reason it uses. The "model" is a directory with a `config.json` `{"start": N}`; a run
counts `[generation] steps` values from N, one recorder step each, and writes them to
`outputs/count.txt`. `[generation] fail_at = K` raises after K values (a failure of the model).
"""

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from genrun.backends import (
    BackendOutcome,
    EvidenceDeclaration,
    ExecutionContext,
    Failed,
    GenerationEnd,
    Interrupted,
    LoadContext,
    LoadedModel,
    PlanContext,
    Request,
    RequestError,
    SequenceStop,
    StopEvidence,
    TokenBudget,
    exception_info,
    generation_timings,
    refuse_generation,
    unit_budget,
    unknown_key_message,
)

GENERATION_KEYS = ("steps", "fail_at")
DEFAULT_STEPS = 3
CALL_CONFIG = "counter-call.json"


class CounterCall(BaseModel):
    """`counter-call.json`: the count as it was about to run."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    start: int
    """The first value (the model's `config.json`)."""
    steps: int
    """Values to count."""
    steps_source: Literal["request", "default"]
    """Who set `steps`."""
    fail_at: int | None
    """Raise after this many values (`None`: never)."""


class _Counted(StopEvidence):
    """Shared by every reason: how far the count got."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    counted: int
    """Values counted."""
    planned: int
    """Values the call asked for."""
    last_value: int | None
    """The last value counted (`None` when none was)."""


class CountedAll(_Counted):
    """`completed`: every planned value was counted."""

    reason: Literal["completed"] = "completed"


class CountInterrupted(Interrupted, _Counted):
    """`interrupted`: a signal stopped the count."""


class CountFailed(Failed, _Counted):
    """`exception`: counting raised (the traceback is in the record's `exception`)."""


class CounterBackend:
    """`[model] backend = "counter"`."""

    name = "counter"
    evidence = EvidenceDeclaration(
        kinds=("call_config", "stop_records"),
        stop_evidence=(CountedAll, CountInterrupted, CountFailed),
        call_config_name=CALL_CONFIG,
        call_config_model=CounterCall,
    )

    def validate_request(self, request: Request, model_dir: Path, context: PlanContext) -> None:
        """Only `steps` (a positive integer) and `fail_at`; `[input]` is optional."""
        refuse_generation([unknown_key_message(("generation",), k, list(GENERATION_KEYS)) for k in request.generation if k not in GENERATION_KEYS])
        steps = request.generation.get("steps", DEFAULT_STEPS)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise RequestError(f"[generation] steps = {steps!r} must be an integer of at least 1")

    def prepare_inputs(self, request: Request, processor: Any) -> dict[str, Any]:
        """The prompt, kept as a label."""
        return {"label": request.input.prompt or ""}

    def estimate_budget(self, request: Request, model_dir: Path, weight_bytes: int, force: bool, context: PlanContext) -> TokenBudget:
        """Steps are the units; the "weights" are the config file."""
        return unit_budget(request, unit="step", units=_steps(request), weight_bytes=weight_bytes, force=force, units_key="steps")

    def progress_unit(self, request: Request) -> tuple[str, int]:
        """One recorder step per counted value."""
        return "step", 1

    def load(self, ctx: LoadContext) -> LoadedModel:
        """Read `config.json`."""
        started = time.monotonic()
        start = json.loads((ctx.model_dir / "config.json").read_text())["start"]
        spec = ctx.request.model
        return LoadedModel(backend=self.name, model_digest=ctx.model.digest, dtype=spec.dtype, device=ctx.device, loader=spec.loader,
                           model=int(start), processor=None, load_s=time.monotonic() - started, release=_release_logger(int(start)))

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
        ctx, steps, fail_at = self._ctx, _steps(self._ctx.request), self._ctx.request.generation.get("fail_at")
        call = CounterCall(start=loaded.model, steps=steps, steps_source="request" if "steps" in ctx.request.generation else "default",
                           fail_at=fail_at)
        ctx.snapshot.write(CALL_CONFIG, call)
        ctx.recorder.start(steps, 1)
        self.started = time.monotonic()
        for _ in range(steps):
            if fail_at is not None and len(self.values) >= fail_at:
                raise ArithmeticError(f"the counter was told to fail after {fail_at} values")
            self.values.append(loaded.model + len(self.values))
            ctx.recorder.step()

    def finish(self, end: GenerationEnd) -> BackendOutcome:
        ctx = self._ctx
        ctx.outputs_dir.mkdir(exist_ok=True)
        ctx.snapshot.write_bytes("outputs/count.txt", ("".join(f"{v} " for v in self.values).rstrip() + ("\n" if self.values else "")).encode())
        evidence = _evidence(end, self.values, _steps(ctx.request))
        stop = SequenceStop(index=0, call_index=0, reason=evidence.reason, generated=len(self.values),
                            exception=exception_info(end.failure) if end.failure else None, evidence=evidence)
        first_unit_s, decode_s = generation_timings(ctx.recorder, self.started, None)
        return BackendOutcome(unit="step", generated=len(self.values), generated_tokens=0, first_unit_s=first_unit_s, decode_s=decode_s,
                              stops=(stop,), outputs=("count.txt",))


def _steps(request: Request) -> int:
    return request.generation.get("steps", DEFAULT_STEPS)


def _evidence(end: GenerationEnd, values: list[int], steps: int) -> CountedAll | CountInterrupted | CountFailed:
    """The model of the reason `end` means, with how far the count got."""
    counted, last_value = len(values), values[-1] if values else None
    if end.signal is not None:
        return CountInterrupted(signal=end.signal, counted=counted, planned=steps, last_value=last_value)
    if end.failure is not None:
        return CountFailed(raised=type(end.failure).__name__, counted=counted, planned=steps, last_value=last_value)
    return CountedAll(counted=counted, planned=steps, last_value=last_value)


def create_backend() -> CounterBackend:
    """The factory an entry point names: `counter = "genrun.examples.counter_backend:create_backend"`."""
    return CounterBackend()


def _release_logger(start: int) -> Callable[[], None] | None:
    """`LoadedModel.release`: nothing to free here; with `COUNTER_RELEASE_LOG` set it appends `released <start> <pid>` there
    (tests see a sweep worker free its kept model)."""
    log = os.environ.get("COUNTER_RELEASE_LOG")
    if not log:
        return None

    def release() -> None:
        with open(log, "a") as f:
            f.write(f"released {start} {os.getpid()}\n")

    return release
