"""THE list of artifacts: every file (or family of files) a snapshot or a sweep snapshot can hold.

Each entry names the file (or a pattern for a family), the model that reads it, when it is written,
what it means and who writes it. The generated `docs/snapshot-format.md`, the JSON Schema export
(`schemas/json/`) and the MLflow export's upload list are all derived from here, and
tests/test_artifact_registry.py holds every file of real sealed snapshots to it. The file names themselves live in `layout`; this module only
lists them. A backend adds its own artifacts with `with_declared(snapshot_artifacts(), declared, by)`,
never by editing this list. A built-in backend's call config has its place in the list, but its name and model come
from the backend's declaration (`genrun.evidence` entry points), read when the list is first used.

Torch-free and pure: nothing here reads or writes a snapshot.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal, get_args

from pydantic import TypeAdapter

from . import layout
from .budget import TokenBudget
from .evidence import BackendDeclaration, builtin_declarations
from .generation_calls import GenerationCalls
from .generation_config import GenerationConfigBeforeGenerate
from .identity import CodeIdentity, Environment, ModelIdentity
from .inputs import InputFiles, InputPreparation
from .lineage import Determinism, Lineage
from .progress import AnyEvent
from .request import Request
from .result import Result
from .run_log import RunLogLine
from .signoff import Signoff
from .stop import GenerationStop
from .stages import AnyStageEvent, StageIds, Stages
from .sweep import ItemAttempt, SweepFile, SweepPlan, SweepResult, WorkerModel
from .token_ids import GeneratedTokenIds

Form = Literal["json", "ndjson", "safetensors", "sha256sum", "source", "bytes"]
"""How a file is read: `json` (one model), `ndjson` (one model per line), `safetensors` (named int64 tensors),
`sha256sum` (`<sha256>  <path>` lines), `source` (TOML or JSON text, decoded, then validated by the model),
`bytes` (kept exactly as given or produced: media, outputs, signatures, copies)."""

MODEL_FORMS: tuple[Form, ...] = ("json", "ndjson", "source")
"""Forms whose content a model validates; every other form has no model."""

# Who writes a file: a backend's name (as its entry point declares it) or one of these kinds of run.
EVERY_RUN = "every run"
MEDIA_REQUESTS = "media requests"  # `[input] audio` / `images`
PROCESSOR_OVERRIDE = "[model] processor"
RERUN_CHILDREN = "rerun children"  # `genrun rerun`
SWEEP_ITEMS = "sweep items"  # a snapshot run by a sweep worker
SWEEPS = "every sweep"
SIGNOFF = "genrun signoff"

_SOURCE_EXTENSIONS = tuple(layout.REQUEST_SOURCE_FORMATS.values())  # toml, json
PLACEHOLDERS = {"<ext>": "(?:" + "|".join(_SOURCE_EXTENSIONS) + ")", "<i>": "[0-9]+", "*": "[^/]+"}
"""Placeholders a family's name may hold (and what they match); a name ending in `/` is a directory whose every file belongs to it."""

_PLACEHOLDER_EXAMPLE = {"<ext>": _SOURCE_EXTENSIONS[0], "<i>": "1", "*": "x"}
_PLACEHOLDER = re.compile("|".join(re.escape(p) for p in PLACEHOLDERS))


