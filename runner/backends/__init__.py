"""The backend protocol: every decision that depends on the model family lives behind it.

genrun's core (plan, execute, the progress recorder) never compares backend names. It asks the
backend named by `[model] backend`, found through the `genrun.backends` entry-point group (a
third party adds one by installing a distribution that declares
`[project.entry-points."genrun.backends"] NAME = "module:factory"`; the factory takes no argument
and returns an object satisfying `Backend`).

At plan time a backend validates the request (`validate_request`: generation keys, whether
`[input]` is required) and estimates the budget (`estimate_budget`); both receive the plan's
`PlanContext` (`genrun.runner.plan_context`), which caches reads shared by a sweep's items.

At execution the core owns the run template (`genrun.runner.run_template`); a backend supplies its steps:

    run = backend.start(ctx)                  # the run's state; cheap: loads and writes nothing
    loaded = preloaded or backend.load(ctx)   # raises on failure
    run.generate(loaded)                      # may raise anything, `RunInterrupted` included
    interrupts.disarm()                       # the core, as soon as generation (or loading) returned or raised
    outcome = run.finish(end)                 # `GenerationEnd`: returned, raised, or a signal
    # the core: terminal progress event, determinism, generation-stop.json, result.json, seal

- Load and generate run inside the signal gate: the first SIGINT/SIGTERM raises `RunInterrupted`
  where it lands. The core classifies what ended the run (`GenerationEnd`): returned, failed (any
  exception) or interrupted (the signal's name).
- `generate(loaded)` emits `ctx.recorder.start(...)`, writes its call-config artifact
  (named in its `evidence` declaration) before the first unit and calls `ctx.recorder.step()` once per
  generated unit (the recorder writes `first_token` and the periodic `progress` records itself).
  It may hold a signal (`interrupts.deferred`) to stop at a clean point, e.g. a pipeline's
  interrupt flag, and let it raise when the call returns.
- `finish(end)` is called exactly once, disarmed: after `generate` returned or raised, and also
  when loading failed or was interrupted (then `generate` was never called, and the run writes
  the evidence of an empty run, e.g. empty id files). It writes the backend's own artifacts (token
  ids, `outputs/...`) through `ctx.snapshot`, partial ones too, and returns a `BackendOutcome`
  with stop records that agree with `end`.
- A backend never catches `BaseException` to classify a run and never calls `disarm()`: the core
  does both, once, for every backend. An exception escaping `start` or `finish` is recorded as a
  failure (without stop records) and the snapshot is still sealed.

**A late signal** (one that arrives after generation ended: while `finish` saves ids and outputs,
or while the core writes the evidence and seals) is counted and noted in `result.json`, never acted
on: the status is what generation ended with. The rule is the same for every backend.

Analysis never imports a backend: `genrun plan` freezes the backend's evidence declaration (`evidence`)
as `backend.json`, and analysis picks its checks by the evidence kinds recorded there.
"""

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from genrun.schemas import BackendDeclaration, CodeIdentity, EvidenceDeclaration, ExceptionInfo, ModelIdentity, Request, SequenceStop, TokenBudget
from genrun.schemas.progress import Unit
from genrun.snapshot_dir import SnapshotDir

from ..errors import RequestError
from ..interrupts import RunInterrupted, signal_of
from ..outputs_dir import OutputsDir
from ..plan_context import PlanContext
from ..recorder import ProgressRecorder
from ._extras import install_line, missing_extra_requirements

ENTRY_POINT_GROUP = "genrun.backends"
"""Distributions register backends here: `NAME = "module:factory"`, `factory() -> Backend`."""

