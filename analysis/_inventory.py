"""The files of a snapshot as analysis sees them: every regular file the sealer would hash, its size, mode, links and
(when asked) sha256, read without following a link or blocking on a FIFO; anything else a snapshot may not hold is
named in `problems` and never opened."""

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from genrun._safe_read import UnsafeFile, kind_of, open_beneath
from genrun.schemas import layout
from genrun.snapshot_dir import SnapshotDir


@dataclass(frozen=True)
class FileFact:
    """One regular file of the snapshot (paths relative to its root, `/`-separated)."""

    size: int
    """Bytes."""
    sha256: str | None
    """Hex digest; `None` when loaded without hashing (report, diff)."""
    mode: int = 0o444
    """Permission bits as found (`st_mode & 0o7777`)."""
    links: int = 1
    """Hard links to the file (`st_nlink`): above one, the same file is also elsewhere, outside the snapshot's control."""



def inventory(root: Path, hash_files: bool, problems: dict[str, str]) -> dict[str, FileFact]:
    """Every regular file the sealer would hash (not `signoffs/`), plus the manifest; anything else is a problem.

    Links, FIFOs and devices are named in `problems` and never opened, so a planted link cannot stand in
    for a sealed file, and a FIFO cannot hang the reader.
    """
    files: dict[str, FileFact] = {}

    def unlistable(rel: str, exc: OSError) -> None:  # named, and the rest of the snapshot still read
        problems[rel] = f"cannot be listed: {exc.strerror or exc}; its files cannot be checked (analysis needs read access to them)"

    try:
        entries = sorted(SnapshotDir(root).entries(skip_top=(layout.SIGNOFFS_DIR,), empty_dirs=True, unlistable=unlistable))
    except OSError as exc:
        problems["."] = f"cannot list the snapshot: {exc.strerror or exc}"
        return files
    for rel, st in entries:
        if not is_utf8(rel):  # no genrun writes such a name; JSON (and a browser) cannot carry it, so it is shown escaped
            shown = rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            problems[shown] = "has a name that is not valid UTF-8 (no genrun writes one; added to the snapshot): remove it"
            continue
        if stat.S_ISDIR(st.st_mode):
            if rel != layout.OUTPUTS_DIR:  # a run with no output files leaves outputs/ empty
                problems[rel + "/"] = "is an empty directory no manifest can list (added to the snapshot): remove it"
            continue
        if not stat.S_ISREG(st.st_mode):
            target = f" to {os.readlink(root / rel)!r}" if stat.S_ISLNK(st.st_mode) else ""
            problems[rel] = f"is {kind_of(st.st_mode)}{target}, not a regular file; a snapshot holds regular files only: remove it"
            continue
        try:
            digest = sha256_regular(root, rel) if hash_files else None
        except (OSError, UnsafeFile) as exc:
            problems[rel] = f"cannot read: {exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)
            continue
        files[rel] = FileFact(size=st.st_size, sha256=digest, mode=stat.S_IMODE(st.st_mode), links=st.st_nlink)
    return files


def is_utf8(name: str) -> bool:
    """Whether a file name as `os` decoded it (bytes that are not UTF-8 become surrogates) is valid UTF-8."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def sha256_regular(root: Path, rel: str) -> str:
    """Streamed sha256 of a regular file opened without following a link (nor a linked folder) or blocking on a FIFO."""
    fd = open_beneath(root, rel)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafeFile(f"is {kind_of(os.fstat(fd).st_mode)}, not a regular file")
        return hashlib.file_digest(f, "sha256").hexdigest()
