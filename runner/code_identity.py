"""`code.json`: sha256 of the code that will run — genrun itself, the user's entry points, the model's remote code.

Nothing here imports the code it identifies: user modules are located with the import system's
path finder only, so planning never executes user code.
"""

import importlib.machinery
import importlib.util
import os
import sys
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple, cast

from genrun.schemas import CodeIdentity, CodeSet, FileDigest
from genrun.schemas.digests import render_sha256sum, sha256_bytes, sha256_file

import genrun.analysis
import genrun.runner
import genrun.schemas

from .errors import RequestError

GENRUN_PACKAGES = ("genrun", "genrun.runner", "genrun.analysis", "genrun.schemas")
"""genrun's own packages, hashed into `code.json`'s `genrun` set (the last three are the
repository's top-level folders, mapped into `genrun` by the build configuration)."""


class CodeRef(NamedTuple):
    """A `module:function` reference and the request field it came from (for error messages)."""

    field: str
    """E.g. `[entrypoint] callable` or `[model] loader`."""
    value: str
    """`module:function` as written."""


class _ModuleSource(NamedTuple):
    """A located module: the directory its paths are shown relative to, and its source files."""

    anchor: Path
    files: list[Path]


FileState = tuple[str, int, int, int, int, int]
"""(path, st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns): what the memos below are keyed by. ctime is in it because
nothing but the kernel sets it: a file rewritten in place (even with its mtime restored) gets a new one, so a memo never
answers for content it did not hash."""


def genrun_code_set() -> CodeSet:
    """Every `*.py` of genrun's packages plus `schemas/json/*.json`, relative to their common parent.

    It runs at plan time and again before each execution, to refuse code that changed in between; a sweep worker or a
    server runs it once per item. What the check is for is the code that runs here, and a module this process imported
    is never read from its file again: an edit to that file changes the disk, not what runs. So such a file is identified
    once per process (`_GenrunFiles`), and only the files a run could still read (modules not imported yet, which an
    import would load as they are then) and the folders (a file added could be imported) are stat'ed on every call.
    """
    global _genrun_files
    package_dirs = [_package_dir(name) for name in GENRUN_PACKAGES]
    with _identifying:  # a batching worker's items check on their own threads
        listings = (*(_python_file_paths(d) for d in package_dirs),
                    _schema_file_paths(os.path.join(_package_dir("genrun.schemas"), "json")))
        files = _genrun_files
        if files is None or any(now is not then for now, then in zip(listings, files.listings)):  # a folder changed: listed anew
            files = _genrun_files = _GenrunFiles(package_dirs, listings)
        return files.code_set()


class _GenrunFiles:
    """genrun's files as this process identifies them, from one listing of its folders."""

    def __init__(self, package_dirs: list[str], listings: tuple[list[str], ...]) -> None:
        self.listings = listings
        """`_python_file_paths`' lists per package and the JSON Schemas' (the same objects while no folder changed)."""
        modules: dict[str, str | None] = {}  # a dict: in a wheel the subpackages lie inside genrun/ as well
        for package, directory, listing in zip(GENRUN_PACKAGES, package_dirs, listings):
            modules.update((path, _module_name(package, directory, path)) for path in listing)
        modules.update((path, None) for path in listings[-1])
        self.root = os.path.commonpath([os.path.dirname(d) for d in package_dirs])
        self.paths = sorted(modules)
        self.modules = [modules[path] for path in self.paths]
        self.states: list[FileState | None] = [_fixed_states.get(path) for path in self.paths]
        self.unfixed = [i for i, state in enumerate(self.states) if state is None]
        """Files still stat'ed on every call: modules not imported yet (an import would read them as they are then)."""
        self._code_set: CodeSet | None = None

    def code_set(self) -> CodeSet:
        changed = self._code_set is None
        for i in list(self.unfixed):
            path, module = self.paths[i], self.modules[i]
            state = _file_state(path)
            changed = changed or state != self.states[i]
            self.states[i] = state
            if module is None or getattr(sys.modules.get(module), "__file__", None) == path:
                # imported from this file by now (or no module at all: a JSON Schema, which no run reads): its code runs as
                # imported, whatever the file holds later. (A file edited between its import and this first look is taken
                # as edited: a check then refuses a plan made before the edit; it cannot see what the import read.)
                _fixed_states[path] = state
                self.unfixed.remove(i)
        if changed or self._code_set is None:
            self._code_set = _code_set_of(self.root, tuple(cast(FileState, state) for state in self.states))
        return self._code_set


