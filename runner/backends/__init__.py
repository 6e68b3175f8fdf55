"""The backend protocol: every decision that depends on the model family lives behind it.

genrun's core (plan, execute, the progress recorder) never compares backend names. It asks the
backend named by `[model] backend`, found through the `genrun.backends` entry-point group (a
third party adds one by installing a distribution that declares
`[project.entry-points."genrun.backends"] NAME = "module:factory"`; the factory takes no argument
and returns an object satisfying `Backend`).

At plan time a backend validates the request (`validate_request`: generation keys, whether
`[input]` is required) and estimates the budget (`estimate_budget`). At execution,
`execute_snapshot` verifies the frozen plan, installs the signal handlers, opens the progress
recorder at the backend's `progress_unit`, calls `backend.run(ctx, loaded)` once, then writes
`generation-stop.json`, `result.json`, the terminal progress event, and seals.

`run(ctx, loaded)`:

- with `loaded=None`, loads through `self.load(ctx)` inside its own failure handling (a load
  failure is recorded like any failure of the model: a sealed, failed snapshot); with a
  `LoadedModel` (a sweep worker loading once for many snapshots) it skips loading;
- emits `ctx.recorder.start(...)`, then calls `ctx.recorder.step()` once per generated unit
  (the recorder writes `first_token` and the periodic `progress` records itself);
- writes its call-config artifact (`call_config_artifact`) before the first unit;
- once generation is over (returned, raised or interrupted) calls `genrun.runner.interrupts.disarm()`,
  so a later signal is only counted and cannot cut the evidence short, then writes its own
  artifacts (token ids, `outputs/...`) under `ctx.snapshot_dir`, partial ones too;
- **never raises for a failure of the model or of user code**: it catches `BaseException`
  (including `RunInterrupted`, raised by genrun's SIGINT/SIGTERM handlers) and returns it in
  `BackendOutcome.exception` / `BackendOutcome.signal` with per-row stop records that say
  `exception` / `interrupted`. Whatever escapes `run` is treated as a genrun bug: the run is
  recorded as failed and the snapshot is still sealed.

Analysis never imports a backend: `genrun plan` freezes the backend's evidence declaration (`evidence`)
as `backend.json`, and analysis picks its checks by the evidence kinds recorded there.
"""

import traceback
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from genrun.schemas import BackendDeclaration, CodeIdentity, EvidenceDeclaration, ExceptionInfo, ModelIdentity, Request, SequenceStop, TokenBudget
from genrun.schemas.progress import Unit

from ..errors import RequestError
from ..interrupts import RunInterrupted
from ..recorder import ProgressRecorder

ENTRY_POINT_GROUP = "genrun.backends"
"""Distributions register backends here: `NAME = "module:factory"`, `factory() -> Backend`."""

__all__ = [
    "ENTRY_POINT_GROUP", "Backend", "BackendOutcome", "ExecutionContext", "LoadContext", "LoadedModel", "RunInterrupted",
    "declaration_of", "exception_info", "get_backend", "installed_backends", "refuse_generation",
]


@dataclass(frozen=True, kw_only=True)
class LoadContext:
    """What loading a planned snapshot's model needs (nothing is written)."""

    request: Request
    """The frozen, normalised request (`request.json`)."""
    model: ModelIdentity
    """The frozen `model.json`."""
    code: CodeIdentity
    """The frozen `code.json` (entry-point root, remote code)."""
    device: str
    """Resolved device: `cpu`, `cuda:0`, ..."""
    import_paths: tuple[Path, ...] = ()
    """Directories searched first for `[entrypoint]` / `[model] loader` modules."""
    frozen_processor_dir: Path | None = None
    """The snapshot's frozen copy of `[model] processor`, `None` when the checkpoint's own processor is used."""

    @property
    def model_dir(self) -> Path:
        """Absolute directory the weights are loaded from (`model.json` `resolved_path`)."""
        return Path(self.model.resolved_path)

    @property
    def processor_dir(self) -> Path:
        """Directory the processor / tokenizer is loaded from: the frozen `[model] processor` copy, else the model directory."""
        return self.frozen_processor_dir or self.model_dir


@dataclass(frozen=True, kw_only=True)
class ExecutionContext(LoadContext):
    """Everything a backend needs to run one planned snapshot."""

    snapshot_dir: Path
    """The snapshot being executed; artifacts go here."""
    recorder: ProgressRecorder
    """The `progress.ndjson` writer (also drives the live bar)."""
    planned_units: int | None
    """Units the pre-flight budget allows (`token-budget.json` `requested_units`)."""

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


