"""Before anything is loaded: refuse a snapshot that was already executed, verify every frozen file against
`frozen-sha256.txt` (the plan digest) and refuse anything else in the plan, and check that genrun's code, the
entry-point modules, the model's remote code and the model files still hash to what `code.json` / `model.json`
froze (`FrozenMismatch` names what differs)."""

import hashlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple, TypeVar, cast

from pydantic import BaseModel

from genrun.schemas import CodeIdentity, CodeSet, ModelIdentity, Request, TokenBudget, layout
from genrun.schemas.digests import render_sha256sum, sha256_bytes, sha256_file
from genrun.snapshot_dir import ArtifactError, ArtifactNewer, ManifestDamaged, SnapshotDir

from ._io import RESERVE_NAME
from .backends import LoadContext
from .code_identity import code_set, genrun_code_set
from .errors import FrozenMismatch, GenrunError, SnapshotError
from .input_files import verify_input_files
from .model_identity import TreeState
from .processor_identity import frozen_processor_dir


class FrozenPlan(NamedTuple):
    """The frozen files execution reads."""

    request: Request
    code: CodeIdentity
    model: ModelIdentity
    budget: TokenBudget


class VerifiedIdentity(NamedTuple):
    """Digests recomputed before loading anything."""

    plan_digest: str
    code_digest: str
    model_digest: str


def verify_before_loading(snapshot: SnapshotDir) -> tuple[FrozenPlan, VerifiedIdentity]:
    """Not executed yet, frozen files intact, then code and model unchanged; the frozen plan and the digests."""
    refuse_executed(snapshot)
    read: dict[str, _ReadFile] = {}
    digest = verify_plan_files(snapshot, keep=read)
    verify_input_files(snapshot)  # files frozen by hash only (`[input] copy = false`)
    plan = load_frozen(snapshot, read)
    return plan, VerifiedIdentity(digest, verify_code(plan.code), verify_model(plan.model))


def refuse_executed(snapshot: SnapshotDir) -> None:
    """A snapshot runs once: its progress and result are evidence and are never overwritten."""
    for name in (layout.RESULT, layout.PROGRESS, layout.MANIFEST):
        if snapshot.has(name):
            raise SnapshotError(
                f"snapshot {snapshot.path} was already executed ({name} exists); a snapshot runs once: "
                "plan a new one with 'genrun plan REQUEST' or 'genrun run REQUEST'"
            )


class _ReadFile(NamedTuple):
    """A frozen file's bytes as `verify_plan_files` hashed them."""

    data: bytes
    sha256: str


_PARSED = (layout.REQUEST, layout.CODE, layout.MODEL, layout.TOKEN_BUDGET)
"""The frozen files execution parses (`FrozenPlan`), in its order."""


def load_frozen(snapshot: SnapshotDir, read: Mapping[str, _ReadFile] | None = None) -> FrozenPlan:
    """Parse the frozen files (a file that no longer parses is a changed plan); `read`: bytes `verify_plan_files` read
    and hashed, parsed instead of reading the files again (the plan that runs is the one verified, byte for byte)."""
    read = read or {}
    return FrozenPlan(
        _load_frozen_file(snapshot, layout.REQUEST, Request, read.get(layout.REQUEST)),
        _load_frozen_file(snapshot, layout.CODE, CodeIdentity, read.get(layout.CODE)),
        _load_frozen_file(snapshot, layout.MODEL, ModelIdentity, read.get(layout.MODEL)),
        _load_frozen_file(snapshot, layout.TOKEN_BUDGET, TokenBudget, read.get(layout.TOKEN_BUDGET)),
    )


_Frozen = TypeVar("_Frozen", bound=BaseModel)
_parsed_last: dict[tuple[str, type], tuple[str, BaseModel]] = {}
"""(frozen file, model) -> (sha256 of the bytes, the model validated from them), the last of each in this process: a
sweep's items (a server's requests) freeze the same `code.json` (hundreds of entries) and `model.json`, so a worker
validates those bytes once. Keyed by their digest, which `verify_plan_files` has just computed of the bytes parsed;
the models are frozen, so one instance serves every item."""


