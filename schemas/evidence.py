"""`backend.json`: what evidence the backend that ran a snapshot declares, frozen at plan time.

A backend declares its evidence once (`EvidenceDeclaration`, an attribute of the backend): its
call-config artifact (file name + model), its stop-evidence models (one per reason) and the
evidence KINDS it provides from the small vocabulary below, for which analysis has checks.
`genrun plan` freezes the declaration as `backend.json`, with the JSON Schema of the call-config
and stop-evidence models, so a reader validates a third-party backend's artifacts without its
code, and analysis picks checks by declared kind, never by asking which backend ran.

Snapshots of formats 1 and 2 have no `backend.json`: their declaration is derived in memory
from what they recorded (`derived_declaration`).

genrun's own backends' models are named in `backend.json` without their JSON Schema: readers resolve them by name
(`genrun_evidence_model`). They live in their backends (e.g. `genrun.runner.backends.transformers.evidence`), found
through the `genrun.evidence` entry points of genrun's own distribution, never by importing a backend's package here.
Snapshots written before they moved name them where they were (`genrun.schemas.stop_tokens:EosEvidence`, ...):
`MOVED_EVIDENCE_MODELS` maps those names to the current ones, so both read alike.
"""

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter

from . import layout
from ._base import Strict
from ._versioning import Versioned
from .call_config import CallConfigRecord
from .progress import Unit
from .stop import StopEvidence, StopReason

EvidenceKind = Literal["call_config", "stop_records", "token_ids", "generation_config", "generation_calls", "diffusion_steps", "stages"]

EVIDENCE_KIND_MEANING: Mapping[str, str] = MappingProxyType({
    "call_config": "the declared call-config artifact, written before the first unit (checked against its recorded schema)",
    "stop_records": "`generation-stop.json`, one record per row, its evidence in the declared models (checked against their "
                    "recorded schema and against `result.json`)",
    "token_ids": "`generated-token-ids.safetensors` + `generated-token-ids.json`, and each row's evidence carries the token "
                 "facts (`TokenStopFacts`): counts, summaries, saved text and stop reasons are checked against the ids",
    "generation_config": "`generation-config.before-generate[.<i>].json`: effective limits and who set each (limit checks)",
    "generation_calls": "`generation-calls.json`: each generate call's path and evidence level",
    "diffusion_steps": "each row's evidence carries `steps` (done / planned): steps are checked across stop file, progress "
                       "and result",
    "stages": "`stages.json`, `stage-ids.json` and `stage-progress.ndjson`: ids agree with each stage's counts per row, `eos` and "
              "`max_new_tokens` claims (the stop record's `stage`) are checked against the ids, a consuming stage's reads against "
              "its source, and a row without a stop is named",
})
"""Evidence kind -> what a backend that declares it provides, and what analysis checks."""

REQUIRED_KINDS: tuple[EvidenceKind, ...] = ("stop_records",)
"""Every backend writes stop records (the core writes `generation-stop.json` from its outcome)."""


def qualified_name(obj: type) -> str:
    """`module:QualName` of a class."""
    return f"{obj.__module__}:{obj.__qualname__}"


@lru_cache(maxsize=32)
def stop_evidence_adapter(models: tuple[type[BaseModel], ...]) -> TypeAdapter[Any]:
    """One adapter for a backend's stop-evidence models, tagged by `reason`."""
    if len(models) == 1:
        return TypeAdapter(models[0])
    # A union built at run time from a tuple of types has no static type form: held as Any, so that mypy checks the call
    # the same way whichever pydantic and typing versions it sees.
    union: Any = Annotated[Union[models], Field(discriminator="reason")]  # noqa: UP007 (a runtime tuple of types)
    return TypeAdapter(union)


def _reason_of(model: type[StopEvidence]) -> StopReason:
    default = model.model_fields["reason"].default
    if not isinstance(default, str):
        raise TypeError(f"stop-evidence model {qualified_name(model)} must default `reason` to its Literal tag, e.g. "
                        f"`reason: Literal[\"completed\"] = \"completed\"`")
    return default  # type: ignore[return-value]