_genrun_files: _GenrunFiles | None = None
_identifying = threading.Lock()
_fixed_states: dict[str, FileState] = {}
"""genrun's files that can no longer change what this process runs -> their state when it first identified them."""


def _module_name(package: str, directory: str, path: str) -> str:
    """The module `path` (a `*.py` under `directory`, the folder of `package`) is imported as."""
    parts = os.path.relpath(path, directory)[:-3].split(os.sep)
    return ".".join([package, *parts[:-1], *([] if parts[-1] == "__init__" else parts[-1:])])


def identify_code(
    entrypoint_modules: Sequence[str | CodeRef],
    search_path: Sequence[Path],
    model_dir: Path | None,
    *,
    genrun_code: CodeSet | None = None,
) -> CodeIdentity:
    """Hash genrun, the modules of the `module:function` entry points/loaders, and the model directory's `*.py`.

    `search_path` is where the runner will look for user modules before `sys.path` (e.g. the
    request file's directory). A plain string in `entrypoint_modules` is reported as
    `[entrypoint] callable` in errors; pass `code_refs(...)` to name `[model] loader` too.
    Remote code is recorded whenever the model directory has Python files, whatever the request's
    `trust_remote_code` says (it is frozen in request.json): with it off they are not run, but they
    are part of the checkpoint, and a later run with it on must be comparable.
    `genrun_code` is genrun's own code set when the caller has it already (`PlanContext.genrun_code`).
    """
    refs = [r if isinstance(r, CodeRef) else CodeRef("[entrypoint] callable", r) for r in entrypoint_modules]
    sources = [module_source(ref, search_path) for ref in refs]
    entry_files = sorted({f for s in sources for f in s.files})
    entrypoint = None
    if entry_files:
        entrypoint = code_set(Path(os.path.commonpath([s.anchor for s in sources if s.files])), entry_files)
    remote_code = None
    if model_dir is not None:
        remote = _python_files(Path(model_dir))
        if remote:
            remote_code = code_set(Path(model_dir), remote)
    return CodeIdentity(genrun=genrun_code or genrun_code_set(), entrypoint=entrypoint, remote_code=remote_code)


def code_refs(entrypoint_callable: str | None, loader: str | None) -> list[CodeRef]:
    """The request's `[entrypoint] callable` and `[model] loader` (either may be `None`), labelled for errors."""
    refs = []
    if entrypoint_callable is not None:
        refs.append(CodeRef("[entrypoint] callable", entrypoint_callable))
    if loader is not None:
        refs.append(CodeRef("[model] loader", loader))
    return refs


def module_source(ref: CodeRef, search_path: Sequence[Path]) -> _ModuleSource:
    """Locate `ref`'s module without importing it: its top-level package's `*.py`, or its one file.

    A module inside a package counts the whole top-level package, since importing it runs the
    package's `__init__.py` and usually its siblings.
    """
    module = ref.value.partition(":")[0]
    path = [os.path.abspath(p) for p in search_path]
    spec = _find_spec_without_import(module, path)
    if spec is None:
        searched = ", ".join(path) + " and sys.path" if path else "sys.path"
        raise RequestError(
            f"{ref.field} {ref.value!r}: module {module!r} cannot be found (searched {searched}); "
            "put the module beside the request file, install it, or correct the module name"
        )
    top = spec if "." not in module else _find_spec_without_import(module.split(".")[0], path)
    if top is not None and top.submodule_search_locations:
        locations = [Path(os.path.abspath(p)) for p in top.submodule_search_locations]
        return _ModuleSource(Path(os.path.commonpath([p.parent for p in locations])), [f for p in locations for f in _python_files(p)])
    if spec.has_location and spec.origin and os.path.isfile(spec.origin):
        origin = Path(os.path.abspath(spec.origin))
        return _ModuleSource(origin.parent, [origin])
    return _ModuleSource(Path("/"), [])  # built-in or frozen module: no source file to hash


# For this process only: a file's content hashed once per state, a set's digest once per set of states.
_digests_seen: dict[FileState, str] = {}
_code_sets_seen: dict[tuple[str, tuple[FileState, ...]], CodeSet] = {}


