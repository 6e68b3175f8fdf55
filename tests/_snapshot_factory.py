"""Minimal snapshot directories built with the real store functions (create_snapshot, seal_snapshot).

For tests of code that only needs the snapshot *container* (digests, sign-offs, listing), not a
real model run. The file contents are small stand-ins; the layout, the frozen manifest, the seal
and the read-only bits all come from `genrun.runner.store`.
"""

from pathlib import Path

import orjson

from genrun.runner.store import create_snapshot, seal_snapshot
from genrun.schemas import layout
from genrun.snapshot_dir import SnapshotDir


def make_planned_snapshot(store: Path, name: str = "factory", request: dict | None = None) -> Path:
    """A planned (frozen, not executed) snapshot whose `request.json` holds `request`."""
    body = request if request is not None else {"name": name, "note": "stand-in request for tests"}

    def freeze(tmp: SnapshotDir) -> None:
        tmp.write_bytes(layout.REQUEST, orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
        tmp.write_bytes(f"{layout.REQUEST_SOURCE_PREFIX}.json", orjson.dumps(body))

    return create_snapshot(Path(store), name, freeze)


def make_sealed_snapshot(store: Path, name: str = "factory", result: dict | None = None) -> Path:
    """A planned snapshot with a stand-in result file, sealed (manifest written, files 0o444)."""
    snapshot = make_planned_snapshot(store, name)
    (snapshot / layout.RESULT).write_bytes(orjson.dumps(result if result is not None else {"status": "succeeded"}))
    seal_snapshot(snapshot)
    return snapshot