__all__ = [
    "ENTRY_POINT_GROUP", "Backend", "BackendOutcome", "ExecutionContext", "GenerationEnd", "LoadContext", "LoadedModel", "Run",
    "RunInterrupted",
    "declaration_of", "exception_info", "generation_timings", "get_backend", "installed_backends", "refuse_generation",
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

    snapshot: SnapshotDir
    """The snapshot being executed, writable and held open by the core from its first execution file to the seal: the one
    object every artifact of the run is written through (`ctx.snapshot.write(name, model)` writes one atomically), relative
    to the directory it opened, even if the snapshot's path is renamed or replaced meanwhile."""
    recorder: ProgressRecorder
    """The `progress.ndjson` writer (also drives the live bar)."""
    planned_units: int | None
    """Units the pre-flight budget allows (`token-budget.json` `requested_units`)."""
    outputs: OutputsDir
    """`outputs/`, created and held open by the core for the whole run."""

    @property
    def snapshot_dir(self) -> Path:
        """The snapshot's path (for messages and names; write through `snapshot`, which follows the directory itself)."""
        return self.snapshot.path

    @property
    def outputs_dir(self) -> Path:
        """`<snapshot>/outputs/`, reached through the descriptor the core holds (a link planted at `outputs` meanwhile is
        never written through)."""
        return self.outputs.path


@dataclass(frozen=True)
class GenerationEnd:
    """What ended generation, as the core classified it; `Run.finish` receives it."""

    exception: BaseException | None = None
    """What `generate` raised (`RunInterrupted` when a signal stopped it); `None` when it returned."""
    signal: str | None = None
    """`SIGINT`/`SIGTERM` when a signal stopped generation."""

    @classmethod
    def raised(cls, exc: BaseException) -> "GenerationEnd":
        """Classify what escaped generation: genrun's signal handler, a bare KeyboardInterrupt (no handler
        installed: not the main thread) or a failure of the model or of user code."""
        return cls(exception=exc, signal=signal_of(exc))

    @property
    def returned(self) -> bool:
        """Generation returned normally."""
        return self.exception is None

    @property
    def failure(self) -> BaseException | None:
        """The exception that failed the run (`None` when it returned or a signal stopped it)."""
        return self.exception if self.signal is None else None


@dataclass(frozen=True)
class BackendOutcome:
    """What `Run.finish` reports; the core adds how generation ended, the load time and its notes, and writes
    `result.json` and `generation-stop.json`."""

    unit: Unit
    """What `generated` counts."""
    generated: int
    """Units over all rows."""
    generated_tokens: int
    """Tokens over all rows (equals `generated` for token units; 0 for diffusion)."""
    first_unit_s: float | None
    """Seconds from the start of generation to the first unit."""
    decode_s: float | None
    """Seconds from the first unit to the end of generation."""
    stops: tuple[SequenceStop, ...]
    """One stop record per row (of every outermost generate call), agreeing with the `GenerationEnd`."""
    outputs: tuple[str, ...] = ()
    """Files written under `outputs/`, relative to it."""
    produced_seconds: float | None = None
    """Frame units: produced duration of the longest row."""
    notes: tuple[str, ...] = field(default=())
    """Human-readable remarks for the summary (e.g. nested generate calls seen)."""
    rows: int | None = None
    """Rows decoded side by side, where stop records are not one per row (MusicGen: one per codebook of each batch item);
    `None`: the most stop records of one call."""
    failure: BaseException | None = None
    """An exception `finish` met writing evidence it could not write (e.g. an output file): the run is recorded
    as failed with it, unless generation itself already failed or was interrupted."""


@runtime_checkable
class Run(Protocol):
    """One execution of one planned snapshot, made by `Backend.start`; the core calls `generate` at most once (not when
    loading failed), then `finish` once."""

    def generate(self, loaded: "LoadedModel") -> None:
        """With the model `loaded` (by `Backend.load` for this run, or reused by a sweep worker): prepare the inputs,
        write the call-config artifact, generate with one `ctx.recorder.step()` per unit. May raise anything
        (`RunInterrupted` included); the core classifies it."""
        ...

    def finish(self, end: GenerationEnd) -> BackendOutcome:
        """Called once the run is over (signals are only counted by then), also when loading failed and `generate`
        never ran: write ids and outputs, partial ones too, and return the outcome with stop records that agree
        with `end`."""
        ...


@dataclass(frozen=True)
class LoadedModel:
    """A model loaded by `Backend.load`, reusable by `Run.generate` for other snapshots of the same frozen model."""

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
    release: Callable[[], None] | None = field(default=None, compare=False)
    """Frees what the load holds beyond Python objects (vLLM: its engine-core process), `None` where dropping the object
    is enough. A run that loaded the model itself calls it once the snapshot is sealed (stopping an engine is neither
    the run's time nor its risk); a sweep worker calls it when it drops the model and before it exits: a worker process
    ends through `multiprocessing`, which waits for the worker's own child processes before the libraries' exit hooks
    could stop them."""

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

    evidence: EvidenceDeclaration
    """What it writes and analysis may check: the call-config artifact it writes before the first unit (file name and
    model), its stop-evidence models, its evidence kinds (frozen as `backend.json` at plan time)."""

    def validate_request(self, request: Request, model_dir: Path, context: PlanContext) -> None:
        """Refuse (raise `RequestError`, exit 2) what this backend cannot run: unknown or mistyped
        `[generation]` keys, a missing `[input]` it needs. Called at plan time, before any hashing;
        reads of the checkpoint go through `context.cached` (one context per plan, one per sweep plan)."""
        ...

    def prepare_inputs(self, request: Request, processor: Any) -> Any:
        """The model inputs `[input]` becomes (tokenised prompts, call keywords); the same at plan and at execution."""
        ...

    def estimate_budget(self, request: Request, model_dir: Path, weight_bytes: int, force: bool, context: PlanContext) -> TokenBudget:
        """The pre-flight `token-budget.json` (with its refusals; `force` records them instead of refusing); `context` as
        for `validate_request`."""
        ...

    def progress_unit(self, request: Request) -> tuple[Unit, int]:
        """What `progress.ndjson` counts and how many recorder steps make one unit."""
        ...

    def load(self, ctx: LoadContext) -> LoadedModel:
        """Load the frozen model onto `ctx.device` (offline); raises on failure."""
        ...

    def start(self, ctx: "ExecutionContext") -> Run:
        """The run of this snapshot, made before its model is loaded: holds the run's state, loads and writes nothing."""
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
    """Backend name -> entry point, from every installed distribution's `genrun.backends` group.

    Two distributions registering one name are refused (RequestError naming both): which one a request would get must
    never depend on the order distributions happen to be found in."""
    found: dict[str, EntryPoint] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        first = found.setdefault(entry.name, entry)
        if first is not entry:
            raise RequestError(f"two installed distributions register the backend {entry.name!r} in the {ENTRY_POINT_GROUP!r} "
                               f"entry-point group: {_provider(first)} and {_provider(entry)}; uninstall one, or rename its entry point")
    return found


def _provider(entry: EntryPoint) -> str:
    """`genrun-counter 0.1 (counter:create_backend)`: the distribution behind an entry point, and what it points at."""
    dist = entry.dist
    return f"{dist.name} {dist.version} ({entry.value})" if dist is not None else repr(entry.value)


def get_backend(name: str) -> Backend:
    """The backend registered as `name`; an unknown name is a RequestError (exit 2) naming the installed ones."""
    installed = installed_backends()
    entry = installed.get(name)
    if entry is None:
        raise RequestError(
            f"[model] backend = {name!r} is not an installed backend; {_inventory(installed)}. "
            f"A backend is added by a distribution declaring it in the {ENTRY_POINT_GROUP!r} entry-point group"
        )
    missing = missing_extra_requirements(entry)
    if missing:
        raise RequestError(f"[model] backend = {name!r} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
                           f"not installed: {install_line(entry)}")
    try:
        backend = entry.load()()
    except ModuleNotFoundError as exc:
        if not entry.extras:
            raise RequestError(f"backend {name!r} (entry point {entry.value!r}) cannot be loaded: {type(exc).__name__}: {exc}") from exc
        raise RequestError(f"[model] backend = {name!r} cannot be loaded ({exc}): {install_line(entry)}") from exc
    except Exception as exc:  # a broken third-party install: say which entry point, refuse the request
        raise RequestError(f"backend {name!r} (entry point {entry.value!r}) cannot be loaded: {type(exc).__name__}: {exc}") from exc
    absent = sorted(member for member in _BACKEND_MEMBERS if not hasattr(backend, member))
    if absent or not isinstance(backend, Backend) or backend.name != name:
        lacking = f": it lacks {', '.join(absent)} (see genrun.backends)" if absent else ""
        raise RequestError(f"backend entry point {entry.name} = {entry.value!r} does not provide a genrun Backend named {name!r}{lacking}")
    return backend


def _inventory(installed: dict[str, EntryPoint]) -> str:
    """`available: loop, transformers; known, not installed: vllm (pip install ...)`: only what can run here is available."""
    if not installed:
        return "available: none (is genrun installed, e.g. `pip install -e .`?)"
    missing = {name: _not_installed(entry) for name, entry in sorted(installed.items())}
    available = ", ".join(name for name, why in missing.items() if why is None) or "none"
    absent = "; ".join(f"{name} ({why})" for name, why in missing.items() if why is not None)
    return f"available: {available}" + (f"; known, not installed: {absent}" if absent else "")


def _not_installed(entry: EntryPoint) -> str | None:
    """What a backend lacks here, as the line that installs it; `None` when it can run. A backend's declared extras decide
    without importing it (transformers' would import torch); one without extras is asked (an optional `not_installed()`:
    vLLM comes from one of two extras, so its entry point cannot name one)."""
    if entry.extras:
        return install_line(entry) if missing_extra_requirements(entry) else None
    try:
        backend = entry.load()()
    except Exception as exc:  # a broken third-party install: not available, and why
        return f"cannot be loaded: {type(exc).__name__}: {exc}"
    check = getattr(backend, "not_installed", None)
    return check() if callable(check) else None


_BACKEND_MEMBERS = frozenset(Backend.__annotations__) | {n for n in vars(Backend) if not n.startswith("_")}
"""What a backend must have: the protocol's attributes and methods (named when one is missing)."""


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


def generation_timings(recorder: ProgressRecorder, started: float | None, ended: float | None) -> tuple[float | None, float | None]:
    """`(first_unit_s, decode_s)` from when generation started and ended (`time.monotonic()`; `ended=None`: now)
    and when the recorder counted the first unit; `(None, None)` when no unit was counted."""
    first_unit_at = recorder.first_unit_at
    if first_unit_at is None or started is None:
        return None, None
    return first_unit_at - started, (ended if ended is not None else time.monotonic()) - first_unit_at


def refuse_undeclared_tables(request: Request, backend: "Backend") -> None:
    """Refuse (exit 2) a top-level request table that neither genrun nor the chosen backend owns, with a did-you-mean.

    A backend owns tables by listing them in its optional `request_tables` attribute (e.g. `("engine",)`); it validates
    their content itself in `validate_request`. The message is the one an unknown key gets (a misspelt `[progres]`
    reads `unknown key 'progres' at the top level; did you mean 'progress'?`)."""
    from ..request_loading import unknown_key_message

    declared = tuple(getattr(backend, "request_tables", ()))
    unknown = sorted(set(request.backend_tables) - set(declared))
    if not unknown:
        return
    valid = sorted({*Request.model_fields, *declared} - {"backend_tables"})
    owned = ", ".join(f"[{t}]" for t in declared) or "no tables"
    problems = [unknown_key_message((), table, valid) for table in unknown]
    raise RequestError("; ".join(problems) + f" (backend {backend.name!r} owns {owned})")
