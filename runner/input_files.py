"""Media files named by `[input] audio` / `images`: validated and identified at plan time, frozen into
`inputs/` (or, with `[input] copy = false`, only their path, size and sha256), re-checked at execution.

An unreadable or undecodable file is a `RequestError` (exit 2) before anything is written.
"""

import os
from pathlib import Path

from genrun.schemas import InputFile, InputFiles, InputSpec, Request, layout
from genrun.schemas.digests import sha256_file
from genrun.snapshot_dir import SnapshotDir

from .backends._audio import AudioUndecodable, audio_facts
from .backends._images import ImageUndecodable, image_facts
from .errors import FrozenMismatch, RequestError

_FIELD = {"audio": "[input] audio", "image": "[input] images"}


def identify_input_files(spec: InputSpec, base_dir: Path) -> InputFiles | None:
    """Check every media file (exists, readable, decodable) and describe it; `None` when the request names none."""
    media = spec.media_files()
    if not media:
        return None
    files = []
    for kind, row, given in media:
        path = (base_dir / given).resolve()
        where = f"{_FIELD[kind]}[{row}] = {given!r} ({path})"
        if not path.is_file():
            raise RequestError(f"{where}: no such file; paths are relative to the request file")
        if not os.access(path, os.R_OK):
            raise RequestError(f"{where}: not readable (permission denied); make it readable or copy it somewhere readable")
        try:
            facts = {"audio": audio_facts(path)} if kind == "audio" else {"image": image_facts(path)}
        except (AudioUndecodable, ImageUndecodable) as exc:
            fix = "give a WAV/FLAC/OGG/MP3 file" if kind == "audio" else "give a PNG/JPEG/WebP/... image"
            raise RequestError(f"{where}: cannot be decoded as {kind} ({exc}); {fix}") from None
        frozen = f"{layout.INPUTS_DIR}/{row}-{kind}-{path.name}" if spec.copy_files else None
        files.append(InputFile(kind=kind, row=row, source_path=str(path), frozen_path=frozen,
                               size_bytes=path.stat().st_size, sha256=sha256_file(path), **facts))
    return InputFiles(copied=spec.copy_files, files=tuple(files))


def freeze_input_files(files: InputFiles, snapshot: SnapshotDir) -> None:
    """Write `input-files.json` and copy the files into `inputs/` (both then listed in `frozen-sha256.txt`)."""
    for item in files.files:
        if item.frozen_path is not None:
            if snapshot.copy_in(item.frozen_path, Path(item.source_path)) != item.sha256:
                raise RequestError(f"{item.source_path} changed while it was being planned; plan again once it is stable")
    snapshot.write(layout.INPUT_FILES, files)


def read_input_files(snapshot: SnapshotDir | Path) -> InputFiles | None:
    """The frozen `input-files.json`, `None` for a request without media files (`snapshot`: the run's `ctx.snapshot`; a
    path is still taken, for backends written against earlier versions)."""
    snapshot = snapshot if isinstance(snapshot, SnapshotDir) else SnapshotDir(snapshot)
    return snapshot.read_optional(layout.INPUT_FILES, InputFiles)


def verify_input_files(snapshot: SnapshotDir) -> InputFiles | None:
    """Before loading: re-hash every file frozen by hash only (`copy = false`); a changed or missing file is refused.

    Copied files are covered by `frozen-sha256.txt`, which execute verifies first."""
    files = read_input_files(snapshot)
    for item in files.files if files is not None else ():
        if item.frozen_path is not None:
            continue
        source = Path(item.source_path)
        if not source.is_file():
            raise FrozenMismatch(f"input file {source} ({item.kind} row {item.row}, frozen by hash with copy = false) no longer exists; "
                                 "restore it, or plan the request again")
        actual = sha256_file(source)
        if actual != item.sha256:
            raise FrozenMismatch(f"input file {source} ({item.kind} row {item.row}) changed since planning "
                                 f"(sha256 {actual[:12]}… != frozen {item.sha256[:12]}…); restore it, or plan the request again")
    return files


def input_path(snapshot_dir: Path, item: InputFile) -> Path:
    """Where execution reads the file: the frozen copy, else the (re-hashed) original."""
    return snapshot_dir / item.frozen_path if item.frozen_path is not None else Path(item.source_path)


def measured_budget_request(request: Request, files: InputFiles | None) -> Request:
    """The request the budget is estimated from (the frozen request is unchanged): media paths made absolute (the
    planned files), and `[budget] input_seconds` replaced by the longest audio row measured from the files (the hint
    is only used when no audio file is given)."""
    if files is None:
        return request
    paths = {kind: tuple(f.source_path for f in files.files if f.kind == kind) for kind in ("audio", "image")}
    spec = request.input.model_copy(update={"audio": paths["audio"] or None, "images": paths["image"] or None})
    seconds = [f.audio.seconds for f in files.files if f.audio is not None]
    budget = request.budget.model_copy(update={"input_seconds": max(seconds)}) if seconds else request.budget
    return request.model_copy(update={"input": spec, "budget": budget})
