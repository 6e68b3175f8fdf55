"""JSON Schema export of every artifact model, one file per artifact registry entry (`schemas/json/<schema>.schema.json`)."""

from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, TypeAdapter

from .artifacts import json_schema_sources

JSON_DIR = Path(__file__).parent / "json"

SCHEMA_SOURCES: dict[str, Any] = json_schema_sources()
"""Schema file stem -> model (a tagged union for progress events), one per artifact registry entry with a schema."""


def render_json_schemas() -> dict[str, bytes]:
    """File name -> schema bytes, deterministic (sorted keys, trailing newline)."""
    rendered = {}
    for stem, source in SCHEMA_SOURCES.items():
        schema = source.model_json_schema() if isinstance(source, type) and issubclass(source, BaseModel) else TypeAdapter(source).json_schema()
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
