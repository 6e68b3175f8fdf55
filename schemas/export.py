"""JSON Schema export of every artifact model, one file per artifact registry entry (`schemas/json/<schema>.schema.json`)."""

from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, TypeAdapter

from .artifacts import json_schema_sources
from .evidence import builtin_declarations, stop_evidence_adapter

JSON_DIR = Path(__file__).parent / "json"

STOP_EVIDENCE_STEMS = {"transformers": "language-model", "diffusers": "diffusion"}
"""Built-in backend -> the stem its stop evidence's schema file has had since before the models moved into it
(`stop-evidence.<stem>.schema.json`); a built-in backend not named here gets its own name."""

EVIDENCE_SCHEMAS: dict[str, Any] = {
    f"stop-evidence.{STOP_EVIDENCE_STEMS.get(backend, backend)}": stop_evidence_adapter(declared.stop_evidence)
    for backend, declared in builtin_declarations().items()
}
"""The built-in backends' stop evidence (`generation-stop.json` `evidence`, validated by the models `backend.json` names)."""

SCHEMA_SOURCES: dict[str, Any] = {**json_schema_sources(), **EVIDENCE_SCHEMAS}
"""Schema file stem -> model (a tagged union for progress events): one per artifact registry entry with a schema, and the
built-in backends' stop evidence."""


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
