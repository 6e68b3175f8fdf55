"""`genrun rerun`: plan a child snapshot from a sealed parent's frozen request, with dotted-key changes, and run it.

The parent is only read. Its model and code are checked the way `execute` checks a plan (a
difference is named and refused unless `allow_changed`), the changed request is validated like a
request file, and the child freezes `lineage.json` (parent id and digests, the exact changes, why).
"""

import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ValidationError

from genrun.schemas import GenerationConfigBeforeGenerate, Lineage, Request, RequestChange, Result, layout
from genrun.schemas.digests import sha256_file
from genrun.snapshot_dir import ArtifactError, SnapshotDir

from .errors import FrozenMismatch, RequestError, SnapshotError
from .execute import FrozenPlan, load_frozen, verify_code, verify_model
from .phases import PlanClock, PlanPhases
from .request_loading import _inner_model, format_validation_error, unknown_key_message
from .store import is_sealed, open_snapshot

FREE_FORM_TABLES = ("generation", "model.loader_kwargs", "entrypoint.kwargs")
"""Tables whose keys are not schema fields (checked later: `[generation]` against GenerationConfig at plan time)."""
SUPPRESS_KEY = "generation.suppress_tokens"


class RerunPlan(NamedTuple):
    """What `plan_rerun` decided, before anything is written."""

    request: Request
    """The child's request."""
    base_dir: Path
    """Directory the child's relative paths resolve against (as the parent's did)."""
    lineage: Lineage
    """Frozen into the child as `lineage.json`."""


class RerunOutcome(NamedTuple):
    """A finished rerun: the child snapshot and its result."""

    parent: Path
    child: Path
    result: Result
    planned: PlanPhases
    """Where the time before execution went (reading the parent and planning the child)."""


def plan_rerun(
    parent_dir: str | Path, sets: Sequence[str] = (), unsets: Sequence[str] = (), *,
    suppress_eos: bool = False, note: str | None = None, allow_changed: bool = False,
) -> RerunPlan:
    """Check the parent and build the child's request and lineage; raises before anything is written."""
    parent = open_snapshot(parent_dir).absolute()
    snapshot_digest = verify_sealed_parent(parent)
    frozen = load_frozen(SnapshotDir(parent))
    differences = identity_differences(frozen)
    if differences and not allow_changed:
        raise FrozenMismatch(
            f"cannot rerun {parent.name} as it was made: " + "; ".join(differences)
            + "; restore them, or pass --allow-changed to rerun anyway (recorded in the child's lineage)"
        )
    data = frozen.request.model_dump(mode="json")
    changes = [*(unset_key(data, key) for key in unsets), *(set_key(data, *parse_assignment(text)) for text in sets)]
    if suppress_eos:
        changes.append(suppress_eos_change(data, parent))
    request = validate_changed(data)
    base_dir, rewritten = parent_base_dir(frozen)
    if rewritten:
        request = request.model_copy(update={"model": request.model.model_copy(update={"path": frozen.model.resolved_path})})
    if frozen.model.processor is not None and request.model.processor == frozen.request.model.processor:
        # as it was made: the parent's frozen copy of `[model] processor`, not the directory it was copied from
        request = request.model_copy(update={"model": request.model.model_copy(update={"processor": str(parent / layout.PROCESSOR_DIR)})})
    lineage = Lineage(
        parent_id=parent.name, parent_path=str(parent), parent_snapshot_digest=snapshot_digest,
        parent_plan_digest=sha256_file(parent / layout.FROZEN_MANIFEST), changes=tuple(changes), note=note,
        allow_changed=allow_changed, changed_since_parent=tuple(differences), model_path_rewritten=rewritten,
    )
    return RerunPlan(request, base_dir, lineage)


