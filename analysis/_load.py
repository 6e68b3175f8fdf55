"""Read-only loading of a snapshot directory through the schema models.

Every file is read through a read-only `SnapshotDir` (bounded, never through a link, newer formats
refused), so nothing here writes, creates, renames or changes the mode of anything: a sealed snapshot
owned by someone else (or on a read-only mount) loads the same way. A file that is missing is `None`;
a file that does not parse is `None` too, with the `ArtifactError` reason in `Snapshot.problems`, so
that a damaged or killed snapshot is reported, not fatal.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from array import array

from pydantic import BaseModel, ValidationError

from genrun.schemas import (
    AnyEvent,
    BackendDeclaration,
    CodeIdentity,
    Determinism,
    Environment,
    GeneratedTokenIds,
    GenerationCalls,
    GenerationConfigBeforeGenerate,
    GenerationStop,
    InputFiles,
    InputPreparation,
    Lineage,
    ModelIdentity,
    Request,
    Result,
    TokenBudget,
    derived_declaration,
    layout,
)
from genrun._safe_read import MAX_PROGRESS_LINES
from genrun.snapshot_dir import ArtifactError, ManifestDamaged, SnapshotDir, describe_validation_error, parse_progress_lines
from genrun.schemas.artifacts import artifact_for
from genrun.schemas.call_config import CallConfigRecord
from genrun.schemas.stages import STAGE_EVENT, StageIds, Stages
from genrun.schemas.evidence import EvidenceKind, derived_unit, typed_call_config_model
from ._inventory import FileFact, inventory
from ._safetensors import SafetensorsError, read_int_tensors

class SnapshotNotFound(ValueError):
    """The path is not a genrun snapshot directory."""


@dataclass(frozen=True)
class ProgressLog:
    """`progress.ndjson` as read: parsed events plus whatever did not parse."""

    events: tuple[AnyEvent, ...]
    """Every line that parsed, in file order."""
    lines: int
    """Lines in the file, including a truncated last one."""
    invalid_lines: tuple[tuple[int, str], ...]
    """(1-based line number, why) for complete lines that do not parse: damage, not a crash."""
    truncated_tail: str | None
    """A last line without a newline that does not parse (the process died mid-write), shown shortened."""

    @property
    def last(self) -> AnyEvent | None:
        """The last event that parsed."""
        return self.events[-1] if self.events else None


_M = TypeVar("_M", bound=BaseModel)


@dataclass(frozen=True)
class Snapshot:
    """Everything in a snapshot directory, loaded through the schemas; `None` where absent or invalid.

    Every JSON file present is read with the model the artifact registry (`genrun.schemas.artifacts`) names for it
    (`artifacts`); the typed properties below pick the ones analysis asks for by name."""

    path: Path
    """The snapshot directory."""
    files: Mapping[str, FileFact]
    """Every regular file except `signoffs/` (the manifest included when present)."""
    problems: Mapping[str, str]
    """file -> why it could not be loaded (present but unreadable or invalid)."""
    artifacts: Mapping[str, BaseModel] = field(default_factory=dict)
    """file -> its registry model, validated (older formats migrated), for every JSON artifact present that loaded."""
    request_source_name: str | None = None
    """`request.source.toml` or `request.source.json`."""
    request_source: bytes | None = None
    """The request bytes exactly as given."""
    request_json: dict[str, Any] | None = None
    """`request.json` as plain JSON (for key-by-key comparison)."""
    frozen_manifest: Mapping[str, str] | None = None
    """`frozen-sha256.txt` entries: path -> sha256."""
    plan_digest: str | None = None
    """sha256 of `frozen-sha256.txt`."""
    call_config_json: Any = None
    """The declared call-config artifact as plain JSON (checked against the declared model or recorded schema by `call_config`)."""
    call_config: CallConfigRecord | None = None
    """The same, read with genrun's own model where the declaration names one (`None` for a model whose JSON Schema is
    recorded instead: that backend's config is `call_config_json`, as recorded)."""
    progress: ProgressLog | None = None
    token_ids: Mapping[int, array] | None = None
    """Row index -> generated ids, new tokens only. # ids: array('q') [count]"""
    manifest: Mapping[str, str] | None = None
    """`manifest-sha256.txt` entries: path -> sha256."""
    snapshot_digest: str | None = None
    """sha256 of `manifest-sha256.txt`."""
    outputs: Mapping[str, bytes] = field(default_factory=dict)
    """Small text outputs (`outputs/*.txt`, `*.json`): relative path -> bytes."""
    stage_events: tuple[Any, ...] | None = None
    """`stage-progress.ndjson`, parsed (`None` when absent; a line that does not parse is a problem of the file)."""

    def _artifact(self, rel: str, model: type[_M]) -> _M | None:
        loaded = self.artifacts.get(rel)
        return loaded if isinstance(loaded, model) else None

    @property
    def request(self) -> Request | None:
        """`request.json`, validated."""
        return self._artifact(layout.REQUEST, Request)

    @property
    def environment(self) -> Environment | None:
        """`environment.json`."""
        return self._artifact(layout.ENVIRONMENT, Environment)

    @property
    def code(self) -> CodeIdentity | None:
        """`code.json`."""
        return self._artifact(layout.CODE, CodeIdentity)

    @property
    def model(self) -> ModelIdentity | None:
        """`model.json`."""
        return self._artifact(layout.MODEL, ModelIdentity)

    @property
    def budget(self) -> TokenBudget | None:
        """`token-budget.json`."""
        return self._artifact(layout.TOKEN_BUDGET, TokenBudget)

    @property
    def backend(self) -> BackendDeclaration | None:
        """`backend.json` as frozen at plan time (`None` before format 3, or when damaged: see `declaration`)."""
        return self._artifact(layout.BACKEND, BackendDeclaration)

    @cached_property
    def generation_configs(self) -> tuple[GenerationConfigBeforeGenerate, ...]:
        """The `generation_config` evidence kind: call 0 (`generation-config.before-generate.json`), then any further calls."""
        indexed = ((layout.generation_config_call_index(n), n) for n in self.artifacts)
        configs = (self._artifact(n, GenerationConfigBeforeGenerate) for _, n in sorted((i, n) for i, n in indexed if i is not None))
        return tuple(c for c in configs if c is not None)

    @property
    def token_summary(self) -> GeneratedTokenIds | None:
        """`generated-token-ids.json`."""
        return self._artifact(layout.TOKEN_IDS_SUMMARY, GeneratedTokenIds)

    @property
    def stop(self) -> GenerationStop | None:
        """`generation-stop.json`."""
        return self._artifact(layout.STOP, GenerationStop)

    @property
    def generation_calls(self) -> GenerationCalls | None:
        """`generation-calls.json` (the `generation_calls` evidence kind)."""
        return self._artifact(layout.GENERATION_CALLS, GenerationCalls)

    @property
    def result(self) -> Result | None:
        """`result.json`."""
        return self._artifact(layout.RESULT, Result)

    @property
    def input_files(self) -> InputFiles | None:
        """`input-files.json`: media files frozen at plan time (absent for text-only requests)."""
        return self._artifact(layout.INPUT_FILES, InputFiles)

    @property
    def input_preparation(self) -> InputPreparation | None:
        """`input-preparation.json`: what each row became before generate (absent before execution and in older snapshots)."""
        return self._artifact(layout.INPUT_PREPARATION, InputPreparation)

    @property
    def lineage(self) -> Lineage | None:
        """`lineage.json` of a rerun child (`None` for a snapshot not made by `genrun rerun`)."""
        return self._artifact(layout.LINEAGE, Lineage)

    @property
    def determinism(self) -> Determinism | None:
        """`determinism.json` (`None` before it existed, or not executed)."""
        return self._artifact(layout.DETERMINISM, Determinism)

    @property
    def stages(self) -> Stages | None:
        """`stages.json` (the `stages` evidence kind)."""
        return self._artifact(layout.STAGES, Stages)

    @property
    def stage_ids(self) -> StageIds | None:
        """`stage-ids.json`."""
        return self._artifact(layout.STAGE_IDS, StageIds)

    @property
    def id(self) -> str:
        """The snapshot id (directory name)."""
        return self.path.name

    @property
    def recorded_unit(self) -> layout.Unit | None:
        """What the run counted, as recorded: `token-budget.json` (frozen at plan time), else `result.json`,
        else the progress `start` event; `None` when none of them was loaded."""
        if self.budget is not None:
            return self.budget.units
        if self.result is not None:
            return self.result.unit
        starts = (e for e in (self.progress.events if self.progress else ()) if e.event == "start")
        return next((e.unit for e in starts), None)

    @cached_property
    def declaration(self) -> BackendDeclaration:
        """The backend's evidence declaration: `backend.json`, else (format 1/2) derived from what the snapshot recorded.

        Analysis picks its checks by the evidence kinds declared here, never by the backend's name."""
        if self.backend is not None:
            return self.backend
        unit = self.recorded_unit or derived_unit(self.files)  # damage: no budget, result or progress loaded
        if unit is None:
            unit = self.request.units.name if self.request is not None else "token"
        genrun_version = self.environment.genrun_version if self.environment is not None else None
        backend = self.request.model.backend if self.request is not None else "unknown"
        return derived_declaration(backend=backend, unit=unit, genrun_version=genrun_version)

    def declares(self, kind: EvidenceKind) -> bool:
        """The snapshot's backend declared this evidence kind (its checks apply)."""
        return self.declaration.declares(kind)

    @property
    def state(self) -> layout.SnapshotState:
        """planned / running / incomplete / sealed, from the files present (the format module's one rule)."""
        return layout.snapshot_state(self.files)

    @property
    def is_sealed(self) -> bool:
        """Complete: `manifest-sha256.txt` exists."""
        return self.state is layout.SnapshotState.SEALED

    @property
    def unit(self) -> layout.Unit:
        """`token`, `frame` or `step`: as recorded at execution, else as declared at plan time (`backend.json`)."""
        if (unit := self.recorded_unit) is not None:
            return unit
        return self.declaration.unit


