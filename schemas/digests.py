"""sha256sum-format manifests and the two snapshot digests (plan and snapshot). Pure stdlib."""

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
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
    """`sha256sum` text -> {relative_path: hex}; raises ValueError naming the first malformed line.

    Lines end at `\n` only, as `sha256sum -c` reads them: a VT, FF, CR or U+2028 put in place of a newline stays
    inside its line (`str.splitlines` would have split there and read two good lines out of an altered file).
    That the bytes are exactly what the sealer wrote is `canonical_sha256sum_problem`'s question."""
    entries: dict[str, str] = {}
    text = data.decode()
    lines = text[:-1].split("\n") if text.endswith("\n") else (text.split("\n") if text else [])
    for number, line in enumerate(lines, start=1):
        digest, sep, path = line.partition("  ")
        if not sep or not _SHA256_HEX.fullmatch(digest) or not path:
            raise ValueError(f"line {number} is not '<64 hex digits>  <path>': {line!r}")
        if not _is_inside_path(path):
            raise ValueError(f"line {number} names {path!r}, which cannot be a file of the snapshot (a relative path without control characters)")
        if path in entries:
            raise ValueError(f"line {number} lists {path!r} a second time")
        entries[path] = digest
    return entries


def canonical_sha256sum_problem(entries: Mapping[str, str], digest: str) -> str | None:
    """Why a sha256sum file whose entries parsed as `entries` and whose bytes hash to `digest` is not the text
    `render_sha256sum` writes for them (reordered lines, CRLF, no final newline, ...); `None` when it is.

    The file's own sha256 is a digest sign-offs bind to, so the same entries in other bytes are an altered file."""
    if sha256_bytes(render_sha256sum(entries.items())) == digest:
        return None
    return ("its bytes are not those the sealer writes for its entries (one '<sha256>  <path>\\n' line per file, sorted by "
            "path, each ending in a newline): it was rewritten after it was made")


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
    """Every file the manifest must cover: all regular files except the manifest itself and `signoffs/` (a link to a file
    too, so that the seal names it; a linked folder is not entered). Listed with `os.scandir`, no path object per entry:
    a sweep worker seals an item every few milliseconds."""
    found = []
    stack = [(os.fspath(snapshot_dir), "")]
    while stack:
        folder, prefix = stack.pop()
        with os.scandir(folder) as listing:
            for entry in listing:
                rel = prefix + entry.name
                if rel == layout.MANIFEST or rel == layout.SIGNOFFS_DIR:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, rel + "/"))
                elif entry.is_file():  # follows a link, as the seal's own open then refuses it
                    found.append(rel)
    return sorted(found)