@dataclass(frozen=True)
class ArtifactSpec:
    """One file, or family of files, of a snapshot directory: its name, model, phase, meaning and writers."""

    name: str
    """The relative path, or a pattern for a family: `<ext>`, `<i>`, `*` (see `PLACEHOLDERS`), or a trailing `/` for a directory."""
    phase: layout.Phase
    """When it is written: `plan`, `execute`, `seal` or `sign-off` (of the sweep, for a sweep snapshot's files)."""
    meaning: str
    """What it holds, one or two sentences (shown in the format document)."""
    written_by: tuple[str, ...]
    """Backends (by name) or kinds of run that write it, e.g. `transformers`, `EVERY_RUN`, `MEDIA_REQUESTS`."""
    form: Form = "json"
    """How it is read (see `Form`)."""
    model: Any = None
    """The pydantic model (or tagged union, for event lines) that validates it; `None` for forms without a model."""
    schema: str | None = None
    """Stem of its JSON Schema file (`schemas/json/<schema>.schema.json`); `None` when it has none of its own."""
    transient: bool = False
    """Removed before the seal (never evidence, never exported)."""
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)
    """The relative paths it matches, derived from `name`."""

    def __post_init__(self) -> None:
        if self.phase not in get_args(layout.Phase):
            raise ValueError(f"artifact {self.name!r}: phase {self.phase!r} is not one of {get_args(layout.Phase)}; pick the one it is written in")
        if self.form not in get_args(Form):
            raise ValueError(f"artifact {self.name!r}: form {self.form!r} is not one of {get_args(Form)}")
        if (self.model is None) == (self.form in MODEL_FORMS):
            needs = "needs a model" if self.model is None else "takes no model (set model=None)"
            raise ValueError(f"artifact {self.name!r}: form {self.form!r} {needs}; model-read forms are {MODEL_FORMS}")
        if not self.written_by:
            raise ValueError(f"artifact {self.name!r}: written_by is empty; name the backend or kind of run that writes it, e.g. {EVERY_RUN!r}")
        if not self.name or self.name.startswith("/") or ".." in self.name.split("/"):
            raise ValueError(f"artifact name {self.name!r} must be a relative path inside the snapshot, e.g. 'my-backend-calls.json'")
        object.__setattr__(self, "pattern", _pattern_of(self.name))

    @property
    def is_family(self) -> bool:
        """More than one file can match (a pattern or a directory)."""
        return self.name.endswith("/") or _PLACEHOLDER.search(self.name) is not None

    @property
    def example(self) -> str:
        """One concrete relative path the entry matches (for collision checks and tests)."""
        concrete = _PLACEHOLDER.sub(lambda m: _PLACEHOLDER_EXAMPLE[m.group(0)], self.name)
        return concrete + "x" if concrete.endswith("/") else concrete

    def matches(self, rel: str) -> bool:
        """Whether the relative path `rel` (with `/` separators) is this file or one of this family."""
        return self.pattern.fullmatch(rel) is not None

    @property
    def adapter(self) -> TypeAdapter[Any]:
        """Validates one file (or, for `ndjson`, one line); raises for forms without a model."""
        if self.model is None:
            raise TypeError(f"artifact {self.name!r} ({self.form}) has no model to validate it with")
        return _adapter(self.model)


@cache
def _adapter(model: Any) -> TypeAdapter[Any]:
    return TypeAdapter(model)


def _pattern_of(name: str) -> re.Pattern[str]:
    body = _PLACEHOLDER.sub(lambda m: "\0" + m.group(0) + "\0", name)
    parts = [PLACEHOLDERS[p] if p in PLACEHOLDERS else re.escape(p) for p in body.split("\0")]
    regex = "".join(parts)
    return re.compile(regex + ".+" if name.endswith("/") else regex)


def _json(name: str, phase: layout.Phase, model: Any, written_by: tuple[str, ...], meaning: str) -> ArtifactSpec:
    """A JSON artifact whose schema file is named after it (`request.json` -> `request.schema.json`)."""
    return ArtifactSpec(name, phase, meaning, written_by, "json", model, schema=name.removesuffix(".json"))


_ALL = (EVERY_RUN,)
STAGED_RUNS = "staged runs"  # a backend declaring the `stages` evidence kind (the `loop` backend)
_STAGED = (STAGED_RUNS,)
_TRANSFORMERS = ("transformers",)
_SIGNOFFS = (  # appended to a sealed run or sweep alike, outside its manifest
    ArtifactSpec(f"{layout.SIGNOFFS_DIR}/*.json", "sign-off", "Append-only decisions bound to the plan or snapshot digest.",
                 (SIGNOFF,), "json", Signoff, schema="signoff"),
    ArtifactSpec(f"{layout.SIGNOFFS_DIR}/*.json.sig", "sign-off", "The SSH signature of the record beside it (made with `--key`).",
                 (SIGNOFF,), "bytes"),
)