@dataclass(frozen=True)
class LoadedModel:
    """A model loaded by `Backend.load`, reusable by `run` for other snapshots of the same frozen model."""

    backend: str
    """Name of the backend that loaded it."""
    model_digest: str
    """`model.json` digest of the weights it was loaded from."""
    dtype: str
    """`[model] dtype` it was loaded at."""
    device: str
    """Resolved device it lives on."""
    loader: str | None
    """`[model] loader` used, if any."""
    model: Any
    """The model or pipeline."""
    processor: Any
    """Tokenizer / processor (`None` where the model family has none)."""
    load_s: float
    """Seconds the load took."""
    processor_digest: str | None = None
    """`model.json` `processor.digest` of the `[model] processor` it was loaded with, `None` for the checkpoint's own."""

    @property
    def reuse_note(self) -> str:
        """The `result.json` note of a run that reused this model instead of loading it."""
        return f"the model was loaded once before this run and reused; load_s ({self.load_s:.3f}) is that load's duration"

    def mismatch(self, backend: str, model: ModelIdentity, request: Request, device: str) -> str | None:
        """Why this model cannot serve a snapshot planned with `model`/`request` on `device` (`None`: it can)."""
        wanted = {"backend": backend, "model_digest": model.digest, "dtype": request.model.dtype, "device": device,
                  "loader": request.model.loader, "processor_digest": model.processor.digest if model.processor is not None else None}
        differ = [f"{key} {getattr(self, key)!r} != planned {value!r}" for key, value in wanted.items() if getattr(self, key) != value]
        return "; ".join(differ) or None


@runtime_checkable
class Backend(Protocol):
    """A model family or engine genrun can plan and run. Every backend-specific decision is a member."""

    name: str
    """The `[model] backend` value it serves (its entry-point name)."""

    call_config_artifact: str
    """The file (a `genrun.schemas.layout` name) it writes before the first unit: the call configuration as made."""

    evidence: EvidenceDeclaration
    """What it writes and analysis may check: call-config and stop-evidence models, evidence kinds (frozen as `backend.json`)."""

    def validate_request(self, request: Request, model_dir: Path) -> None:
        """Refuse (raise `RequestError`, exit 2) what this backend cannot run: unknown or mistyped
        `[generation]` keys, a missing `[input]` it needs. Called at plan time, before any hashing."""
        ...

    def prepare_inputs(self, request: Request, processor: Any) -> Any:
        """The model inputs `[input]` becomes (tokenised prompts, call keywords); the same at plan and at execution."""
        ...

    def estimate_budget(self, request: Request, model_dir: Path, weight_bytes: int, force: bool) -> TokenBudget:
        """The pre-flight `token-budget.json` (with its refusals; `force` records them instead of refusing)."""
        ...

    def progress_unit(self, request: Request) -> tuple[Unit, int]:
        """What `progress.ndjson` counts and how many recorder steps make one unit."""
        ...

    def load(self, ctx: LoadContext) -> LoadedModel:
        """Load the frozen model onto `ctx.device` (offline); raises on failure."""
        ...

    def run(self, ctx: "ExecutionContext", loaded: LoadedModel | None = None) -> BackendOutcome:
        """Generate with instrumentation and write backend artifacts (loading first when `loaded` is None);
        report failures, never raise them."""
        ...


def declaration_of(backend: Backend, request: Request) -> BackendDeclaration:
    """`backend.json` for a snapshot of `request`: the backend's declared evidence, its unit, and the distribution providing it."""
    entry = installed_backends().get(backend.name)
    dist = getattr(entry, "dist", None)
    unit, _ = backend.progress_unit(request)
    return backend.evidence.record(backend=backend.name, unit=unit, distribution=dist.name if dist is not None else None,
                                   distribution_version=dist.version if dist is not None else None)


@cache
def installed_backends() -> dict[str, EntryPoint]:
    """Backend name -> entry point, from every installed distribution's `genrun.backends` group."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def get_backend(name: str) -> Backend:
    """The backend registered as `name`; an unknown name is a RequestError (exit 2) naming the installed ones."""
    installed = installed_backends()
    entry = installed.get(name)
    if entry is None:
        names = ", ".join(sorted(installed)) or "none (is genrun installed, e.g. `pip install -e .`?)"
        raise RequestError(
            f"[model] backend = {name!r} is not an installed backend; installed: {names}. "
            f"A backend is added by a distribution declaring it in the {ENTRY_POINT_GROUP!r} entry-point group"
        )
    try:
        backend = entry.load()()
    except Exception as exc:  # a broken third-party install: say which entry point, refuse the request
        raise RequestError(f"backend {name!r} (entry point {entry.value!r}) cannot be loaded: {type(exc).__name__}: {exc}") from exc
    if not isinstance(backend, Backend) or backend.name != name:
        raise RequestError(f"backend entry point {entry.name} = {entry.value!r} does not provide a genrun Backend named {name!r}")
    return backend


def refuse_generation(problems: list[str]) -> None:
    """Raise one RequestError listing every `[generation]` problem a backend found (nothing when there is none)."""
    if problems:
        suffix = "s" if len(problems) > 1 else ""
        raise RequestError(f"[generation] refused ({len(problems)} problem{suffix}):" + "".join(f"\n  - {p}" for p in problems))


def exception_info(exc: BaseException) -> ExceptionInfo:
    """Qualified type, message and formatted traceback of `exc` (for `generation-stop.json` / `result.json`)."""
    cls = type(exc)
    qualified = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    text = "".join(traceback.format_exception(cls, exc, exc.__traceback__))
    return ExceptionInfo(type=qualified, message=str(exc), traceback=text)
