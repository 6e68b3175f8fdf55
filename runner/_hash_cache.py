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
"""

import os
import re
import sys
from pathlib import Path

from ._io import write_bytes_atomic

_ENTRY_DIR = "hashes-v1"
_LINE = re.compile(r"^([0-9a-f]{64})  (.*)\n?$", re.DOTALL)
_warned: set[str] = set()


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
    """Remember `sha256` for this stat; a failure to write is reported once on stderr, never raised."""
    directory = cache_dir() / _ENTRY_DIR
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(directory / stat_key(st), f"{sha256}  {path}\n".encode())
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