@dataclass(frozen=True)
class _BuiltInCallConfig:
    """The place of a built-in backend's call config in the list; its file name and model are the backend's declaration."""

    backend: str
    meaning: str

    def spec(self) -> ArtifactSpec:
        declared = builtin_declarations().get(self.backend)
        if declared is None or declared.call_config_name is None:
            raise LookupError(f"genrun's {self.backend!r} evidence declaration is not installed (the genrun.evidence entry points "
                              "of genrun's distribution); reinstall genrun")
        return _json(declared.call_config_name, "execute", declared.call_config_model, (self.backend,), self.meaning)


_SNAPSHOT_ARTIFACTS: tuple[ArtifactSpec | _BuiltInCallConfig, ...] = (
    ArtifactSpec(f"{layout.REQUEST_SOURCE_PREFIX}.<ext>", "plan", "The request bytes exactly as given (`.toml` or `.json`).",
                 _ALL, "source", Request),
    _json(layout.REQUEST, "plan", Request, _ALL, "The validated request, normalised (every default filled in)."),
    _json(layout.ENVIRONMENT, "plan", Environment, _ALL, "Host, accelerator, package versions and the genrun version that planned the run."),
    _json(layout.CODE, "plan", CodeIdentity, _ALL, "sha256 of genrun's own code, the entry point's modules and the model's remote code."),
    _json(layout.MODEL, "plan", ModelIdentity, _ALL, "The resolved model directory and every file's sha256."),
    _json(layout.TOKEN_BUDGET, "plan", TokenBudget, _ALL,
          "What the run may need (units, context, memory) and whether it fits, before loading weights."),
    _json(layout.BACKEND, "plan", BackendDeclaration, _ALL,
          "The backend (name, distribution, version), its unit, the evidence kinds it provides, and its call-config and "
          "stop-evidence models (a third party's with their JSON Schema; absent before format 3: derived from what the snapshot "
          "recorded)."),
    _json(layout.INPUT_FILES, "plan", InputFiles, (MEDIA_REQUESTS,),
          "Each `[input] audio` / `images` file's path, size, sha256 and decoded facts."),
    ArtifactSpec(f"{layout.INPUTS_DIR}/", "plan", "The media files themselves, `<row>-<kind>-<name>` (absent with `[input] copy = false`).",
                 (MEDIA_REQUESTS,), "bytes"),
    ArtifactSpec(f"{layout.PROCESSOR_DIR}/", "plan",
                 "A copy of the `[model] processor` directory, loaded by execute (its sha256s also in `model.json`).",
                 (PROCESSOR_OVERRIDE,), "bytes"),
    _json(layout.LINEAGE, "plan", Lineage, (RERUN_CHILDREN,), "The parent snapshot, the exact request changes and why (frozen with the plan)."),
    ArtifactSpec(layout.FROZEN_MANIFEST, "plan", "sha256sum of every file above, written last at plan time; its sha256 is the plan digest.",
                 _ALL, "sha256sum"),
    ArtifactSpec(layout.DISK_RESERVE, "execute", "Space held while executing so a full disk still leaves room for the evidence; "
                 "removed before the seal (a killed run may leave it).", _ALL, "bytes", transient=True),
    _json(layout.GENERATION_CONFIG, "execute", GenerationConfigBeforeGenerate, _TRANSFORMERS,
          "The config exactly as generate used it, with who set each limit (first outermost call)."),
    ArtifactSpec("generation-config.before-generate.<i>.json", "execute", "The same for each further outermost generate call.",
                 _TRANSFORMERS, "json", GenerationConfigBeforeGenerate),
    _BuiltInCallConfig("diffusers", "The pipeline call as made."),
    _json(layout.INPUT_PREPARATION, "execute", InputPreparation, _TRANSFORMERS,
          "What each row became before generate (prompt ids, audio seconds received, image size, forced decoder tokens, "
          "every truncation), and where the processor was loaded from."),
    ArtifactSpec(layout.PROMPT_TOKEN_IDS, "execute", "The unpadded prompt ids, one int64 tensor `prompt_<i>` per row.",
                 _TRANSFORMERS, "safetensors"),
    ArtifactSpec(layout.PROGRESS, "execute", "Append-only events, one JSON object per line, from the start of generation.",
                 _ALL, "ndjson", AnyEvent, schema="progress-event"),
    ArtifactSpec(layout.TOKEN_IDS, "execute", "The generated ids, one int64 tensor `sequence_<i>` per row.", _TRANSFORMERS, "safetensors"),
    _json(layout.TOKEN_IDS_SUMMARY, "execute", GeneratedTokenIds, _TRANSFORMERS,
          f"Per row: count, last {layout.LAST_IDS_KEPT} ids, EOS positions and both decodes."),
    _json(layout.GENERATION_CALLS, "execute", GenerationCalls, _TRANSFORMERS,
          "Each outermost generate call's path and evidence level, the instrumentation's self-check, and calls that were not the run's."),
    _json(layout.WORKER_MODEL, "execute", WorkerModel, (SWEEP_ITEMS,),
          "The sweep worker that ran the item and whether it reused its already loaded model."),
    _BuiltInCallConfig("loop", "The loop genrun called (`[loop] callable`, kwargs, budget) and the "
          "configuration it gave `rec.config` before its first unit."),
    ArtifactSpec(layout.STAGE_PROGRESS, "execute", "Append-only per-stage events (start, progress, end), each with per-row unit and id counts.",
                 _STAGED, "ndjson", AnyStageEvent, schema="stage-progress-event"),
    _json(layout.STAGE_IDS, "execute", StageIds, _STAGED, "The ids each stage emitted, one list per row."),
    _json(layout.STAGES, "execute", Stages, _STAGED,
          "Each stage as it ended: unit, rows, units and ids per row, units consumed from its source stage, seconds, memory."),
    ArtifactSpec(layout.RUN_LOG, "execute", "Append-only: every line libraries wrote to stdout/stderr while the run executed "
                 "(their progress bars, warnings and log records), and the user code's own output, which is also shown; absent "
                 "when nothing was written.", _ALL, "ndjson", RunLogLine, schema="run-log-line"),
    _json(layout.DETERMINISM, "execute", Determinism, _ALL, "What bit-for-bit reproduction depends on, as it was during generation."),
    _json(layout.STOP, "execute", GenerationStop, _ALL, "Why each row stopped (the stop vocabulary), with evidence typed per reason."),
    _json(layout.RESULT, "execute", Result, _ALL, "How the run ended, timings, memory peaks; written after every other execution file."),
    ArtifactSpec(f"{layout.OUTPUTS_DIR}/", "execute", "`sequence_<i>.txt` per decodable row, or the pipeline's media.", _ALL, "bytes"),
    ArtifactSpec(layout.MANIFEST, "seal", "sha256sum of every file but itself and `signoffs/`, written last: its presence means sealed; "
                 "its sha256 is the snapshot digest.", _ALL, "sha256sum"),
    *_SIGNOFFS,
)
"""Every file of a run's snapshot, in the order it is written (see `snapshot_artifacts`)."""