def read_snapshot(path: str | Path, *, hash_files: bool = True) -> Snapshot:
    """Load a snapshot read-only. Raises `SnapshotNotFound` when `path` is not one.

    `hash_files=False` skips hashing (report and diff do not need it; verify does).
    """
    root = Path(path)
    try:
        os.stat(root)
    except FileNotFoundError:
        pass  # reported just below
    except OSError as exc:
        raise SnapshotNotFound(f"cannot read snapshot {root}: {exc.strerror or exc}; analysis needs read access to it and its parents") from None
    if not root.is_dir():
        raise SnapshotNotFound(f"snapshot {root} does not exist or is not a directory; list snapshots with 'genrun ls --store DIR'")
    if not any(os.path.lexists(root / name) for name in (layout.FROZEN_MANIFEST, layout.MANIFEST)):  # sealed without its plan: damage
        raise SnapshotNotFound(
            f"{root} is not a genrun snapshot (no {layout.FROZEN_MANIFEST}); pass a directory made by 'genrun plan' or 'genrun run'"
        )
    problems: dict[str, str] = {}
    files = inventory(root, hash_files, problems)
    loaded: dict[str, Any] = {}
    source_name = _request_source_name(files)
    if source_name is not None:
        loaded["request_source_name"] = source_name
        loaded["request_source"] = _read(root, source_name, problems)
    _check_declaration_present(root, files, problems)
    raw, loaded["artifacts"] = _read_json_artifacts(root, files, problems)
    loaded["request_json"] = raw.get(layout.REQUEST)
    loaded["frozen_manifest"], loaded["plan_digest"] = _read_manifest(root, layout.FROZEN_MANIFEST, problems)
    if layout.PROGRESS in files:
        loaded["progress"] = _read_progress(root, files, problems)
    if layout.TOKEN_IDS in files:
        loaded["token_ids"] = _read_token_ids(root, problems)
    if layout.MANIFEST in files:
        loaded["manifest"], loaded["snapshot_digest"] = _read_manifest(root, layout.MANIFEST, problems)
    loaded["outputs"] = _read_text_outputs(root, files, problems)
    if layout.STAGE_PROGRESS in files:
        loaded["stage_events"] = _read_stage_events(root, problems)
    snap = Snapshot(path=root, files=MappingProxyType(files), problems=MappingProxyType(problems), **loaded)
    return _with_call_config(snap, root, problems, raw)


