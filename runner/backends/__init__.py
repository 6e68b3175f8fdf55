"""The interface between `genrun.runner.execute` and a model family (transformers, diffusers, ...).

`execute_snapshot` does everything that is the same for every backend: it verifies the frozen
plan, installs the signal handlers, opens the progress recorder, calls `backend.run(ctx)` once,
then writes `generation-stop.json`, `result.json`, the terminal progress event, and seals.

A backend module `runner/backends/<name>_backend.py` exposes `create_backend() -> Backend`
(registered in `BACKEND_MODULES` under the `[model] backend` name). Its `run(ctx)`:

- loads the model from `ctx.model_dir` onto `ctx.device` (timing it as `load_s`);
- emits `ctx.recorder.start(...)`, then calls `ctx.recorder.step()` once per generated unit
  (the recorder writes `first_token` and the periodic `progress` records itself);
- once generation is over (returned, raised or interrupted) calls `genrun.runner.interrupts.disarm()`,
  so a later signal is only counted and cannot cut the evidence short, then writes its own
  artifacts (token ids, `outputs/...`) under `ctx.snapshot_dir`, partial ones too;
- **never raises for a failure of the model or of user code**: it catches `BaseException`
  (including `RunInterrupted`, raised by genrun's SIGINT/SIGTERM handlers) and returns it in
  `BackendOutcome.exception` / `BackendOutcome.signal` with per-row stop records that say
  `exception` / `interrupted`. Whatever escapes `run` is treated as a genrun bug: the run is
  recorded as failed and the snapshot is still sealed.

Units: `token` and `frame` for causal LMs (a frame is `[units] tokens_per_frame` tokens),
`step` for diffusion pipelines; stop reasons for diffusion are `completed`, `interrupted`,
`exception` (with `steps_planned`).
"""

import importlib
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from genrun.schemas import CodeIdentity, ExceptionInfo, ModelIdentity, Request, SequenceStop
from genrun.schemas.progress import Unit

from ..errors import RequestError
from ..interrupts import RunInterrupted
from ..recorder import ProgressRecorder

BACKEND_MODULES = {
    "transformers": "genrun.runner.backends.transformers_backend",
    "diffusers": "genrun.runner.backends.diffusers_backend",
}
"""`[model] backend` -> module providing `create_backend()`."""

__all__ = ["BACKEND_MODULES", "Backend", "BackendOutcome", "ExecutionContext", "RunInterrupted", "exception_info", "get_backend", "progress_unit"]


@dataclass(frozen=True)
class ExecutionContext:
    """Everything a backend needs to run one planned snapshot."""

    request: Request
    """The frozen, normalised request (`request.json`)."""
    snapshot_dir: Path
    """The snapshot being executed; artifacts go here."""
    model: ModelIdentity
    """The frozen `model.json`."""
    code: CodeIdentity
    """The frozen `code.json` (entry-point root, remote code)."""
    device: str
    """Resolved device: `cpu`, `cuda:0`, ..."""
    recorder: ProgressRecorder
    """The `progress.ndjson` writer (also drives the live bar)."""
    planned_units: int | None
    """Units the pre-flight budget allows (`token-budget.json` `requested_units`)."""
    import_paths: tuple[Path, ...] = ()
    """Directories searched first for `[entrypoint]` / `[model] loader` modules."""

    @property
    def model_dir(self) -> Path:
        """Absolute directory the weights are loaded from (`model.json` `resolved_path`)."""
        return Path(self.model.resolved_path)

    @property
    def outputs_dir(self) -> Path:
        """`<snapshot>/outputs/`."""
        return self.snapshot_dir / "outputs"


@dataclass(frozen=True)
class BackendOutcome:
    """What one backend run produced; `execute` turns it into `result.json` and `generation-stop.json`."""

    unit: Unit
    """What `generated` counts."""
    generated: int
    """Units over all rows."""
    generated_tokens: int
    """Tokens over all rows (equals `generated` for token units; 0 for diffusion)."""
    load_s: float | None
    """Seconds spent loading weights/tokenizer (`None` if loading never finished)."""
    first_unit_s: float | None
    """Seconds from the start of generation to the first unit."""
    decode_s: float | None
    """Seconds from the first unit to the end of generation."""
    stops: tuple[SequenceStop, ...]
    """One stop record per row (of every outermost generate call)."""
    outputs: tuple[str, ...] = ()
    """Files written under `outputs/`, relative to it."""
    exception: ExceptionInfo | None = None
    """The exception that ended the run, if any."""
    signal: str | None = None
    """`SIGINT`/`SIGTERM` when a signal ended the run."""
    produced_seconds: float | None = None
    """Frame units: produced duration of the longest row."""
    notes: tuple[str, ...] = field(default=())
    """Human-readable remarks for the summary (e.g. nested generate calls seen)."""


class Backend(Protocol):
    """A model family genrun can run."""

    name: str
    """The `[model] backend` value it serves."""

    def run(self, ctx: ExecutionContext) -> BackendOutcome:
        """Load, generate with instrumentation, write backend artifacts; report failures, never raise them."""
        ...


def get_backend(name: str) -> Backend:
    """Import `genrun.runner.backends.<name>_backend` and return its backend."""
    module_name = BACKEND_MODULES.get(name)
    if module_name is None:
        raise RequestError(f"[model] backend {name!r} is not supported; use one of {sorted(BACKEND_MODULES)}")
    return importlib.import_module(module_name).create_backend()


def progress_unit(request: Request) -> tuple[Unit, int]:
    """What `progress.ndjson` counts and how many recorder steps make one unit.

    Diffusion counts scheduler steps; causal LMs count tokens, or frames of
    `[units] tokens_per_frame` tokens (the recorder is stepped once per token either way).
    """
    if request.model.backend == "diffusers":
        return "step", 1
    if request.units.name == "frame":
        return "frame", request.units.tokens_per_frame
    return "token", 1


def exception_info(exc: BaseException) -> ExceptionInfo:
    """Qualified type, message and formatted traceback of `exc` (for `generation-stop.json` / `result.json`)."""
    cls = type(exc)
    qualified = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    text = "".join(traceback.format_exception(cls, exc, exc.__traceback__))
    return ExceptionInfo(type=qualified, message=str(exc), traceback=text)