def _load_frozen_file(snapshot: SnapshotDir, name: str, model: type[_Frozen], read: _ReadFile | None = None) -> _Frozen:
    try:
        if read is None:
            return snapshot.read(name, model)
        last = _parsed_last.get((name, model))
        if last is not None and last[0] == read.sha256:
            return cast(_Frozen, last[1])
        parsed = snapshot.parse(name, model, read.data)
        _parsed_last[(name, model)] = (read.sha256, parsed)
        return parsed
    except ArtifactNewer as exc:  # its reason names the genrun that planned it (environment.json)
        raise SnapshotError(f"frozen file {name} in {snapshot.path} was {exc.reason}") from None
    except ArtifactError as exc:
        raise FrozenMismatch(f"frozen file {name} in {snapshot.path} cannot be read as planned ({exc.reason}); plan the request again") from None


def verify_plan_files(snapshot: SnapshotDir, *, keep: dict[str, _ReadFile] | None = None) -> str:
    """Recompute every `frozen-sha256.txt` entry; returns the plan digest. `keep`: receives the bytes hashed of the files
    execution parses (`load_frozen`), so they are read once."""
    snapshot_dir = snapshot.path
    try:
        manifest = snapshot.read_manifest(layout.FROZEN_MANIFEST)
    except ManifestDamaged as exc:
        raise FrozenMismatch(f"{snapshot_dir / layout.FROZEN_MANIFEST} is malformed ({exc.reason}); the plan cannot be trusted: "
                             "plan the request again") from None
    entries = manifest.entries
    current: dict[str, str] = {}  # the files that are there, for naming a changed one's digest

    def digest_of(rel: str) -> str | None:
        digest = _sha256_of_file(snapshot, rel, keep if rel in _PARSED else None)
        if digest is not None:
            current[rel] = digest
        return digest

    sources = [name for name in snapshot.top_names() if layout.is_request_source(name)]
    found = layout.check_frozen(entries, sources, digest_of)
    if found.not_frozen:
        raise FrozenMismatch(f"{layout.FROZEN_MANIFEST} does not list {', '.join(found.not_frozen)}; the plan was altered: plan the request again")
    if found.missing:
        raise FrozenMismatch(f"frozen file {found.missing[0]} is missing from {snapshot_dir}; the plan was altered: plan the request again")
    if found.changed:
        rel = found.changed[0]
        raise FrozenMismatch(
            f"frozen file {rel} changed since planning (sha256 {current[rel][:12]}… != frozen {entries[rel][:12]}…); "
            "a plan is never edited: plan the request again"
        )
    refuse_foreign_entries(snapshot, entries)
    return manifest.digest  # the plan digest, of the bytes checked above