def _read_json_artifacts(root: Path, files: Mapping[str, FileFact],
                         problems: dict[str, str]) -> tuple[Mapping[str, Any], Mapping[str, BaseModel]]:
    """(file -> plain JSON, file -> model) for every JSON file present that the artifact registry names, each validated
    with the registry's model; sign-off records are read by `signoffs`, not here."""
    raw: dict[str, Any] = {}
    artifacts: dict[str, BaseModel] = {}
    for rel in files:
        spec = artifact_for(rel)
        if spec is None or spec.form != "json" or spec.phase == "sign-off":
            continue
        raw[rel] = _read_json(root, rel, files, problems)
        if (model := _validate(root, spec.model, raw[rel], rel, problems)) is not None:
            artifacts[rel] = model
    return raw, MappingProxyType(artifacts)


def _with_call_config(snap: Snapshot, root: Path, problems: dict[str, str], raw: Mapping[str, Any]) -> Snapshot:
    """The snapshot with its declared call-config artifact: as plain JSON (read once: `raw` holds it where the registry
    names the file), and typed where genrun's own model reads it."""
    declared = snap.declaration.call_config
    if declared is None or declared.name not in snap.files:
        return snap
    data = raw[declared.name] if declared.name in raw else _read_json(root, declared.name, snap.files, problems)
    model = typed_call_config_model(snap.declaration)
    typed = snap.artifacts.get(declared.name)  # the registry's model already read it (a built-in backend's file)
    if model is not None and not isinstance(typed, model):
        typed = _validate(root, model, data, declared.name, problems)
    return replace(snap, call_config_json=data, call_config=typed if model is not None and isinstance(typed, model) else None)