def rerun_snapshot(
    parent_dir: str | Path, sets: Sequence[str] = (), unsets: Sequence[str] = (), *, suppress_eos: bool = False,
    note: str | None = None, allow_changed: bool = False, store: str | Path | None = None, force: bool = False,
    live: bool | None = None, on_planned: Callable[[Path], None] | None = None, clock: PlanClock | None = None,
) -> RerunOutcome:
    """Plan the child (store default: the parent's store), execute it and seal it; `on_planned(child)` runs in between.
    `clock` is told when each planning phase begins (reading the parent is in `checks`) and stopped before execution."""
    from .execute import execute_snapshot
    from .plan import plan_request

    clock = clock if clock is not None else PlanClock()
    clock.enter("checks")
    rerun = plan_rerun(parent_dir, sets, unsets, suppress_eos=suppress_eos, note=note, allow_changed=allow_changed)
    parent = Path(rerun.lineage.parent_path)
    child = plan_request(rerun.request, store if store is not None else parent.parent, force,
                         base_dir=rerun.base_dir, extra_frozen={layout.LINEAGE: rerun.lineage}, clock=clock)
    if on_planned is not None:
        on_planned(child)
    planned = clock.stop()
    return RerunOutcome(parent, child, execute_snapshot(child, live=live), planned)


# -- the parent -----------------------------------------------------------------------------------


def verify_sealed_parent(parent: Path) -> str:
    """A parent must be sealed and every file must still match its manifest; returns the snapshot digest."""
    if not is_sealed(parent):
        raise SnapshotError(f"{parent} is not sealed (no {layout.MANIFEST}); only an executed snapshot can be rerun and compared")
    try:
        manifest = SnapshotDir(parent).read_manifest(layout.MANIFEST)
    except ArtifactError as exc:
        raise SnapshotError(f"{parent / layout.MANIFEST} is malformed ({exc.reason}); this parent cannot be trusted as a reference") from None
    damaged = [rel for rel, digest in sorted(manifest.entries.items()) if not (parent / rel).is_file() or sha256_file(parent / rel) != digest]
    if damaged:
        raise SnapshotError(
            f"{parent.name}: {', '.join(damaged)} no longer match{'es' if len(damaged) == 1 else ''} its manifest; "
            "a damaged parent cannot be a reference (run 'genrun verify' on it)"
        )
    return manifest.digest


def identity_differences(frozen: FrozenPlan) -> list[str]:
    """`execute`'s checks of the parent's frozen model and code against what is on disk now; one message per difference."""
    found = []
    for check in (lambda: verify_model(frozen.model), lambda: verify_code(frozen.code)):
        try:
            check()
        except FrozenMismatch as exc:
            # execute's message ends with its own fix ("; restore them or plan again"); rerun gives its own
            found.append(str(exc).split("; restore")[0].split("; run the genrun")[0].replace("since planning", "since the parent was planned"))
    return found


def parent_base_dir(frozen: FrozenPlan) -> tuple[Path, bool]:
    """Where the parent's relative paths resolved from; (dir, True) when the model path must be made absolute.

    Entry-point and loader modules were found in the request file's directory (`code.json`
    `entrypoint.root`); a relative `[model] path` is re-resolved from the ancestor of the parent's
    resolved model directory that gives the same directory again.
    """
    entry_root = Path(frozen.code.entrypoint.root) if frozen.code.entrypoint is not None else None
    path, resolved = frozen.request.model.path, Path(frozen.model.resolved_path)
    if frozen.model.source != "local" or Path(path).is_absolute():
        return entry_root or Path.cwd(), False
    if entry_root is not None:  # the modules must be found again: keep their directory, pin the model if need be
        return entry_root, not _resolves_to(entry_root, path, resolved)
    for ancestor in resolved.parents:
        if _resolves_to(ancestor, path, resolved):
            return ancestor, False
    return Path.cwd(), True


def _resolves_to(base: Path, path: str, resolved: str | Path) -> bool:
    return (base / path).resolve() == Path(resolved).resolve()


# -- changes --------------------------------------------------------------------------------------


def parse_assignment(text: str) -> tuple[str, Any]:
    """`KEY=VALUE`; VALUE is read as a TOML value (`64`, `true`, `[1, 2]`, `"text"`), else taken as a plain string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise RequestError(f"--set {text!r} is not KEY=VALUE; e.g. --set generation.max_new_tokens=64")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # an unquoted prompt: `--set input.prompt=count down from 3 :`
    return key.strip(), value


def set_key(data: dict[str, Any], key: str, value: Any) -> RequestChange:
    """Set a dotted key in the request's JSON, refusing keys the request has no field for."""
    table, name = _walk(data, key, create=True)
    before = table.get(name, _ABSENT)
    table[name] = value
    return RequestChange(key=key, action="set", parent_value=None if before is _ABSENT else before,
                         parent_absent=before is _ABSENT, child_value=value)


