"""`model.json`: which directory the weights come from, and the sha256 of every file in it.

Hub ids resolve through the local Hugging Face cache only; genrun never downloads. Digests
come, cheapest first, from the HF cache blob name (for LFS files it is the content sha256),
from the local hash cache (`genrun.runner._hash_cache`), or from hashing the file, several files at
once across cores.
"""

import os
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal, NamedTuple

from genrun.schemas import ModelFile, ModelIdentity, ModelSpec
from genrun.schemas.digests import render_sha256sum, sha256_bytes, sha256_file

from . import _hash_cache
from .errors import RequestError

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".msgpack", ".h5",
                   # Engines a loop drives: ONNX (and its external-data file), MNN, TFLite, MLX/numpy archives.
                   ".onnx", ".onnx_data", ".mnn", ".tflite", ".npz")
"""File name endings counted in `weight_bytes` (what the memory budget counts as weights)."""

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_COMMIT_HEX = re.compile(r"[0-9a-f]{40}")
# The hub's repo id rule (huggingface_hub's REPO_ID_REGEX, simplified): optional namespace, then a name.
_HUB_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}")
_HF_REPO_PREFIXES = ("models--", "datasets--", "spaces--")


class ResolvedModel(NamedTuple):
    """Where `[model] path` points after resolution."""

    path: Path
    """Absolute directory the files are read from."""
    source: Literal["local", "hf_cache"]
    """A local directory, or a snapshot of the local Hugging Face cache."""
    hub_id: str | None
    """`org/name` when resolved from the HF cache."""
    revision: str | None
    """Requested revision (`main` when none was given) for hub models."""
    commit: str | None
    """The commit the revision resolved to, for hub models."""


class _Pending(NamedTuple):
    """A file that must be hashed now."""

    rel: str
    path: Path
    st: os.stat_result


