"""Key-by-key comparison of JSON values (request, effective config, identities)."""

from typing import Any, NamedTuple


class _Absent:
    """Marks a key present on one side only."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Any = _Absent()


class Change(NamedTuple):
    """One differing leaf: dotted path, value on side A, value on side B (`ABSENT` when missing)."""

    path: str
    a: Any
    b: Any

    def as_json(self) -> dict[str, Any]:
        """JSON-safe form: an absent side is reported as `{"absent": true}`-style null plus a flag."""
        return {"path": self.path, "a": None if self.a is ABSENT else self.a, "b": None if self.b is ABSENT else self.b,
                "a_absent": self.a is ABSENT, "b_absent": self.b is ABSENT}


def diff_values(a: Any, b: Any, path: str = "") -> list[Change]:
    """Every leaf where `a` and `b` differ; dicts by key, equal-length lists by index, anything else whole."""
    if isinstance(a, dict) and isinstance(b, dict):
        changes: list[Change] = []
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if path else str(key)
            changes += diff_values(a.get(key, ABSENT), b.get(key, ABSENT), sub)
        return changes
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        changes = []
        for index, (x, y) in enumerate(zip(a, b)):
            changes += diff_values(x, y, f"{path}[{index}]")
        return changes
    if a is ABSENT or b is ABSENT or not same_json(a, b):
        return [Change(path, a, b)]
    return []


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values: `True != 1`, but `5 == 5.0` (TOML ints become floats in float fields)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def short_value(value: Any, limit: int = 60) -> str:
    """`repr` cut to `limit` characters for messages and tables."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
