"""`[model] processor`: a processor directory other than the checkpoint's, identified and frozen at plan time.

Every file's sha256 goes into `model.json` (`processor`) and the files are copied into the snapshot's
`processor/`, so they are listed in `frozen-sha256.txt` (execute refuses a changed copy) and in the
seal's manifest (verify fails on one). Execution loads the frozen copy, never the original directory:
what the plan froze is what runs. A processor is small (configs, vocabularies); a directory that
holds weight files is refused rather than copied.
"""

from pathlib import Path

from genrun.schemas import FileDigest, ModelIdentity, ModelSpec, ProcessorIdentity, layout
from genrun.schemas.digests import render_sha256sum, sha256_bytes
from genrun.snapshot_dir import SnapshotDir

from .errors import RequestError
from .model_identity import WEIGHT_SUFFIXES, digest_model_files

FIELD = "[model] processor"


def identify_processor(spec: ModelSpec, base_dir: Path) -> ProcessorIdentity | None:
    """Resolve `[model] processor` (relative to the request file) and digest its files; `None` when not given."""
    if spec.processor is None:
        return None
    given = Path(spec.processor).expanduser()
    path = (given if given.is_absolute() else base_dir / given).resolve()
    where = f"{FIELD} = {spec.processor!r} ({path})"
    if not path.is_dir():
        what = "is a file, not a directory" if path.exists() else "does not exist"
        raise RequestError(f"{where} {what}; give the directory a processor was saved to (processor.save_pretrained(dir)), "
                           "relative to the request file")
    try:
        files = digest_model_files(path)
    except RequestError as exc:
        raise RequestError(f"{where}: {exc}") from None
    weights = [f.path for f in files if f.path.endswith(WEIGHT_SUFFIXES)]
    if weights:
        raise RequestError(f"{where} holds weight files ({', '.join(weights[:3])}); the processor is copied into the snapshot: "
                           "give a directory with only the processor's files (processor.save_pretrained(dir))")
    digests = tuple(FileDigest(path=f.path, size=f.size, sha256=f.sha256) for f in files)
    return ProcessorIdentity(requested=spec.processor, resolved_path=str(path), frozen_dir=layout.PROCESSOR_DIR, files=digests,
                             digest=sha256_bytes(render_sha256sum((f.path, f.sha256) for f in digests)))


def freeze_processor(identity: ProcessorIdentity, snapshot: SnapshotDir) -> None:
    """Copy the processor's files into `<snapshot>/processor/`; a file that changed since it was digested is refused."""
    for item in identity.files:
        if snapshot.copy_in(f"{identity.frozen_dir}/{item.path}", Path(identity.resolved_path) / item.path) != item.sha256:
            raise RequestError(f"{FIELD} file {item.path!r} in {identity.resolved_path} changed while it was being planned; "
                               "plan again once it is stable")


def frozen_processor_dir(snapshot_dir: Path, model: ModelIdentity) -> Path | None:
    """The frozen copy execution loads the processor from, `None` when the checkpoint's own is used."""
    return snapshot_dir / layout.PROCESSOR_DIR if model.processor is not None else None  # the layout's name, not a path read from the file
