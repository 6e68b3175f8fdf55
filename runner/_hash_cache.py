"""Persistent sha256 cache keyed by (st_dev, st_ino, st_size, st_mtime_ns), so re-planning the same weights reads nothing.

One small file per key under `<cache dir>/hashes-v1/`, holding one `sha256sum` line
(`<hex>  <path>`; the path is informational). One file per key makes concurrent planners
safe without locks: each entry is written atomically (temporary file + `os.replace`), two
writers of the same key write the same digest, and no writer rewrites another's entries.

The key is the one DVC's stat cache uses. Its known blind spot: a file rewritten in place with
the same size whose mtime_ns is then restored (or not advanced, within the filesystem's clock
tick) keeps its old digest. Touching the file (a new mtime) forces a re-hash.

The cache is an optimisation only: an unreadable, corrupt or unwritable cache never fails a
plan; it is reported on stderr (once per cause) and the digest is computed instead.

A plan holds its new entries (`held_until_planned`) and writes them only once it is in the store:
a refused or interrupted plan leaves nothing behind, not even a cache entry.
"""

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path


_ENTRY_DIR = "hashes-v1"
_LINE = re.compile(r"^([0-9a-f]{64})  (.*)\n?$", re.DOTALL)
_warned: set[str] = set()
# stat key -> (sha256, path) computed inside `held_until_planned`, not yet written
_held: ContextVar[dict[str, tuple[str, Path]] | None] = ContextVar("genrun_held_hashes", default=None)


def cache_dir() -> Path:
    """`$GENRUN_CACHE_DIR`, else `$XDG_CACHE_HOME/genrun`, else `~/.cache/genrun` (read at each call)."""
    explicit = os.environ.get("GENRUN_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "genrun"
    return Path.home() / ".cache" / "genrun"


def stat_key(st: os.stat_result) -> str:
    """The cache key of a file's stat: `<dev>-<ino>-<size>-<mtime_ns>`."""
    return f"{st.st_dev}-{st.st_ino}-{st.st_size}-{st.st_mtime_ns}"


def lookup(st: os.stat_result) -> str | None:
    """The cached sha256 for this stat, or `None` (missing, unreadable or corrupt entries are misses)."""
    held = _held.get()
    if held is not None and stat_key(st) in held:
        return held[stat_key(st)][0]
    entry = cache_dir() / _ENTRY_DIR / stat_key(st)
    try:
        text = entry.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        _warn(f"read:{entry}", f"ignoring unreadable hash cache entry {entry} ({exc}); hashing the file instead")
        return None
    match = _LINE.match(text)
    if match is None:
        _warn(f"corrupt:{entry}", f"ignoring corrupt hash cache entry {entry}; hashing the file instead")
        return None
    return match.group(1)


def store(st: os.stat_result, sha256: str, path: Path) -> None:
    """Remember `sha256` for this stat (held while a plan is in progress); a failure to write is reported once, never raised."""
    held = _held.get()
    if held is not None:
        held[stat_key(st)] = (sha256, path)
        return
    _write(stat_key(st), sha256, path)


@contextmanager
def held_until_planned() -> Iterator[None]:
    """Entries stored inside are written when the block ends without an exception, and never otherwise (nested: the
    outer block decides). Lookups inside see them, so a sweep hashes a model its items share once."""
    outer = _held.get()
    held = dict(outer or {})
    token = _held.set(held)
    try:
        yield
    finally:
        _held.reset(token)
    if outer is not None:
        outer.update(held)
        return
    for key, (sha256, path) in held.items():
        _write(key, sha256, path)


def _write(key: str, sha256: str, path: Path) -> None:
    from ._io import write_bytes_atomic  # here: `cache_dir`'s other user, the listing cache, needs none of _io's imports

    directory = cache_dir() / _ENTRY_DIR
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(directory / key, f"{sha256}  {path}\n".encode())
    except OSError as exc:
        _warn(f"write:{cache_dir()}", f"cannot write the hash cache in {cache_dir()} ({exc}); "
              "digests are still computed, but the next plan will hash the files again "
              "(set GENRUN_CACHE_DIR to a writable directory)")


def _warn(cause: str, message: str) -> None:
    """One `genrun: warning:` line on stderr per distinct cause in this process."""
    if cause in _warned:
        return
    _warned.add(cause)
    sys.stderr.write(f"genrun: warning: {message}\n")
    sys.stderr.flush()
