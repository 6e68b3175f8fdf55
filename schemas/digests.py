"""sha256sum-format manifests and the two snapshot digests (plan and snapshot). Pure stdlib."""

import hashlib
from collections.abc import Iterable
from pathlib import Path

from . import layout


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's content (hashlib.file_digest: the single-core limit, no Python loop)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of bytes."""
    return hashlib.sha256(data).hexdigest()


def render_sha256sum(entries: Iterable[tuple[str, str]]) -> bytes:
    """`(relative_path, hex)` pairs -> `sha256sum` text (two spaces, sorted by path), checkable with `sha256sum -c`."""
    lines = [f"{digest}  {path}\n" for path, digest in sorted(entries)]
    return "".join(lines).encode()


def parse_sha256sum(data: bytes) -> dict[str, str]:
    """`sha256sum` text -> {relative_path: hex}; raises ValueError naming the first malformed line."""
    entries: dict[str, str] = {}
    for number, line in enumerate(data.decode().splitlines(), start=1):
        digest, sep, path = line.partition("  ")
        if not sep or len(digest) != 64 or not path:
            raise ValueError(f"line {number} is not '<sha256>  <path>': {line!r}")
        entries[path] = digest
    return entries


def plan_digest(snapshot_dir: Path) -> str:
    """sha256 of `frozen-sha256.txt`: what an `approve` sign-off binds to."""
    return sha256_file(Path(snapshot_dir) / layout.FROZEN_MANIFEST)


def snapshot_digest(snapshot_dir: Path) -> str:
    """sha256 of `manifest-sha256.txt`: what `accept`/`reject` sign-offs bind to."""
    return sha256_file(Path(snapshot_dir) / layout.MANIFEST)


def manifest_candidates(snapshot_dir: Path) -> list[str]:
    """Every file the manifest must cover: all regular files except the manifest itself and `signoffs/`."""
    root = Path(snapshot_dir)
    found = []
    for path in root.rglob("*"):
        rel = path.relative_to(root).as_posix()
        if rel == layout.MANIFEST or rel.split("/")[0] == layout.SIGNOFFS_DIR or not path.is_file():
            continue
        found.append(rel)
    return sorted(found)