class CallConfigArtifact(Strict):
    """The file a backend writes before its first unit: the call configuration as made."""

    name: str
    """File name in the snapshot, e.g. `generation-config.before-generate.json`."""
    model: str
    """The pydantic model it is written with (`module:QualName`)."""
    json_schema: dict[str, Any] | None
    """That model's JSON Schema, so readers validate the file without the backend's code; `None` when the model is
    genrun's own (a built-in backend's, found through `genrun.evidence`: readers validate with it, older formats migrated,
    and every snapshot stays small)."""

    @property
    def read_as_model(self) -> bool:
        """Readers load the file with genrun's own model (typed, migrated) rather than as JSON checked against `json_schema`."""
        return self.json_schema is None


class BackendDeclaration(Versioned):
    """`backend.json`: the backend of this snapshot and the evidence it declared, frozen at plan time."""

    backend: str
    """`[model] backend`: the entry-point name."""
    distribution: str | None
    """The installed distribution that provides the backend (`None` when it is not installed as one)."""
    distribution_version: str | None
    """Its version."""
    unit: Unit
    """What the run counts (`progress.ndjson`, `result.json`)."""
    evidence: tuple[EvidenceKind, ...]
    """Evidence kinds the backend provides (see `EVIDENCE_KIND_MEANING`); analysis runs the checks of these kinds."""
    call_config: CallConfigArtifact | None
    """The call-config artifact (`None`: the backend writes none)."""
    stop_reasons: tuple[StopReason, ...]
    """Reasons the backend's stop records may carry (one evidence model each)."""
    stop_evidence_models: tuple[str, ...]
    """The stop-evidence models (`module:QualName`), one per reason."""
    stop_evidence_schema: dict[str, Any] | None
    """JSON Schema of a row's `evidence` (the models, tagged by `reason`); `None` when every model is genrun's own."""
    derived: bool = False
    """True only in memory, for a snapshot older than `backend.json` (format 1 or 2): derived from what it recorded."""

    def declares(self, kind: EvidenceKind) -> bool:
        """The backend provides this evidence kind."""
        return kind in self.evidence


@dataclass(frozen=True, kw_only=True)
class EvidenceDeclaration:
    """What a backend declares about its evidence (a class attribute `evidence` of the backend)."""

    kinds: tuple[EvidenceKind, ...]
    """Evidence kinds it provides (`stop_records` always; `call_config` when it has a call-config artifact)."""
    stop_evidence: tuple[type[StopEvidence], ...]
    """Its stop-evidence models, one per reason (each a `StopEvidence` with `reason: Literal[...] = ...`)."""
    call_config_name: str | None = None
    """The call-config artifact's file name (`None`: none)."""
    call_config_model: type[BaseModel] | None = None
    """The model it is written with."""

    def __post_init__(self) -> None:
        unknown = [k for k in self.kinds if k not in EVIDENCE_KIND_MEANING]
        if unknown:
            raise ValueError(f"unknown evidence kind(s) {unknown}; the vocabulary is {sorted(EVIDENCE_KIND_MEANING)}")
        missing = [k for k in REQUIRED_KINDS if k not in self.kinds]
        if missing:
            raise ValueError(f"every backend provides {list(REQUIRED_KINDS)}; add {missing} to kinds")
        if (self.call_config_name is None) != (self.call_config_model is None) or (self.call_config_name is not None) != ("call_config" in self.kinds):
            raise ValueError("call_config_name, call_config_model and the `call_config` kind go together: give all three or none")
        if not self.stop_evidence:
            raise ValueError("declare at least one stop-evidence model")
        reasons = [_reason_of(m) for m in self.stop_evidence]
        if len(set(reasons)) != len(reasons):
            raise ValueError(f"one stop-evidence model per reason; reasons declared: {reasons}")

    @property
    def stop_reasons(self) -> tuple[StopReason, ...]:
        """The reasons, in the order of the models."""
        return tuple(_reason_of(m) for m in self.stop_evidence)

    def record(self, *, backend: str, unit: Unit, distribution: str | None, distribution_version: str | None) -> BackendDeclaration:
        """The `backend.json` of one planned snapshot."""
        call_config = None
        if self.call_config_name is not None and self.call_config_model is not None:
            model = self.call_config_model
            call_config = CallConfigArtifact(name=self.call_config_name, model=qualified_name(model),
                                             json_schema=None if _is_genrun_model(model) else model.model_json_schema())
        own_stops = all(_is_genrun_model(m) for m in self.stop_evidence)
        return BackendDeclaration(
            backend=backend, distribution=distribution, distribution_version=distribution_version, unit=unit,
            evidence=self.kinds, call_config=call_config, stop_reasons=self.stop_reasons,
            stop_evidence_models=tuple(qualified_name(m) for m in self.stop_evidence),
            stop_evidence_schema=None if own_stops else stop_evidence_adapter(self.stop_evidence).json_schema(),
        )