def unset_key(data: dict[str, Any], key: str) -> RequestChange:
    """Remove a dotted key: a `[generation]`-style key disappears, a schema field goes back to its default."""
    table, name = _walk(data, key, create=False)
    if name not in table:
        raise RequestError(f"--unset {key}: the parent's request has no {key!r}; nothing to unset")
    before = table.pop(name)
    return RequestChange(key=key, action="unset", parent_value=before, child_absent=True)


def suppress_eos_change(data: dict[str, Any], parent: Path) -> RequestChange:
    """`generation.suppress_tokens` = the parent's effective EOS ids (plus any already suppressed)."""
    config = SnapshotDir(parent).read_optional(layout.GENERATION_CONFIG, GenerationConfigBeforeGenerate)
    if config is None:
        raise RequestError(f"--suppress-eos needs the parent's {layout.GENERATION_CONFIG} (its EOS ids); {parent.name} has none")
    eos = config.eos_token_ids
    if not eos:
        raise RequestError(f"--suppress-eos: the parent ran without an EOS id; there is nothing to suppress")
    generation = data.setdefault("generation", {})
    before = generation.get("suppress_tokens")
    merged = sorted({*(before or []), *eos})
    generation["suppress_tokens"] = merged
    return RequestChange(key=SUPPRESS_KEY, action="suppress_eos", parent_value=before, parent_absent=before is None, child_value=merged)


def validate_changed(data: dict[str, Any]) -> Request:
    """The changed request, validated as strictly as a request file."""
    try:
        return Request.model_validate(data)
    except ValidationError as exc:
        raise RequestError(format_validation_error(exc, "the rerun's request (after --set/--unset)")) from None


class _Absent:
    pass


_ABSENT = _Absent()


def _walk(data: dict[str, Any], key: str, *, create: bool) -> tuple[dict[str, Any], str]:
    """The table holding the last part of `key`, checking each part against the Request model."""
    parts = key.split(".")
    if any(not p for p in parts):
        raise RequestError(f"key {key!r} has an empty part; write dotted keys like generation.max_new_tokens")
    table: dict[str, Any] = data
    model: type[BaseModel] | None = Request
    backend_tables = _backend_tables(data)
    if len(parts) > 1 and parts[0] not in Request.model_fields and parts[0] in backend_tables:
        # `engine.max_model_len`: a backend's table, written at the top level of a request file as here (the frozen
        # request keeps it under `backend_tables`, where the backend validates it at plan)
        table, model = data.setdefault("backend_tables", {}), None
    for depth, part in enumerate(parts):
        if model is not None and part not in model.model_fields:
            valid = [*model.model_fields, *backend_tables] if depth == 0 else list(model.model_fields)
            raise RequestError(f"{unknown_key_message(tuple(parts[:depth]), part, valid)} (in {key!r})")
        if depth == len(parts) - 1:
            return table, part
        prefix = ".".join(parts[: depth + 1])
        child = table.get(part)
        if child is None:
            if not create:
                raise RequestError(f"--unset {key}: the parent's request has no [{prefix}] table")
            child = table[part] = {}
        if not isinstance(child, dict):
            raise RequestError(f"{prefix} is a value ({child!r}), not a table; {key!r} cannot be reached through it")
        table = child
        model = None if prefix in FREE_FORM_TABLES or model is None else _inner_model(model.model_fields[part].annotation)
    raise AssertionError("unreachable")  # the loop returns at the last part


def _backend_tables(data: dict[str, Any]) -> list[str]:
    """The tables the request's backend owns (`[engine]` for vllm) and those the parent's request has."""
    from .backends import get_backend

    tables = dict.fromkeys(data.get("backend_tables") or {})
    try:
        backend = get_backend(str((data.get("model") or {}).get("backend")))
    except RequestError:  # not installed here: the parent's own tables still route
        return list(tables)
    return [*tables, *(t for t in getattr(backend, "request_tables", ()) if t not in tables)]
