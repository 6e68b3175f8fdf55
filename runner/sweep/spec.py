"""The sweep file: load it strictly, expand grid x dataset into items, build each item's request.

Every item's request is the base request's table with dotted changes applied, validated by the
same strict code as a request file (`parse_request`), then planned by the same code as `genrun
plan` (`prepare_plan`). Any refusal names the item, the dataset line and the key; nothing is
written until every item passed.
"""

import itertools
import json
import math
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from genrun.schemas import Request, layout
from genrun.schemas.digests import sha256_bytes
from genrun.schemas.request_source import MAX_DEPTH
from genrun.schemas.sweep import SweepBody, SweepFile

from ..errors import RequestError
from ..request_loading import MAX_SHOWN_PATH_CHARS, format_validation_error, load_request, parse_request, read_user_file, shorten

MAX_SWEEP_BYTES = 1 << 20  # a sweep file is a few lines; the dataset is a separate file
MAX_DATASET_BYTES = 256 << 20
"""A dataset larger than this is refused (every item is planned into its own snapshot, so this is far more than
`MAX_SWEEP_ITEMS` lines of any real request needs)."""
MAX_SWEEP_ITEMS = 10_000
"""Dataset lines x grid combinations a sweep may hold, counted before anything is expanded: item names carry four
digits (`<sweep>-0000` .. `<sweep>-9999`), and every item becomes its own planned snapshot. Larger studies are split
into several sweeps; the limit is not configurable."""


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
    given, path = path, Path(path).absolute()
    fmt = layout.REQUEST_SOURCE_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise RequestError(f"sweep file {path} has extension {path.suffix!r}; use a .toml or .json file")
    source = read_user_file(path, "sweep file", MAX_SWEEP_BYTES,
                            f"sweep files are at most {MAX_SWEEP_BYTES:,} bytes (is this the right file? the dataset is a separate file)")
    try:  # the request decoder: duplicate JSON keys, nesting, over-long numbers and inf/nan are refused as for a request
        data = layout.decode_request_source(source, fmt, f"sweep file {shorten(path, quoted=False, limit=MAX_SHOWN_PATH_CHARS)}")
    except layout.RequestSourceError as exc:
        raise RequestError(str(exc)) from None
    if isinstance(data, dict) and "sweep" not in data and isinstance(data.get("model"), dict):  # one line, not one per key
        raise RequestError(f"{path} is a request (it has a [model] table and no [sweep]), not a sweep file: run it with "
                           f"'genrun run {given}' (or 'genrun plan {given}' to plan it only)")
    try:
        body = SweepFile.model_validate(data).sweep
    except ValidationError as exc:
        raise RequestError(format_validation_error(exc, f"sweep file {path}", SweepFile)) from None
    base_path = (path.parent / body.request).absolute()
    base = load_request(base_path)  # the base request itself must be valid on its own
    base_table = _parse_table(base.source, base.format)
    dataset_path = (path.parent / body.dataset.path).absolute() if body.dataset else None
    dataset_bytes = None
    if dataset_path is not None:
        dataset_bytes = read_user_file(dataset_path, "[sweep.dataset] path", MAX_DATASET_BYTES,
                                       f"a dataset is at most {MAX_DATASET_BYTES:,} bytes: split it into several sweeps")
    return SweepSource(body, path, source, fmt, base_path, base.source, base.format, base_table, dataset_path, dataset_bytes)


def expand_items(sweep: SweepSource) -> list[ItemSpec]:
    """Dataset lines (in order) x grid combinations (in the order the grid lists them); each validated as a request.

    The number of items is counted before anything is expanded: over `MAX_SWEEP_ITEMS` is refused."""
    grid = sweep.body.grid
    for key, values in grid.items():
        if not values:
            raise RequestError(f"[sweep.grid] {key!r} has no values; give at least one or remove the key")
    lines = dataset_lines(sweep) if sweep.dataset_bytes is not None else None
    count = (len(lines) if lines is not None else 1) * math.prod(len(values) for values in grid.values())
    if count > MAX_SWEEP_ITEMS:
        factors = ([f"{len(lines):,} dataset lines"] if lines is not None else []) + [f"{len(v):,} {k!r}" for k, v in grid.items()]
        sizes = " x ".join(factors)
        raise RequestError(f"the sweep has {count:,} items ({sizes}); a sweep holds at most {MAX_SWEEP_ITEMS:,} "
                           "(each item is its own snapshot): split it into several sweeps, or give fewer values")
    rows: list[tuple[int | None, dict[str, Any]]] = [*dataset_rows(sweep, lines)] if lines is not None else [(None, {})]
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


def dataset_lines(sweep: SweepSource) -> list[tuple[int, bytes]]:
    """`(1-based line number, bytes)` of every non-blank line of the dataset (not parsed yet)."""
    assert sweep.dataset_bytes is not None and sweep.dataset_path is not None
    try:
        sweep.dataset_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(f"dataset {sweep.dataset_path} is not UTF-8 (byte offset {exc.start}); save it as UTF-8") from None
    lines = [(number, line) for number, line in enumerate(sweep.dataset_bytes.splitlines(), start=1) if line.strip()]
    if not lines:
        raise RequestError(f"dataset {sweep.dataset_path} has no items; add one JSON object per line or remove [sweep.dataset]")
    return lines


def dataset_rows(sweep: SweepSource, lines: list[tuple[int, bytes]]) -> list[tuple[int, dict[str, Any]]]:
    """`(line, {dotted key: value})` per line, each decoded as strictly as a JSON request (duplicate keys, nesting,
    over-long numbers and inf/nan refused); a line that is not a non-empty object is refused."""
    rows = []
    for number, line in lines:
        where = f"dataset {sweep.dataset_path} line {number}"
        try:
            row = layout.decode_request_source(line, "json", where) if line.lstrip().startswith(b"{") else None
        except layout.RequestSourceError as exc:
            raise RequestError(str(exc)) from None
        if not row:
            raise RequestError(f'{where} must be a non-empty JSON object of dotted request keys, e.g. {{"input.prompt": "count down from 5 :"}}')
        rows.append((number, row))
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
        raise RequestError(f"{where}: key {shorten(dotted)} is not a dotted request key like 'generation.max_new_tokens'")
    if len(parts) > MAX_DEPTH:
        raise RequestError(f"{where}: key {shorten(dotted)} has {len(parts):,} parts; a request nests at most "
                           f"{MAX_DEPTH} levels: give a dotted key like 'generation.max_new_tokens'")
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
    return layout.decode_request_source(source, fmt)  # already validated by `load_request`
