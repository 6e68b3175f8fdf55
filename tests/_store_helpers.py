"""Small stores built with the real store functions (create_snapshot, seal_snapshot) for the index and `ls` tests.

Runs are stand-ins (a result, a stop record, a request with a backend), sealed exactly as a run seals; sweeps are a
sweep plan naming their items. What `ls` reads of each is what a real run writes (the same file names and keys).
"""

import sqlite3
from pathlib import Path

import orjson

from genrun.runner.store import create_snapshot, seal_snapshot
from genrun.runner.store_index import INDEX_DIR, INDEX_FILE
from genrun.schemas import layout


def make_run(store: Path, name: str = "run", *, status: str = "succeeded", reasons: tuple[str, ...] = ("eos",),
             generated: int = 8, backend: str = "transformers", seal: bool = True) -> Path:
    """A planned snapshot given a result and a stop record, sealed unless `seal` is False (then it is `incomplete`)."""
    def freeze(tmp: Path) -> None:
        request = {"name": name, "model": {"path": "models/tiny", "backend": backend}}
        (tmp / layout.REQUEST).write_bytes(orjson.dumps(request))

    snapshot = create_snapshot(Path(store), name, freeze)
    (snapshot / layout.RESULT).write_bytes(orjson.dumps({"status": status, "generated": generated, "unit": "token"}))
    stop = {"sequences": [{"index": i, "reason": r} for i, r in enumerate(reasons)]}
    (snapshot / layout.STOP).write_bytes(orjson.dumps(stop))
    if seal:
        seal_snapshot(snapshot)
    return snapshot


def make_sweep(store: Path, items: list[Path], name: str = "sweep") -> Path:
    """A sealed sweep snapshot whose plan lists `items` (its result is left out: the plan alone names the members)."""
    def freeze(tmp: Path) -> None:
        plan = {"items": [{"snapshot_id": item.name} for item in items]}
        (tmp / layout.SWEEP_PLAN).write_bytes(orjson.dumps(plan))

    sweep = create_snapshot(Path(store), name, freeze)
    seal_snapshot(sweep)
    return sweep


def index_file(store: Path) -> Path:
    return store / INDEX_DIR / INDEX_FILE


def indexed_ids(store: Path) -> set[str]:
    with sqlite3.connect(index_file(store)) as db:
        return {r[0] for r in db.execute("SELECT id FROM rows")}


def reseal_as_failed(victim: Path) -> None:
    """A tamperer rewrites result.json (failed, 99 tokens) and seals it again: the digest the index stored no longer matches."""
    for name in (layout.RESULT, layout.MANIFEST):
        (victim / name).chmod(0o644)
    (victim / layout.RESULT).write_bytes(orjson.dumps({"status": "failed", "generated": 99, "unit": "token"}))
    manifest = (victim / layout.MANIFEST).read_text().splitlines()
    from genrun.schemas.digests import sha256_file

    (victim / layout.MANIFEST).write_text("\n".join(
        f"{sha256_file(victim / layout.RESULT)}  {layout.RESULT}" if line.endswith(f"  {layout.RESULT}") else line for line in manifest) + "\n")