def _file_state(path: str) -> FileState:
    st = os.stat(path)
    return (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _file_digest(state: FileState, root: str) -> FileDigest:
    sha256 = _digests_seen.get(state)
    if sha256 is None:
        sha256 = _digests_seen[state] = sha256_file(Path(state[0]))
    return FileDigest(path=Path(state[0]).relative_to(root).as_posix(), size=state[3], sha256=sha256)


def code_set(root: str | Path, files: Iterable[str | Path]) -> CodeSet:
    """Hash `files` (all under `root`) into a `CodeSet`: paths relative to `root`, sorted, one aggregate digest.
    Every file is stat'ed on every call; a set whose files all have the states of an earlier call is that call's."""
    return _code_set_of(os.path.abspath(root), tuple(_file_state(os.path.abspath(f)) for f in files))


def _code_set_of(top: str, states: tuple[FileState, ...]) -> CodeSet:
    known = _code_sets_seen.get((top, states))
    if known is None:
        digests = sorted((_file_digest(state, top) for state in states), key=lambda d: d.path)
        known = _code_sets_seen[(top, states)] = CodeSet(
            root=top, files=tuple(digests), digest=sha256_bytes(render_sha256sum((d.path, d.sha256) for d in digests)))
    return known


def _find_spec_without_import(module: str, search_path: list[str]) -> importlib.machinery.ModuleSpec | None:
    """Locate `a.b.c` one level at a time with the path finder, so no parent `__init__.py` runs.

    (`importlib.util.find_spec("a.b")` would import `a`.) Only top-level names fall back to
    `importlib.util.find_spec`, which imports nothing for them, to see built-in modules.
    """
    parts = module.split(".")
    spec = importlib.machinery.PathFinder.find_spec(parts[0], [*search_path, *(p or os.getcwd() for p in sys.path)])
    if spec is None and len(parts) == 1:
        spec = importlib.util.find_spec(parts[0])
    for depth in range(2, len(parts) + 1):
        if spec is None or not spec.submodule_search_locations:
            return None
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:depth]), list(spec.submodule_search_locations))
    return spec


def _package_dir(name: str) -> str:
    """Directory of one of genrun's own (already imported) packages."""
    return os.path.abspath(sys.modules[name].__path__[0])


def _python_files(directory: Path) -> list[Path]:
    """Every `*.py` under `directory` (symlinked files included), skipping dot-directories and `__pycache__`, sorted."""
    return [Path(p) for p in _python_file_paths(str(directory))]


def _python_file_paths(directory: str) -> list[str]:
    """`_python_files` as strings. A tree walked before is listed again only when one of its folders changed (a name added,
    removed or renamed changes its folder's mtime and ctime): a stat per folder instead of a listing per folder, for a
    sweep worker that checks genrun's code before each item. (The file states' memo above rests on the same timestamps.)"""
    seen = _walks_seen.get(directory)
    if seen is not None and all(_folder_state(folder) == state for folder, state in seen[0]):
        return seen[1]
    found: list[str] = []
    folders: list[tuple[str, FolderState]] = []
    for dirpath, dirnames, filenames in os.walk(directory):
        folders.append((dirpath, _folder_state(dirpath)))
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        found.extend(os.path.join(dirpath, n) for n in sorted(filenames) if n.endswith(".py"))
    _walks_seen[directory] = (tuple(folders), found)
    return found


def _schema_file_paths(json_dir: str) -> list[str]:
    """`schemas/json/*.json` (dot files left out), listed again only when the folder changed, as `_python_file_paths`."""
    seen = _walks_seen.get(json_dir)
    if seen is not None and _folder_state(json_dir) == seen[0][0][1]:
        return seen[1]
    state = _folder_state(json_dir)  # before listing: a name added meanwhile changes the folder after this state
    found = [os.path.join(json_dir, n) for n in os.listdir(json_dir) if n.endswith(".json") and not n.startswith(".")]
    _walks_seen[json_dir] = (((json_dir, state),), found)
    return found


FolderState = tuple[int, int, int, int] | None
_walks_seen: dict[str, tuple[tuple[tuple[str, FolderState], ...], list[str]]] = {}
"""Tree -> (each folder walked and its state, the files found): for this process only, like `_code_sets_seen`."""


def _folder_state(path: str) -> FolderState:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