@cache
def snapshot_artifacts() -> tuple[ArtifactSpec, ...]:
    """Every file of a run's snapshot, in the order it is written (the built-in backends' call configs as they declare them)."""
    return tuple(entry.spec() if isinstance(entry, _BuiltInCallConfig) else entry for entry in _SNAPSHOT_ARTIFACTS)


def __getattr__(name: str) -> Any:
    """`SNAPSHOT_ARTIFACTS`: `snapshot_artifacts()`, found when first asked for (not when this module is imported)."""
    if name == "SNAPSHOT_ARTIFACTS":
        return snapshot_artifacts()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

SWEEP_ARTIFACTS: tuple[ArtifactSpec, ...] = (
    ArtifactSpec(f"{layout.SWEEP_SOURCE_PREFIX}.<ext>", "plan", "The sweep file exactly as given.", (SWEEPS,), "source", SweepFile,
                 schema="sweep-file"),
    ArtifactSpec(f"{layout.SWEEP_BASE_REQUEST_PREFIX}.<ext>", "plan", "The base request's bytes exactly as given.", (SWEEPS,), "source", Request),
    ArtifactSpec(layout.SWEEP_DATASET, "plan", f"The dataset's bytes, when at most {layout.SWEEP_DATASET_COPY_LIMIT >> 20} MiB "
                 "(a larger one is frozen by its sha256 in the plan only).", (SWEEPS,), "bytes"),
    _json(layout.SWEEP_PLAN, "plan", SweepPlan, (SWEEPS,), "Every item with its changes and its planned snapshot's plan digest."),
    ArtifactSpec(layout.FROZEN_MANIFEST, "plan", "sha256sum of every file above, written last when the sweep is planned.", (SWEEPS,), "sha256sum"),
    ArtifactSpec(layout.SWEEP_PROGRESS, "execute", "Append-only: one line per item attempt started or ended.", (SWEEPS,), "ndjson", ItemAttempt,
                 schema="sweep-progress-record"),
    _json(layout.SWEEP_RESULT, "seal", SweepResult, (SWEEPS,), "Each item's final snapshot, digest, status and stop reasons."),
    ArtifactSpec(layout.MANIFEST, "seal", "sha256sum of every file but itself and `signoffs/`, written last: its presence means "
                 "the sweep is sealed.", (SWEEPS,), "sha256sum"),
    *_SIGNOFFS,
)
"""Every file of a sweep snapshot (the directory beside its items' snapshots), in the order it is written."""