def hf_hub_cache_dir() -> Path:
    """The HF hub cache as huggingface_hub finds it: `$HF_HUB_CACHE`, `$HF_HOME/hub`, `~/.cache/huggingface/hub`."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(name):
            return Path(os.path.expandvars(os.environ[name])).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.path.expandvars(os.environ["HF_HOME"])).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    home_cache = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return home_cache / "huggingface" / "hub"


def resolve_model_dir(spec: ModelSpec, base_dir: Path) -> ResolvedModel:
    """Resolve `[model] path`: a local directory (relative to `base_dir`, then the CWD), else a hub id in the HF cache."""
    given = Path(spec.path).expanduser()
    candidates = [given] if given.is_absolute() else list(dict.fromkeys([Path(base_dir) / given, Path.cwd() / given]))  # once if the same
    for candidate in candidates:
        if candidate.is_dir():
            if spec.revision is not None:
                raise RequestError(
                    f"[model] revision {spec.revision!r} applies only to hub ids, but path {spec.path!r} is the "
                    f"local directory {candidate.resolve()}; remove revision, or give the hub id instead"
                )
            return ResolvedModel(candidate.resolve(), "local", None, None, None)
        if candidate.exists():
            raise RequestError(
                f"[model] path {spec.path!r} is a file, not a directory (resolved to {candidate.resolve()}); "
                "give the directory that holds config.json"
            )
    looked = candidates[0].absolute()
    also = f"; also looked in {candidates[1].absolute()}" if len(candidates) > 1 else ""
    local_parent = next((c.parent for c in candidates if len(given.parts) > 1 and c.parent.is_dir()), None)
    if local_parent is not None:  # `models/tiny-lm` where ./models exists: a mistyped local path, not a hub id to download
        present = sorted(p.name for p in local_parent.iterdir() if p.is_dir())
        shown = ", ".join(present[:10]) + (f" and {len(present) - 10} more" if len(present) > 10 else "")
        raise RequestError(
            f"[model] path {spec.path!r} does not exist (resolved to {looked}{also}); {local_parent.absolute()} exists "
            f"and holds: {shown or 'no directories'}; check the spelling, and give the directory that holds config.json"
        )
    if _HUB_ID.fullmatch(spec.path) and ".." not in spec.path and "--" not in spec.path:
        return _resolve_hub_id(spec.path, spec.revision, f"resolved to {looked}{also}")
    raise RequestError(
        f"[model] path {spec.path!r} does not exist (resolved to {looked}{also}); give the directory that holds config.json"
    )


def _resolve_hub_id(hub_id: str, revision: str | None, local_tried: str) -> ResolvedModel:
    """`org/name` at `revision` -> `snapshots/<commit>` of the local HF cache, offline."""
    cache = hf_hub_cache_dir()
    repo = cache / ("models--" + hub_id.replace("/", "--"))
    if not repo.is_dir():
        raise RequestError(
            f"[model] path {hub_id!r} is not a local directory ({local_tried}) nor in the local Hugging Face cache "
            f"(looked in {repo}); genrun never downloads: if it is a hub id, fetch it first with `hf download {hub_id}`, "
            "or give a local directory"
        )
    wanted = revision or "main"
    if _COMMIT_HEX.fullmatch(wanted):
        commit = wanted
    else:
        commit = _read_ref(repo, hub_id, wanted)
    snapshot = repo / "snapshots" / commit
    if not snapshot.is_dir():
        raise RequestError(
            f"[model] revision {wanted!r} of {hub_id!r} is commit {commit}, which is not in the local Hugging Face "
            f"cache (no {snapshot}); fetch it with `hf download {hub_id} --revision {wanted}`"
        )
    return ResolvedModel(snapshot, "hf_cache", hub_id, wanted, commit)


def _read_ref(repo: Path, hub_id: str, revision: str) -> str:
    """The commit a branch or tag points to, from `refs/<revision>`."""
    if revision.startswith("/") or ".." in Path(revision).parts:
        raise RequestError(f"[model] revision {revision!r} is not a branch, tag or commit; give e.g. 'main' or a 40-hex commit")
    ref = repo / "refs" / revision
    try:
        commit = ref.read_text(encoding="utf-8").strip()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        known = sorted(p.relative_to(repo / "refs").as_posix() for p in (repo / "refs").rglob("*") if p.is_file())
        raise RequestError(
            f"[model] revision {revision!r} of {hub_id!r} is not in the local Hugging Face cache (no {ref}; "
            f"cached revisions: {', '.join(known) or 'none'}); fetch it with `hf download {hub_id} --revision {revision}` "
            "or give a cached revision"
        ) from None
    if not _COMMIT_HEX.fullmatch(commit):
        raise RequestError(f"[model] {ref} holds {commit[:80]!r}, not a 40-hex commit; re-fetch with `hf download {hub_id}`")
    return commit


MAX_MODEL_ENTRIES = 10_000
"""Files and folders a model directory may hold: checkpoints hold a few to a few hundred; a directory with more is not a
model directory (`/`, a home directory) and is refused before anything walks or hashes all of it."""


def refuse_a_directory_too_large_for_a_model(resolved: ResolvedModel, requested: str) -> None:
    """Count entries under the model directory (links not followed, dot-directories skipped, as hashing skips them) and stop
    at `MAX_MODEL_ENTRIES`: a few milliseconds for a checkpoint, a bounded moment for `/`."""
    seen, stack = 0, [resolved.path]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    seen += 1
                    if seen > MAX_MODEL_ENTRIES:
                        raise RequestError(
                            f"[model] path {requested!r} is the directory {resolved.path}, which holds more than {MAX_MODEL_ENTRIES:,} "
                            "files and folders: not a model's directory; give the directory the model was saved to")
                    if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
                        stack.append(Path(entry.path))
        except (PermissionError, FileNotFoundError, NotADirectoryError):
            continue  # hashing names an unreadable directory; this count only bounds the walk


def identify_model(spec: ModelSpec, base_dir: Path) -> ModelIdentity:
    """Resolve the model directory and digest every file in it (blob names, then the hash cache, then hashing)."""
    resolved = resolve_model_dir(spec, base_dir)
    files = digest_model_files(resolved.path)
    return ModelIdentity(
        source=resolved.source,
        requested=spec.path,
        resolved_path=str(resolved.path),
        hub_id=resolved.hub_id,
        revision=resolved.revision,
        commit=resolved.commit,
        files=files,
        weight_bytes=sum(f.size for f in files if f.path.endswith(WEIGHT_SUFFIXES)),
        digest=sha256_bytes(render_sha256sum((f.path, f.sha256) for f in files)),
    )


def digest_model_files(root: Path) -> tuple[ModelFile, ...]:
    """Every regular file under `root` (dot-directories skipped, symlinks followed) with size and sha256, sorted by path."""
    found: dict[str, ModelFile] = {}
    pending: list[_Pending] = []
    for rel, path in _walk_files(root):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise RequestError(
                f"[model] file {rel!r} in {root} is a broken symlink (to {os.readlink(path)}); "
                "the download is incomplete: fetch the model again"
            ) from None
        blob = hf_blob_sha256(path)
        if blob is not None:
            found[rel] = ModelFile(path=rel, size=st.st_size, sha256=blob, hash_source="hf_blob_name")
        elif (cached := _hash_cache.lookup(st)) is not None:
            found[rel] = ModelFile(path=rel, size=st.st_size, sha256=cached, hash_source="hash_cache")
        else:
            pending.append(_Pending(rel, path, st))
    if not found and not pending:
        raise RequestError(f"[model] directory {root} holds no files; give the directory that holds config.json")
    for item, digest in zip(pending, _hash_in_parallel(pending), strict=True):
        _hash_cache.store(item.st, digest, item.path.resolve())
        found[item.rel] = ModelFile(path=item.rel, size=item.st.st_size, sha256=digest, hash_source="computed")
    return tuple(found[rel] for rel in sorted(found))


TreeState = tuple[tuple[str, int, int, int, int, int], ...]
"""(path, st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns) of every folder and file under a model directory, links
followed. ctime is in it because nothing but the kernel sets it: a file rewritten in place, even with its size and mtime
restored (the hash cache's blind spot), or a folder that gained, lost or renamed an entry, gets a new one."""


def tree_state(root: Path) -> TreeState | None:
    """The state of every folder and file `digest_model_files` would read (dot-folders skipped, a folder reached twice
    walked once), one `stat` each; `None` when one cannot be stat'ed (a broken link: the digest names it)."""
    states = []
    walked: set[tuple[int, int]] = set()
    try:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
            st = os.stat(dirpath)
            if (st.st_dev, st.st_ino) in walked:
                dirnames[:] = []
                continue
            walked.add((st.st_dev, st.st_ino))
            states.append(_state(dirpath, st))
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            states.extend(_state(path, os.stat(path)) for path in (os.path.join(dirpath, n) for n in sorted(filenames)))
    except OSError:
        return None
    return tuple(states)


def tree_unchanged(state: TreeState) -> bool:
    """Whether every folder and file of an earlier `tree_state` still has that state (a stat each, no listing, no read)."""
    try:
        return all(_state(entry[0], os.stat(entry[0])) == entry for entry in state)
    except OSError:
        return False


def _state(path: str, st: os.stat_result) -> tuple[str, int, int, int, int, int]:
    return (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def hf_blob_sha256(path: Path) -> str | None:
    """The sha256 named by an HF cache blob this symlink points to (`models--*/blobs/<64 hex>`), else `None`.

    Only 64-hex names are content sha256s (LFS files); small non-LFS files are stored under their
    40-hex git blob sha1, which is not a sha256 and must be hashed.
    """
    if not path.is_symlink():
        return None
    target = Path(os.path.realpath(path))
    if target.parent.name != "blobs" or not target.parent.parent.name.startswith(_HF_REPO_PREFIXES):
        return None
    return target.name if _SHA256_HEX.fullmatch(target.name) else None


def _walk_files(root: Path) -> Iterator[tuple[str, Path]]:
    """(relative posix path, path) of every regular file, following symlinked directories once, skipping dot-dirs."""
    seen_dirs: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=_unreadable):
        st = os.stat(dirpath)
        if (st.st_dev, st.st_ino) in seen_dirs:  # a symlink loop or a second link to the same directory
            dirnames[:] = []
            continue
        seen_dirs.add((st.st_dev, st.st_ino))
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))  # .git, .cache, .ipynb_checkpoints ...
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_symlink() and not path.exists():
                yield path.relative_to(root).as_posix(), path  # broken: reported by the caller
            elif path.is_file():  # regular files (through symlinks); FIFOs and sockets are not model content
                yield path.relative_to(root).as_posix(), path