# -- genrun's own backends' models, found through entry points ------------------------------------------------------
EVIDENCE_GROUP = "genrun.evidence"
"""Entry-point group naming the `EvidenceDeclaration` of each backend genrun itself ships whose models readers resolve by
name (only genrun's own distribution is read: a third party's models travel with their JSON Schema instead)."""


@cache
def builtin_declarations() -> Mapping[str, EvidenceDeclaration]:
    """Backend name -> the declaration its `genrun.evidence` entry point names (loaded once; no backend's libraries)."""
    found = {}
    for point in sorted(entry_points(group=EVIDENCE_GROUP), key=lambda p: p.name):
        if point.dist is None or point.dist.metadata["Name"] != "genrun":
            continue
        declared = point.load()
        if not isinstance(declared, EvidenceDeclaration):
            raise TypeError(f"the {EVIDENCE_GROUP} entry point {point.name!r} ({point.value}) names {type(declared).__name__}, "
                            "not an EvidenceDeclaration")
        found[point.name] = declared
    return MappingProxyType(found)


@cache
def _models_by_name() -> Mapping[str, type[BaseModel]]:
    models: dict[str, type[BaseModel]] = {}
    for declared in builtin_declarations().values():
        for model in (*([declared.call_config_model] if declared.call_config_model else []), *declared.stop_evidence):
            models[qualified_name(model)] = model
    return MappingProxyType(models)


def genrun_evidence_model(name: str) -> type[BaseModel] | None:
    """The model of genrun's own that `backend.json` names `name` (`module:QualName`, as written then: a moved model's old
    name included); `None` when no built-in backend declares it."""
    return _models_by_name().get(MOVED_EVIDENCE_MODELS.get(name, name))


def _is_genrun_model(model: type) -> bool:
    """A model every reader resolves by its name (a built-in backend's); any other model's JSON Schema is recorded, a
    model of `genrun.schemas` that readers do not look up by name included."""
    return genrun_evidence_model(qualified_name(model)) is model


# -- what snapshots written before the models moved name (part of the format: never edit, only add) -----------------
_TOKEN_STOPS: tuple[tuple[StopReason, str], ...] = (
    ("eos", "EosEvidence"), ("stop_string", "StopStringEvidence"), ("max_new_tokens", "MaxNewTokensEvidence"),
    ("max_length", "MaxLengthEvidence"), ("max_time", "MaxTimeEvidence"), ("custom", "CustomEvidence"), ("unknown", "UnknownEvidence"),
    ("interrupted", "InterruptedEvidence"), ("exception", "ExceptionEvidence"),
)
"""The `transformers` backend's stop reasons and models, in declared order."""
_DIFFUSION_STOPS: tuple[tuple[StopReason, str], ...] = (
    ("completed", "CompletedEvidence"), ("interrupted", "DiffusionInterruptedEvidence"), ("exception", "DiffusionExceptionEvidence"),
)
"""The `diffusers` backend's, in declared order."""

