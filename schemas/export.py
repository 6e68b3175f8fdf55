"""JSON Schema export of every model, one file per artifact (`schemas/json/<file>.schema.json`)."""

from pathlib import Path

import orjson
from pydantic import BaseModel, TypeAdapter

from .budget import TokenBudget
from .evidence import BackendDeclaration, stop_evidence_adapter
from .generation_calls import GenerationCalls
from .generation_config import GenerationConfigBeforeGenerate
from .identity import CodeIdentity, Environment, ModelIdentity
from .lineage import Determinism, Lineage
from .inputs import InputFiles, InputPreparation
from .pipeline_call import PipelineCallBeforeCall
from .progress import EVENT_ADAPTER
from .request import Request
from .result import Result
from .signoff import Signoff
from .stop import GenerationStop
from .stop_diffusion import DIFFUSION_STOP_EVIDENCE
from .stop_tokens import TOKEN_STOP_EVIDENCE
from .sweep import ATTEMPT_ADAPTER, SweepFile, SweepPlan, SweepResult, WorkerModel
from .token_ids import GeneratedTokenIds

JSON_DIR = Path(__file__).parent / "json"

SCHEMA_SOURCES: dict[str, type[BaseModel] | TypeAdapter] = {
    "request": Request,
    "environment": Environment,
    "code": CodeIdentity,
    "model": ModelIdentity,
    "token-budget": TokenBudget,
    "backend": BackendDeclaration,
    "generation-config.before-generate": GenerationConfigBeforeGenerate,
    "pipeline-call.before-call": PipelineCallBeforeCall,
    "progress-event": EVENT_ADAPTER,
    "generated-token-ids": GeneratedTokenIds,
    "generation-stop": GenerationStop,
    "stop-evidence.language-model": stop_evidence_adapter(TOKEN_STOP_EVIDENCE),
    "stop-evidence.diffusion": stop_evidence_adapter(DIFFUSION_STOP_EVIDENCE),
    "generation-calls": GenerationCalls,
    "result": Result,
    "input-files": InputFiles,
    "input-preparation": InputPreparation,
    "signoff": Signoff,
    "lineage": Lineage,
    "determinism": Determinism,
    "sweep-file": SweepFile,
    "sweep-plan": SweepPlan,
    "sweep-progress-record": ATTEMPT_ADAPTER,
    "sweep-result": SweepResult,
    "worker-model": WorkerModel,
}
"""Schema file stem -> model (or adapter, for the progress event union)."""


def render_json_schemas() -> dict[str, bytes]:
    """File name -> schema bytes, deterministic (sorted keys, trailing newline)."""
    rendered = {}
    for stem, source in SCHEMA_SOURCES.items():
        schema = source.model_json_schema() if isinstance(source, type) else source.json_schema()
        rendered[f"{stem}.schema.json"] = orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    return rendered


def write_json_schemas(directory: Path = JSON_DIR) -> list[Path]:
    """(Re)write the schema files; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in render_json_schemas().items():
        path = directory / name
        path.write_bytes(data)
        written.append(path)
    return written