def _request_source_name(files: Mapping[str, FileFact]) -> str | None:
    names = sorted(n for n in files if layout.is_request_source(n))
    return names[0] if names else None


def _read(root: Path, rel: str, problems: dict[str, str]) -> bytes | None:
    """A bounded read of a regular file (never a link, FIFO or device); a refusal is recorded in `problems`."""
    if rel in problems:
        return None
    try:
        return SnapshotDir(root).read_bytes(rel)
    except ArtifactError as exc:
        problems[rel] = exc.reason
    return None


def _read_stage_events(root: Path, problems: dict[str, str]) -> tuple[Any, ...] | None:
    """Every line of `stage-progress.ndjson`; the first that does not parse makes the file a problem."""
    data = _read(root, layout.STAGE_PROGRESS, problems)
    if data is None:
        return None
    events = []
    for number, line in enumerate(data.splitlines(), start=1):
        try:
            events.append(STAGE_EVENT.validate_json(line))
        except ValidationError as exc:
            problems[layout.STAGE_PROGRESS] = f"line {number}: {describe_validation_error(exc)}"
            return None
    return tuple(events)


def _read_json(root: Path, rel: str, files: Mapping[str, FileFact], problems: dict[str, str]) -> Any:
    if rel not in files or rel in problems:
        return None
    try:
        return SnapshotDir(root).read_json(rel)
    except ArtifactError as exc:
        problems[rel] = exc.reason
        return None


def _validate(root: Path, model: type[_M], data: Any, rel: str, problems: dict[str, str]) -> _M | None:
    if data is None or rel in problems:
        return None
    try:
        return SnapshotDir(root).validate(rel, model, data)
    except ArtifactError as exc:
        problems[rel] = exc.reason
        return None


def _check_declaration_present(root: Path, files: Mapping[str, FileFact], problems: dict[str, str]) -> None:
    """`backend.json`'s absence is damage in a snapshot planned at format 3 or later (older ones derive it): a problem.

    The planned format is `environment.json`'s `schema_version` as written (frozen at plan time, before migration)."""
    environment = _read_json(root, layout.ENVIRONMENT, files, {})
    planned_format = environment.get("schema_version") if isinstance(environment, dict) else None
    declared_since = 3  # a newer format's own rules are not ours to apply: its files are refused as newer instead
    if (layout.BACKEND not in files and isinstance(planned_format, int) and declared_since <= planned_format <= layout.FORMAT_VERSION
            and layout.BACKEND not in problems):
        problems[layout.BACKEND] = ("missing: a snapshot planned at format 3 or later freezes its backend's evidence declaration; "
                                    "without it the evidence cannot be checked as declared (plan the request again)")