MOVED_EVIDENCE_MODELS: Mapping[str, str] = MappingProxyType({
    **{f"genrun.schemas.stop_tokens:{name}": f"genrun.runner.backends.transformers.evidence:{name}" for _, name in _TOKEN_STOPS},
    **{f"genrun.schemas.stop_diffusion:{name}": f"genrun.runner.backends.diffusers.evidence:{name}" for _, name in _DIFFUSION_STOPS},
    "genrun.schemas.pipeline_call:PipelineCallBeforeCall": "genrun.runner.backends.diffusers.evidence:PipelineCallBeforeCall",
    "genrun.schemas.stages:LoopCall": "genrun.runner.backends.loop.evidence:LoopCall",  # recorded with its JSON Schema then
})
"""A model's name in `backend.json` before it moved into its backend -> its name now (both resolve to the same model)."""


@dataclass(frozen=True)
class _Format2Family:
    """What genrun declared for one of the two families formats 1 and 2 knew, by the names it used then."""

    kinds: tuple[EvidenceKind, ...]
    call_config_name: str
    call_config_model: str
    stops: tuple[tuple[StopReason, str], ...]
    """(reason, `module:QualName`) per stop-evidence model."""

    def declaration(self, *, backend: str, unit: Unit, genrun_version: str | None) -> BackendDeclaration:
        return BackendDeclaration(
            backend=backend, distribution="genrun", distribution_version=genrun_version, unit=unit, evidence=self.kinds,
            call_config=CallConfigArtifact(name=self.call_config_name, model=self.call_config_model, json_schema=None),
            stop_reasons=tuple(reason for reason, _ in self.stops), stop_evidence_models=tuple(model for _, model in self.stops),
            stop_evidence_schema=None, derived=True)


_FORMAT_2_LANGUAGE_MODELS = _Format2Family(
    kinds=("call_config", "stop_records", "token_ids", "generation_config", "generation_calls"),
    call_config_name=layout.GENERATION_CONFIG, call_config_model="genrun.schemas.generation_config:GenerationConfigBeforeGenerate",
    stops=tuple((reason, f"genrun.schemas.stop_tokens:{name}") for reason, name in _TOKEN_STOPS))
_FORMAT_2_DIFFUSION = _Format2Family(
    kinds=("call_config", "stop_records", "diffusion_steps"),
    call_config_name=layout.PIPELINE_CALL, call_config_model="genrun.schemas.pipeline_call:PipelineCallBeforeCall",
    stops=tuple((reason, f"genrun.schemas.stop_diffusion:{name}") for reason, name in _DIFFUSION_STOPS))


def derived_unit(files: Collection[str]) -> Unit | None:
    """What a format-1/2 snapshot counted, from its file names alone (when nothing that records the unit could be read):
    only the diffusion family wrote its call-config file, and it counted steps; `None` when the names do not say."""
    return "step" if _FORMAT_2_DIFFUSION.call_config_name in files else None


@lru_cache(maxsize=64)
def derived_declaration(*, backend: str, unit: Unit, genrun_version: str | None) -> BackendDeclaration:
    """The declaration of a format-1/2 snapshot (no `backend.json`), from what it recorded: what the genrun that wrote it
    declared, by the names it used.

    Those formats knew two families: a run that counted steps is diffusion evidence, any other a
    language model's.
    """
    family = _FORMAT_2_DIFFUSION if unit == "step" else _FORMAT_2_LANGUAGE_MODELS
    return family.declaration(backend=backend, unit=unit, genrun_version=genrun_version)


def typed_call_config_model(declaration: BackendDeclaration) -> type[CallConfigRecord] | None:
    """The model genrun reads the declared call-config artifact with (typed, older formats migrated); `None` when the
    backend declares none, or one whose recorded JSON Schema readers validate it against instead."""
    artifact = declaration.call_config
    if artifact is None or not artifact.read_as_model:
        return None
    model = genrun_evidence_model(artifact.model)
    return model if isinstance(model, type) and issubclass(model, CallConfigRecord) else None