def _sha256_of_file(snapshot: SnapshotDir, rel: str, keep: dict[str, _ReadFile] | None = None) -> str | None:
    """sha256 of entry `rel` when it is (or links to) a regular file, else `None` (a link is refused by name afterwards,
    by `refuse_foreign_entries`). `keep`: the bytes of a regular file within its read bound are kept there, by `rel`
    (one over it is hashed as any file, and its parse refuses it)."""
    if (found := snapshot.lstat(rel)) is None:
        return None
    if stat.S_ISLNK(found.st_mode):
        return sha256_file(snapshot.path / rel) if (snapshot.path / rel).is_file() else None
    if not stat.S_ISREG(found.st_mode):
        return None
    if keep is not None:
        try:
            data = snapshot.read_bytes(rel)
        except ArtifactError:
            pass
        else:
            keep[rel] = _ReadFile(data, sha256_bytes(data))
            return keep[rel].sha256
    with os.fdopen(snapshot.open_file(rel), "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def refuse_foreign_entries(snapshot: SnapshotDir, frozen: Mapping[str, str]) -> None:
    """Nothing but the frozen files (and regular sign-off records in a real `signoffs/` directory) may be in a plan:
    a planted link (`outputs/` -> elsewhere) would make execute write, and the seal chmod, outside the store."""
    snapshot_dir = snapshot.path
    signoffs = snapshot.lstat(layout.SIGNOFFS_DIR)
    if signoffs is not None and not stat.S_ISDIR(signoffs.st_mode):
        raise FrozenMismatch(f"{snapshot_dir / layout.SIGNOFFS_DIR} is not a directory (a link?); a plan holds only its frozen files: "
                             "remove it or plan again")
    for rel, st in snapshot.entries():
        in_signoffs = rel.startswith(layout.SIGNOFFS_DIR + "/")
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
            raise FrozenMismatch(f"{snapshot_dir / rel} is not a regular file (a link, FIFO or device); execute never writes through one: "
                                 "remove it or plan again")
        if st.st_nlink > 1 and not in_signoffs:
            raise FrozenMismatch(f"{snapshot_dir / rel} has {st.st_nlink} hard links (the same file has another name, perhaps outside "
                                 "the store, which the seal would make read-only): replace it by a copy or plan again")
        if rel not in (layout.FROZEN_MANIFEST, RESERVE_NAME) and rel not in frozen and not in_signoffs:
            raise FrozenMismatch(f"{snapshot_dir / rel} is not listed in {layout.FROZEN_MANIFEST}; a plan holds only its frozen files: "
                                 "remove it or plan again")


def verify_code(code: CodeIdentity) -> str:
    """genrun's code digest now, which must equal the frozen one; entry-point and remote code are checked too."""
    current = genrun_code_set()
    _compare_code("genrun's own code", code.genrun, current, "run the genrun version that planned it, or plan again with this one")
    for label, frozen in (("the entry-point code", code.entrypoint), ("the model's remote code", code.remote_code)):
        if frozen is not None:
            _compare_code(label, frozen, _rehash(frozen), "restore it, or plan the request again")
    return current.digest


def _rehash(frozen: CodeSet) -> CodeSet:
    root = Path(frozen.root)
    present = [root / f.path for f in frozen.files if (root / f.path).is_file()]
    return code_set(root, present)


def _compare_code(label: str, frozen: CodeSet, current: CodeSet, fix: str) -> None:
    if current.digest == frozen.digest:
        return
    raise FrozenMismatch(f"{label} changed since planning ({describe_differences(frozen.files, current.files)}); {fix}")


def describe_differences(frozen: tuple, current: tuple) -> str:
    """`changed: a, b; added: c; removed: d` from two `FileDigest` lists."""
    before = {f.path: f.sha256 for f in frozen}
    after = {f.path: f.sha256 for f in current}
    parts = []
    for word, names in (
        ("changed", sorted(p for p in before.keys() & after.keys() if before[p] != after[p])),
        ("added", sorted(after.keys() - before.keys())),
        ("removed", sorted(before.keys() - after.keys())),
    ):
        if names:
            parts.append(f"{word}: {', '.join(names)}")
    return "; ".join(parts) or "same files, different root"


_models_verified: dict[str, tuple[TreeState, str]] = {}
"""Model directory -> (the state of its folders and files taken before they last matched a digest, that digest): for this
process only. A sweep worker verifies the model before each item; a tree whose every state is unchanged holds the files
that were hashed (`model_identity.TreeState`), so the item is checked with a stat per file instead of the hash cache's
read per file."""


def verify_model(model: ModelIdentity) -> str:
    """Re-digest the frozen model directory (cheap through the hash cache, and in a process that matched the same tree
    before, a stat per file); it must match `model.json`."""
    from .model_identity import digest_model_files, tree_state, tree_unchanged

    root = Path(model.resolved_path)
    if not root.is_dir():
        raise FrozenMismatch(f"model directory {root} (model.json resolved_path) no longer exists; restore it or plan again")
    known = _models_verified.get(model.resolved_path)
    if known is not None and known[1] == model.digest and tree_unchanged(known[0]):
        return model.digest
    before = tree_state(root)  # taken before hashing: a file changed while it is hashed then differs from this state
    try:
        files = digest_model_files(root)
    except GenrunError as exc:
        raise FrozenMismatch(f"model directory {root} can no longer be identified: {exc}") from None
    digest = sha256_bytes(render_sha256sum((f.path, f.sha256) for f in files))
    if digest != model.digest:
        raise FrozenMismatch(
            f"the model files in {root} changed since planning ({describe_differences(model.files, files)}); restore them or plan again"
        )
    if before is not None:
        _models_verified[model.resolved_path] = (before, digest)
    return digest


def entrypoint_paths(code: CodeIdentity) -> tuple[Path, ...]:
    """Where planning found the entry-point/loader modules (the request file's directory for local modules)."""
    if code.entrypoint is None:
        return ()
    return (Path(code.entrypoint.root),)


def load_context(plan: FrozenPlan, device: str, snapshot_dir: Path) -> LoadContext:
    """What the backend needs to load this plan's model."""
    return LoadContext(request=plan.request, model=plan.model, code=plan.code, device=device, import_paths=entrypoint_paths(plan.code),
                       frozen_processor_dir=frozen_processor_dir(snapshot_dir, plan.model))
