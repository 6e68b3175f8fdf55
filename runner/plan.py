"""`genrun plan`: validate a request, identify code/model/environment, check the budget, freeze.

Order matters: cheap refusals (request, backend, model path, the backend's own validation, entry
points, budget) come before hashing gigabytes of weights, and nothing touches the store until
everything passed. User code the request names is imported beside the request to check that each
reference is a function its module defines (`resolve_callable`). Every backend-specific decision is the backend's (`genrun.runner.backends.Backend`).
"""

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel

from genrun.schemas import BackendDeclaration, ProcessorIdentity, Request, TokenBudget, layout
from genrun.schemas.declared_schema import UnsafeSchema, compile_declared
from genrun.snapshot_dir import SnapshotDir

from . import _hash_cache
from .backends import declaration_of, get_backend, refuse_undeclared_tables
from .budget import enforce
from .errors import RequestError
from .interrupts import stop_if_requested
from .backends.entrypoint import resolve_callable, user_import_paths
from .code_identity import CodeRef, code_refs, identify_code
from .input_files import freeze_input_files, identify_input_files, measured_budget_request
from .model_identity import identify_model, refuse_a_directory_too_large_for_a_model, resolve_model_dir
from .phases import PlanClock
from .plan_context import PlanContext
from .processor_identity import freeze_processor, identify_processor
from .request_loading import load_request, request_from_model
from .runtime import runtime_of
from .store import create_snapshot, resolve_store


class PreparedPlan(NamedTuple):
    """A request that passed every check, and how to freeze it (nothing written yet)."""

    name: str
    """The request's name (part of the snapshot id)."""
    freeze: Callable[[SnapshotDir], None]
    """Writes the frozen files into a new snapshot directory (held open, writable: `store.create_snapshot`)."""
    budget: TokenBudget
    """The pre-flight that passed (`genrun serve` holds the engine's KV cache and rows for it before freezing)."""
    model_dir: Path | None = None
    """The resolved `[model] path` (a store must not lie inside it)."""

    def refuse_the_store(self, store: Path) -> None:
        """A store inside the model directory would change the model's files with every snapshot written there (so every
        execute would refuse with "model files changed since planning"): refused, naming both, before anything is written."""
        if self.model_dir is None:
            return
        store_at, model_at = Path(store).resolve(), self.model_dir.resolve()
        if store_at == model_at or model_at in store_at.parents:
            raise RequestError(f"the store {store_at} is inside the model directory {model_at} ([model] path): every snapshot "
                               "written there would change the model's files; use a store outside it (--store DIR or "
                               "$GENRUN_STORE), or point [model] path at the folder that holds only the model")


def plan_request(
    request_path: str | Path | Request, store: str | Path | None = None, force: bool = False,
    *, base_dir: Path | None = None, extra_frozen: Mapping[str, BaseModel] | None = None, clock: PlanClock | None = None,
) -> Path:
    """Freeze a request (a file, or a `Request` built in Python) into a new snapshot directory and return its path.

    A `Request` resolves relative paths against `base_dir` (default: the current directory);
    `extra_frozen` adds files (layout name -> model) frozen with the plan, e.g. a rerun's lineage. `clock` is told
    when each planning phase begins (`genrun run` prints where its time went); it is left running in `freeze`.

    Raises RequestError (exit 2) for a bad request (an unknown backend included) and BudgetRefused (exit 3) when the
    pre-flight does not fit and `force` is false; in both cases nothing is written (no hash cache entry either).
    """
    root = resolve_store(store)  # a store that is a file is refused before the request is read
    clock = clock if clock is not None else PlanClock()
    with _hash_cache.held_until_planned():  # a refused plan leaves no cache entry either
        prepared = prepare_plan(request_path, force=force, base_dir=base_dir, extra_frozen=extra_frozen, clock=clock)
        prepared.refuse_the_store(root)
        clock.enter("freeze")
        return create_snapshot(root, prepared.name, prepared.freeze)


