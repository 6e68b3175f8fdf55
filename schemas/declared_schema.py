"""Applying a JSON Schema a backend declared (`backend.json`: a plugin's call config or stop evidence) without trusting it.

The schema comes from a third party's code and the data from a snapshot, so neither may make a reader hang or crash:
validation uses `jsonschema-rs` with its linear-time regex engine (`RegexOptions`: no backtracking, so a pattern such as
`^(a+)+$` costs time linear in the string, and a pattern that needs backtracking, such as a back-reference, is refused
when the schema is compiled), and a schema nested deeper than `MAX_DEPTH` or larger than `MAX_BYTES` is refused before
it is compiled. Plan refuses such a declaration (`refuse_unsafe`); verify reports it as a FAIL naming the schema.
"""

from typing import Any

import orjson

MAX_DEPTH = 64
"""Nesting of objects and arrays in a declared schema (pydantic's own schemas stay below 16)."""
MAX_BYTES = 1 << 20
"""A declared schema's size as JSON, bytes."""
MAX_ERRORS = 5
"""Violations named per file (enough to find the damage)."""


class UnsafeSchema(ValueError):
    """A declared schema that cannot be applied safely (too deep, too large, a pattern needing backtracking, invalid)."""


def compile_declared(schema: Any, what: str) -> Any:
    """A validator for `schema` (`what` names it in errors), or `None` when `jsonschema-rs` is not installed."""
    depth = _depth(schema)
    if depth > MAX_DEPTH:
        raise UnsafeSchema(f"{what} is nested at least {depth} levels deep; a declared schema may nest at most {MAX_DEPTH}")
    size = len(orjson.dumps(schema))
    if size > MAX_BYTES:
        raise UnsafeSchema(f"{what} is {size:,} bytes; a declared schema may be at most {MAX_BYTES:,}")
    try:
        import jsonschema_rs
    except ImportError:
        return None
    try:
        return jsonschema_rs.Draft202012Validator(schema, pattern_options=jsonschema_rs.RegexOptions())
    except Exception as exc:  # jsonschema-rs raises ValidationError / ValueError for schemas it cannot compile
        raise UnsafeSchema(f"{what} cannot be applied: {str(exc).splitlines()[0][:300]}") from None


def schema_errors(validator: Any, data: Any, what: str) -> list[str]:
    """`path: message` per violation of `data` (at most `MAX_ERRORS`); data nested too deeply to check is one violation."""
    if _depth(data) > MAX_DEPTH * 4:
        return [f"(top level): nested deeper than {MAX_DEPTH * 4} levels; not checked against {what}"]
    try:
        errors = list(validator.iter_errors(data))
    except ValueError as exc:
        return [f"(top level): cannot be checked against {what}: {exc}"]
    errors.sort(key=lambda e: list(map(str, e.instance_path)))
    return [f"{'.'.join(map(str, e.instance_path)) or '(top level)'}: {e.message[:200]}" for e in errors[:MAX_ERRORS]]


def _depth(value: Any) -> int:
    """How deeply objects and arrays nest in `value` (iteratively: a deep document cannot exhaust the stack)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH * 4:
            return deepest
        pending.extend((child, level + 1) for child in children)
    return deepest
