"""The sweep file: load it strictly, expand grid x dataset into items, build each item's request.

Every item's request is the base request's table with dotted changes applied, validated by the
same strict code as a request file (`parse_request`), then planned by the same code as `genrun
plan` (`prepare_plan`). Any refusal names the item, the dataset line and the key; nothing is
written until every item passed.
"""

import itertools
import json
import tomllib
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from genrun.schemas import Request, layout
from genrun.schemas.digests import sha256_bytes
from genrun.schemas.sweep import SweepBody, SweepFile

from ..errors import RequestError
from ..request_loading import format_validation_error, load_request, parse_request

MAX_SWEEP_BYTES = 1 << 20  # a sweep file is a few lines; the dataset is a separate file


class SweepSource(NamedTuple):
    """A validated sweep file and what it points to, read once."""

    body: SweepBody
    path: Path
    """Absolute path of the sweep file."""
    source: bytes
    format: str
    """`toml` or `json`."""
    base_path: Path
    """Absolute path of the base request file."""
    base_source: bytes
    base_format: str
    base_table: dict[str, Any]
    """The base request as parsed (before defaults), the table changes apply to."""
    dataset_path: Path | None
    dataset_bytes: bytes | None


class ItemSpec(NamedTuple):
    """One expanded item, before planning."""

    index: int  # type: ignore[assignment]  # a field named like tuple.index (a method no caller uses on these)
    dataset_line: int | None
    changes: dict[str, Any]
    request: Request

    @property
    def where(self) -> str:
        """`sweep item 3 (dataset line 2)` for messages."""
        line = f" (dataset line {self.dataset_line})" if self.dataset_line is not None else ""
        return f"sweep item {self.index}{line}"


def load_sweep(path: str | Path) -> SweepSource:
    """Read and validate the sweep file, the base request and the dataset bytes; RequestError names what is wrong."""
    path = Path(path).absolute()
    fmt = layout.REQUEST_SOURCE_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise RequestError(f"sweep file {path} has extension {path.suffix!r}; use a .toml or .json file")
    source = _read(path, "sweep file", MAX_SWEEP_BYTES)
    try:
        data = tomllib.loads(source.decode()) if fmt == "toml" else json.loads(source)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise RequestError(f"sweep file {path} cannot be parsed as {fmt.upper()}: {exc}") from None
    try:
        body = SweepFile.model_validate(data).sweep
    except ValidationError as exc:
        raise RequestError(format_validation_error(exc, f"sweep file {path}", SweepFile)) from None
    base_path = (path.parent / body.request).absolute()
    base = load_request(base_path)  # the base request itself must be valid on its own
    base_table = _parse_table(base.source, base.format)
    dataset_path = (path.parent / body.dataset.path).absolute() if body.dataset else None
    dataset_bytes = _read(dataset_path, "[sweep.dataset] path", None) if dataset_path else None
    return SweepSource(body, path, source, fmt, base_path, base.source, base.format, base_table, dataset_path, dataset_bytes)


def expand_items(sweep: SweepSource) -> list[ItemSpec]:
    """Dataset lines (in order) x grid combinations (in the order the grid lists them); each validated as a request."""
    rows: list[tuple[int | None, dict[str, Any]]] = list(dataset_rows(sweep)) if sweep.dataset_bytes is not None else [(None, {})]
    grid = sweep.body.grid
    for key, values in grid.items():
        if not values:
            raise RequestError(f"[sweep.grid] {key!r} has no values; give at least one or remove the key")
    combos = [dict(zip(grid, values)) for values in itertools.product(*grid.values())] if grid else [{}]
    items: list[ItemSpec] = []
    for line, row in rows:
        for combo in combos:
            clash = sorted(row.keys() & combo.keys())
            if clash:
                raise RequestError(f"dataset line {line} sets {clash[0]!r}, which [sweep.grid] also sets; set each key in one place")
            index = len(items)
            changes = {**row, **combo}
            items.append(ItemSpec(index, line, changes, item_request(sweep, index, line, changes)))
    return items


def dataset_rows(sweep: SweepSource) -> list[tuple[int, dict[str, Any]]]:
    """`(1-based line, {dotted key: value})` per non-blank line; a line that is not a JSON object is refused."""
    assert sweep.dataset_bytes is not None and sweep.dataset_path is not None
    try:
        text = sweep.dataset_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(f"dataset {sweep.dataset_path} is not UTF-8 (byte offset {exc.start}); save it as UTF-8") from None
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RequestError(f"dataset {sweep.dataset_path} line {number} is not valid JSON: {exc.msg} at column {exc.colno}") from None
        if not isinstance(row, dict) or not row:
            raise RequestError(
                f"dataset {sweep.dataset_path} line {number} must be a non-empty JSON object of dotted request keys, "
                f'e.g. {{"input.prompt": "count down from 5 :"}}'
            )
        rows.append((number, row))
    if not rows:
        raise RequestError(f"dataset {sweep.dataset_path} has no items; add one JSON object per line or remove [sweep.dataset]")
    return rows


def item_request(sweep: SweepSource, index: int, line: int | None, changes: dict[str, Any]) -> Request:
    """The base request's table with `changes` applied and `name = <sweep>-<index>`, validated strictly."""
    where = f"sweep item {index}" + (f" (dataset line {line})" if line is not None else "")
    table = json.loads(json.dumps(sweep.base_table))  # a deep copy of plain JSON values
    table["name"] = f"{sweep.body.name}-{index:04d}"
    for key, value in changes.items():
        apply_change(table, key, value, where)
    return parse_request(json.dumps(table).encode(), "json", where)


def apply_change(table: dict[str, Any], dotted: str, value: Any, where: str) -> None:
    """Set `table[a][b][c] = value` for `a.b.c`, creating tables on the way; a non-table on the way is refused."""
    parts = dotted.split(".")
    if not all(parts):
        raise RequestError(f"{where}: key {dotted!r} is not a dotted request key like 'generation.max_new_tokens'")
    node = table
    for depth, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            prefix = ".".join(parts[: depth + 1])
            raise RequestError(f"{where}: key {dotted!r} goes through {prefix!r}, which is a value, not a table")
        node = child
    node[parts[-1]] = value


def dataset_digest(sweep: SweepSource) -> str | None:
    """sha256 of the dataset bytes."""
    return sha256_bytes(sweep.dataset_bytes) if sweep.dataset_bytes is not None else None


def _parse_table(source: bytes, fmt: str) -> dict[str, Any]:
    text = source.decode("utf-8")
    return tomllib.loads(text) if fmt == "toml" else json.loads(text)


def _read(path: Path, what: str, limit: int | None) -> bytes:
    try:
        if limit is not None and path.stat().st_size > limit:
            raise RequestError(f"{what} {path} is {path.stat().st_size:,} bytes; at most {limit:,} (is this the right file?)")
        return path.read_bytes()
    except FileNotFoundError:
        raise RequestError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise RequestError(f"{what} {path} is a directory, not a file") from None
