"""JSON Schema export of every artifact model, one file per artifact registry entry (`schemas/json/<schema>.schema.json`)."""

from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, TypeAdapter

from .artifacts import json_schema_sources
from .evidence import stop_evidence_adapter
from .stop_diffusion import DIFFUSION_STOP_EVIDENCE
from .stop_tokens import TOKEN_STOP_EVIDENCE

JSON_DIR = Path(__file__).parent / "json"

EVIDENCE_SCHEMAS: dict[str, Any] = {
    "stop-evidence.language-model": stop_evidence_adapter(TOKEN_STOP_EVIDENCE),
    "stop-evidence.diffusion": stop_evidence_adapter(DIFFUSION_STOP_EVIDENCE),
}
"""The built-in families' stop evidence (`generation-stop.json` `evidence`, validated by the model its `backend.json` declares)."""

SCHEMA_SOURCES: dict[str, Any] = {**json_schema_sources(), **EVIDENCE_SCHEMAS}
"""Schema file stem -> model (a tagged union for progress events): one per artifact registry entry with a schema, and the
built-in families' stop evidence."""


def render_json_schemas() -> dict[str, bytes]:
    """File name -> schema bytes, deterministic (sorted keys, trailing newline)."""
    rendered = {}
    for stem, source in SCHEMA_SOURCES.items():
        if isinstance(source, TypeAdapter):
            schema = source.json_schema()
        elif isinstance(source, type) and issubclass(source, BaseModel):
            schema = source.model_json_schema()
        else:  # a tagged union (progress events, sweep attempts)
            schema = TypeAdapter(source).json_schema()
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