def _unreadable(error: OSError) -> None:
    """os.walk's error hook: an unreadable directory is refused, never skipped silently."""
    raise RequestError(f"[model] cannot list {error.filename} ({error.strerror}); make the model directory readable") from error


def _hash_in_parallel(pending: list[_Pending]) -> list[str]:
    """sha256 of each file, in `pending` order; largest first across `os.cpu_count()` threads (file_digest drops the GIL)."""
    if not pending:
        return []
    workers = min(os.cpu_count() or 1, len(pending))
    if workers == 1:
        return [_hash_unchanged(item) for item in pending]
    order = sorted(range(len(pending)), key=lambda i: pending[i].st.st_size, reverse=True)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="genrun-hash") as pool:
        digests = list(pool.map(lambda i: _hash_unchanged(pending[i]), order))
    by_index = dict(zip(order, digests, strict=True))
    return [by_index[i] for i in range(len(pending))]


def _hash_unchanged(item: _Pending) -> str:
    """Hash one file and check it did not change meanwhile (a copy or download still in progress)."""
    try:
        digest = sha256_file(item.path)
        after = os.stat(item.path)
    except OSError as exc:
        raise RequestError(f"[model] cannot read file {item.rel!r} ({item.path}: {exc.strerror}); make it readable") from exc
    if _hash_cache.stat_key(after) != _hash_cache.stat_key(item.st):
        raise RequestError(
            f"[model] file {item.rel!r} changed while it was being hashed ({item.path}); "
            "wait until it is completely written, then plan again"
        )
    return digest