def artifact_for(rel: str, artifacts: Iterable[ArtifactSpec] | None = None) -> ArtifactSpec | None:
    """The entry that file `rel` (relative path, `/` separators) belongs to, families included; `None` if none does
    (`artifacts`: a run's snapshot's when not given)."""
    return next((spec for spec in (snapshot_artifacts() if artifacts is None else artifacts) if spec.matches(rel)), None)


def model_for(rel: str, artifacts: Iterable[ArtifactSpec] | None = None) -> Any:
    """The model that reads file `rel` (`None` for files without one, or unknown files)."""
    spec = artifact_for(rel, artifacts)
    return spec.model if spec is not None else None


def with_declared(artifacts: tuple[ArtifactSpec, ...], declared: Iterable[ArtifactSpec], declared_by: str) -> tuple[ArtifactSpec, ...]:
    """`artifacts` with a backend's own `declared` entries, each placed after the last entry of its phase (written order).

    Refuses (ValueError) an entry whose files an existing entry already claims, or whose schema stem is taken:
    the same file must never have two models.
    """
    merged = list(artifacts)
    for spec in declared:
        if not isinstance(spec, ArtifactSpec):
            raise TypeError(f"{declared_by} declares {spec!r}; declare artifacts as genrun.schemas.artifacts.ArtifactSpec")
        clash = next((known for known in merged if known.matches(spec.example) or spec.matches(known.example)), None)
        if clash is not None:
            raise ValueError(f"{declared_by} declares artifact {spec.name!r}, but {clash.name!r} already names those files; "
                             "give the backend's artifact a name of its own")
        if spec.schema is not None and any(known.schema == spec.schema for known in merged):
            raise ValueError(f"{declared_by} declares artifact {spec.name!r} with schema {spec.schema!r}, which is taken; choose another stem")
        phases = get_args(layout.Phase)
        after = max((i for i, known in enumerate(merged) if phases.index(known.phase) <= phases.index(spec.phase)), default=-1)
        merged.insert(after + 1, spec)
    return tuple(merged)


def json_schema_sources(artifacts: Iterable[ArtifactSpec] | None = None) -> dict[str, Any]:
    """Schema file stem -> model, for every entry with a schema of its own (an entry listed in both kinds of snapshot once;
    `artifacts`: both kinds' when not given)."""
    listed = (*snapshot_artifacts(), *SWEEP_ARTIFACTS) if artifacts is None else artifacts
    return {spec.schema: spec.model for spec in listed if spec.schema is not None}
