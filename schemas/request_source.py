"""`request.source.<ext>`: decoding the request bytes as given (TOML or JSON) into plain data. Pure stdlib.

The runner validates the result strictly (and rewrites errors for people); analysis re-parses a
snapshot's source with the same function to check it still yields `request.json`.
"""

import json
import math
import re
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
        data = tomllib.loads(text) if fmt == "toml" else json.loads(text, object_pairs_hook=_refuse_duplicate_keys)
    except tomllib.TOMLDecodeError as exc:
        raise RequestSourceError(f"{where} is not valid TOML: {exc}") from None
    except json.JSONDecodeError as exc:
        raise RequestSourceError(f"{where} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except DuplicateKey as exc:
        raise RequestSourceError(f"{where} is not a valid request: {exc} (TOML refuses a key given twice; so does genrun for JSON): "
                                 "keep one") from None
    except RecursionError:
        raise RequestSourceError(f"{where} is nested too deeply to be a request (at most {MAX_DEPTH} levels)") from None
    except ValueError:  # Python's limit on integer digits (4,300), raised while parsing, without saying where
        raise RequestSourceError(f"{where} holds a number too long to be a request value{_long_number_place(text)}; "
                                 "use a number of at most 19 digits") from None
    if not isinstance(data, dict):
        raise RequestSourceError(f"{where} must hold a table/object at the top level, not {type(data).__name__}")
    check_values(data, where)
    return data


class DuplicateKey(ValueError):
    """A JSON object names a key twice (JSON parsers keep the last silently)."""


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise DuplicateKey(f"key {key!r} appears twice in one object")
        data[key] = value
    return data


MAX_DEPTH = 32
"""Tables and arrays nested deeper than this are refused (a real request nests three levels)."""
INT64 = (-(1 << 63), (1 << 63) - 1)
"""Integers are stored as int64 (JSON files, safetensors, torch): anything outside is refused at plan time."""
MAX_FLOAT = 1e15
"""Floats larger in magnitude overflow the budget's arithmetic (seconds x units per second x bytes per token)."""


def check_values(data: Any, where: str = "request") -> None:
    """Refuse what cannot be stored or computed with: nesting beyond `MAX_DEPTH`, integers outside int64,
    NaN, infinities and floats beyond `MAX_FLOAT`; the message names the key."""
    stack: list[tuple[Any, tuple[str, ...]]] = [(data, ())]
    while stack:
        value, path = stack.pop()
        if len(path) > MAX_DEPTH:
            raise RequestSourceError(f"{where} is nested too deeply at {_key(path)} (at most {MAX_DEPTH} levels)")
        if isinstance(value, dict):
            stack.extend((v, (*path, str(k))) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, (*path, f"[{i}]")) for i, v in enumerate(value))
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
            raise RequestSourceError(f"{_key(path)} = {str(value)[:24]}… in {where} is outside the 64-bit integer range; use a smaller value")
        elif isinstance(value, float) and not (math.isfinite(value) and abs(value) <= MAX_FLOAT):
            raise RequestSourceError(f"{_key(path)} = {value} in {where} is not a usable number (NaN, infinite, or beyond ±{MAX_FLOAT:g}); "
                                     "use a finite value")


def _long_number_place(text: str) -> str:
    """` at line 4: retries = 99999…` for the first run of digits past Python's limit (4,300), so the refusal names the key."""
    found = re.search(r"[0-9][0-9_]{4300,}", text)
    if found is None:
        return ""
    line_start = text.rfind("\n", 0, found.start()) + 1
    before = text[line_start:found.start()].strip()[-60:]
    return f" at line {text.count(chr(10), 0, found.start()) + 1}: {before} {found.group()[:10]}… ({len(found.group()):,} digits)"


def _key(path: tuple[str, ...]) -> str:
    """`[budget] input_seconds`, `[generation] suppress_tokens[3]`, `[sweep.executor] num_gpus`, or a top-level key."""
    if not path:
        return "the request"
    last = max((i for i, part in enumerate(path) if not part.startswith("[")), default=0)  # the key; list indexes follow it
    key = "".join(path[last:])
    return f"[{'.'.join(path[:last]).replace('.[', '[')}] {key}" if last else key