def _read_manifest(root: Path, rel: str, problems: dict[str, str]) -> tuple[Mapping[str, str] | None, str | None]:
    if rel in problems:
        return None, None
    try:
        entries, digest = SnapshotDir(root).read_manifest(rel)
    except ManifestDamaged as exc:  # not sha256sum text: it still has a digest (what a sign-off may be bound to)
        problems[rel] = exc.reason
        return None, exc.digest
    except ArtifactError as exc:
        problems[rel] = exc.reason
        return None, None
    return entries, digest


def _read_progress(root: Path, files: Mapping[str, FileFact], problems: dict[str, str]) -> ProgressLog | None:
    data = _read(root, layout.PROGRESS, problems)
    if data is None:
        return None
    line_count = data.count(b"\n")
    if line_count > MAX_PROGRESS_LINES:
        problems[layout.PROGRESS] = f"has {line_count:,} lines, more than the {MAX_PROGRESS_LINES:,} analysis parses"
        return None
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]  # `tail` is b"" when the file ends with a newline
    events, invalid = parse_progress_lines(complete)
    truncated = None
    if tail.strip():
        tail_events, tail_invalid = parse_progress_lines([tail], first_number=len(complete) + 1)
        if tail_invalid:
            shown = tail[:60].decode("utf-8", "replace") + ("…" if len(tail) > 60 else "")
            truncated = f"line {len(complete) + 1} is cut off after {len(tail)} bytes (no newline): {shown!r}"
        events += tail_events
    start = next((e for e in events if e.event == "start"), None)
    if start is not None and start.schema_version > layout.FORMAT_VERSION:
        problems[layout.PROGRESS] = layout.newer_format_message(start.schema_version, SnapshotDir(root).recorded_genrun_version())
    return ProgressLog(events=tuple(events), lines=len(complete) + (1 if tail.strip() else 0), invalid_lines=tuple(invalid), truncated_tail=truncated)


MAX_ROWS = 1 << 20
"""Rows (`sequence_<i>`) analysis accepts: a batch this large is damage, not a run."""
MAX_TOKEN_ID = (1 << 31) - 1
"""Largest token id analysis accepts (vocabularies are far smaller; tokenizers decode 32-bit ids)."""


def _read_token_ids(root: Path, problems: dict[str, str]) -> Mapping[int, array] | None:
    data = _read(root, layout.TOKEN_IDS, problems)
    if data is None:
        return None
    try:
        tensors = read_int_tensors(data)
    except SafetensorsError as exc:
        problems[layout.TOKEN_IDS] = f"not a valid safetensors file of integer tensors: {exc}"
        return None
    rows: dict[int, array] = {}
    for name, values in tensors.items():
        index = layout.sequence_index(name)
        if index is None or index >= MAX_ROWS:
            problems[layout.TOKEN_IDS] = f"tensor {name[:80]!r} is not named {layout.sequence_name(0)!r}, {layout.sequence_name(1)!r}, ... (rows below {MAX_ROWS:,})"
            return None
        if values and (min(values) < 0 or max(values) > MAX_TOKEN_ID):
            bad = min(values) if min(values) < 0 else max(values)
            problems[layout.TOKEN_IDS] = f"row {index} holds token id {bad}, outside 0..{MAX_TOKEN_ID:,}: not ids a tokenizer made"
            return None
        rows[index] = values
    return MappingProxyType(dict(sorted(rows.items())))


def _read_text_outputs(root: Path, files: Mapping[str, FileFact], problems: dict[str, str]) -> Mapping[str, bytes]:
    """Small textual outputs, for the saved-text comparison; binary media stays on disk (hashed only)."""
    prefix = layout.OUTPUTS_DIR + "/"
    wanted = [n for n, f in files.items() if n.startswith(prefix) and n.endswith(".txt") and f.size <= 16 << 20]
    found = {n: data for n in sorted(wanted) if (data := _read(root, n, problems)) is not None}
    return MappingProxyType(found)
