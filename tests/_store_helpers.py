"""Small stores built with the real store functions (create_snapshot, seal_snapshot) for the index and `ls` tests.

Runs are stand-ins (a result, a stop record, a request with a backend), sealed exactly as a run seals; sweeps are a
sweep plan naming their items. What `ls` reads of each is what a real run writes (the same file names and keys).
"""

import os
import sqlite3
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import orjson

from genrun.runner.store import create_snapshot, seal_snapshot
from genrun.schemas import layout
from genrun.snapshot_dir import SnapshotDir


def make_run(store: Path, name: str = "run", *, status: str = "succeeded", reasons: tuple[str, ...] = ("eos",),
             generated: int = 8, backend: str = "transformers", seal: bool = True) -> Path:
    """A planned snapshot given a result and a stop record, sealed unless `seal` is False (then it is `incomplete`)."""
    def freeze(tmp: SnapshotDir) -> None:
        request = {"name": name, "model": {"path": "models/tiny", "backend": backend}}
        tmp.write_bytes(layout.REQUEST, orjson.dumps(request))

    snapshot = create_snapshot(Path(store), name, freeze)
    (snapshot / layout.RESULT).write_bytes(orjson.dumps({"status": status, "generated": generated, "unit": "token"}))
    stop = {"sequences": [{"index": i, "reason": r} for i, r in enumerate(reasons)]}
    (snapshot / layout.STOP).write_bytes(orjson.dumps(stop))
    if seal:
        seal_snapshot(snapshot)
    return snapshot


def make_sweep(store: Path, items: list[Path], name: str = "sweep") -> Path:
    """A sealed sweep snapshot whose plan lists `items` (its result is left out: the plan alone names the members)."""
    def freeze(tmp: SnapshotDir) -> None:
        plan = {"items": [{"snapshot_id": item.name} for item in items]}
        tmp.write_bytes(layout.SWEEP_PLAN, orjson.dumps(plan))

    sweep = create_snapshot(Path(store), name, freeze)
    seal_snapshot(sweep)
    return sweep


def index_file(store: Path) -> Path:
    """The user's listing cache of `store` (in the cache folder the tests point at, never in the store)."""
    from genrun.runner.listing_cache import cache_file

    return cache_file(store)


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


class Signers(NamedTuple):
    """Real ed25519 keys (made by ssh-keygen) of some principals, and an allowed-signers file listing them."""

    keys: dict[str, Path]
    allowed: Path


def make_signers(root: Path, principals: Sequence[str], options: str = "") -> Signers:
    """A key for each principal under `root`; `options` (e.g. `valid-before="20260101"`) on every allowed-signers line."""
    root.mkdir(parents=True, exist_ok=True)
    keys, lines = {}, []
    for n, principal in enumerate(principals):
        key = root / f"key{n}"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", principal, "-f", str(key)], check=True)
        keys[principal] = key
        public = " ".join(key.with_suffix(".pub").read_text().split()[:2])
        lines.append(f"{principal} {options} {public}" if options else f"{principal} {public}")
    allowed = root / "allowed_signers"
    allowed.write_text("\n".join(lines) + "\n")
    return Signers(keys, allowed)


def sign(snapshot: Path, by: str, signers: Signers, decision: str = "accept") -> None:
    """A signed sign-off record by `by` (its key), as `genrun signoff --key` writes it."""
    from conftest import run_cli

    done = run_cli("signoff", snapshot, "--decision", decision, "--by", by, "--key", signers.keys[by], "--allowed-signers", signers.allowed)
    assert done.returncode == 0, done.stderr


def link_copies(seed: Path, store: Path, count: int) -> list[Path]:
    """`count` copies of the sealed snapshot `seed` under new ids, one second apart, their files hard links (sealed files
    are read-only): a big store in a fraction of the time real runs take."""
    from datetime import datetime, timedelta, timezone

    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    store.mkdir(parents=True, exist_ok=True)
    made = []
    for i in range(count):
        target = store / f"{(start + timedelta(seconds=i)).strftime('%Y%m%dT%H%M%SZ')}-copy-{i:06x}"
        for folder, _, files in os.walk(seed):
            here = target / Path(folder).relative_to(seed)
            here.mkdir()
            for name in files:
                os.link(Path(folder) / name, here / name)
        made.append(target)
    return made
