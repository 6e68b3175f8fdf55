"""sha256sum-format manifests and the two snapshot digests (plan and snapshot). Pure stdlib."""

import hashlib
import re
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
        if not sep or not _SHA256_HEX.fullmatch(digest) or not path:
            raise ValueError(f"line {number} is not '<64 hex digits>  <path>': {line!r}")
        if not _is_inside_path(path):
            raise ValueError(f"line {number} names {path!r}, which cannot be a file of the snapshot (a relative path without control characters)")
        if path in entries:
            raise ValueError(f"line {number} lists {path!r} a second time")
        entries[path] = digest
    return entries


_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def _is_inside_path(path: str) -> bool:
    """A relative posix path of plain parts (no `.`, `..`, empty part) and no control character: what the sealer writes."""
    parts = path.split("/")
    return not any(ord(c) < 32 or c == "\x7f" for c in path) and all(part not in ("", ".", "..") for part in parts)


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