def prepare_plan(
    request_path: str | Path | Request, force: bool = False,
    *, base_dir: Path | None = None, extra_frozen: Mapping[str, BaseModel] | None = None, context: PlanContext | None = None,
    clock: PlanClock | None = None,
) -> PreparedPlan:
    """Every check of `plan_request` and the identities to freeze, without touching the store (sweeps check all items first).

    `context` holds the reads several plans share (a sweep passes one for all its items); a new one by default.
    `clock` is told when each phase begins (checks, imports, hashing, budget, environment); an unread one by default.
    """
    context = context if context is not None else PlanContext()
    clock = clock if clock is not None else PlanClock()
    clock.enter("checks")
    if isinstance(request_path, Request):
        loaded = request_from_model(request_path, base_dir if base_dir is not None else Path.cwd())
    else:
        loaded = load_request(request_path)
    request, base_dir = loaded.request, loaded.path.parent
    clock.enter("imports")
    backend = get_backend(request.model.backend)
    stop_if_requested()  # after each step that runs a library's or the user's code: a swallowed signal still stops the plan
    clock.enter("checks")
    refuse_undeclared_tables(request, backend)
    runtime_of(backend).require_device(request.model.device)
    resolved = resolve_model_dir(request.model, base_dir)
    refuse_a_directory_too_large_for_a_model(resolved, request.model.path)  # `/` is refused, never walked whole
    processor = identify_processor(request.model, base_dir)
    user_code = code_refs(request.entrypoint.callable if request.entrypoint else None, request.model.loader)
    user_code += [CodeRef(field, value) for field, value in getattr(backend, "user_code", lambda _request: ())(request)]
    with user_import_paths([base_dir]):  # user code (an entry point, a loader, a loop, its budget) is imported beside the request
        backend.validate_request(with_processor_path(request, processor), resolved.path, context)
        for ref in user_code:  # each must be a function its module defines (`resolve_callable`): a typo fails the plan
            resolve_callable(ref.value, ref.field)
    stop_if_requested()
    clock.enter("hashing")
    input_files = identify_input_files(request.input, base_dir)
    code = identify_code(user_code, [base_dir], resolved.path, genrun_code=context.genrun_code())
    model = identify_model(request.model, base_dir).model_copy(update={"processor": processor})
    clock.enter("budget")
    budget_request = with_processor_path(measured_budget_request(request, input_files), processor)
    with user_import_paths([base_dir]):
        budget = backend.estimate_budget(budget_request, resolved.path, model.weight_bytes, force, context)
    stop_if_requested()
    enforce(budget)
    # The same for every plan of one backend and unit (pydantic generates its JSON Schemas, jsonschema-rs compiles them to
    # check them): made and checked once per context. A refused declaration is not kept, so every plan is refused.
    declaration = context.cached(("backend-declaration", backend.name, backend.progress_unit(request)),
                                 lambda: refuse_unsafe_schemas(declaration_of(backend, request)))
    clock.enter("environment")  # once the budget fits: a refusal stays cheap
    environment = context.environment(runtime_of(backend))
    stop_if_requested()

    def freeze(snapshot: SnapshotDir) -> None:
        snapshot.write_bytes(layout.request_source_name(loaded.format), loaded.source)
        snapshot.write(layout.REQUEST, request)
        snapshot.write(layout.ENVIRONMENT, environment)
        snapshot.write(layout.CODE, code)
        snapshot.write(layout.MODEL, model)
        snapshot.write(layout.TOKEN_BUDGET, budget)
        snapshot.write(layout.BACKEND, declaration)
        for name, extra in (extra_frozen or {}).items():
            snapshot.write(name, extra)
        if input_files is not None:
            freeze_input_files(input_files, snapshot)
        if processor is not None:
            freeze_processor(processor, snapshot)

    return PreparedPlan(request.name, freeze, budget, resolved.path)


def with_processor_path(request: Request, processor: ProcessorIdentity | None) -> Request:
    """The request the backend validates and budgets at plan time: `[model] processor` as the resolved absolute directory
    (the frozen request keeps what the user wrote; execution loads the snapshot's copy)."""
    if processor is None:
        return request
    return request.model_copy(update={"model": request.model.model_copy(update={"processor": processor.resolved_path})})



def refuse_unsafe_schemas(declaration: BackendDeclaration) -> BackendDeclaration:
    """`declaration`, once its schemas are checked: a declared schema that verify could not apply safely (too deep, too
    large, a pattern that needs backtracking) is refused now, naming it, instead of reaching every reader of every
    snapshot of the backend."""
    schemas = [(f"the stop-evidence schema of the {declaration.backend!r} backend", declaration.stop_evidence_schema)]
    if declaration.call_config is not None:
        schemas.append((f"the call-config schema {declaration.call_config.model}", declaration.call_config.json_schema))
    for what, schema in schemas:
        if schema is None:
            continue
        try:
            compile_declared(schema, what)
        except UnsafeSchema as exc:
            raise RequestError(f"the {declaration.backend!r} backend's declared evidence is refused: {exc}; its models must give "
                               "schemas verify can apply (fix the backend's models)") from None
    return declaration
