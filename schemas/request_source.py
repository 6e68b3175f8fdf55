"""`request.source.<ext>`: decoding the request bytes as given (TOML or JSON) into plain data. Pure stdlib.

The runner validates the result strictly (and rewrites errors for people); analysis re-parses a
snapshot's source with the same function to check it still yields `request.json`.
"""

import json
import tomllib
from typing import Any

REQUEST_SOURCE_FORMATS = {".toml": "toml", ".json": "json"}
"""File extension -> request format (the extension of `request.source.<ext>`)."""


class RequestSourceError(ValueError):
    """Request bytes that are not UTF-8, not valid TOML/JSON, or not a table at the top level."""


def decode_request_source(source: bytes, fmt: str, where: str = "request") -> dict[str, Any]:
    """Bytes of format `toml` or `json` -> the top-level table; raises `RequestSourceError` saying what is wrong."""
    try:
        text = source.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestSourceError(
            f"{where} is not UTF-8 text (invalid byte 0x{source[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        ) from None
    try:
        data = tomllib.loads(text) if fmt == "toml" else json.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RequestSourceError(f"{where} is not valid TOML: {exc}") from None
    except json.JSONDecodeError as exc:
        raise RequestSourceError(f"{where} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(data, dict):
        raise RequestSourceError(f"{where} must hold a table/object at the top level, not {type(data).__name__}")
    return data
