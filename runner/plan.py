"""`genrun plan`: validate a request, identify code/model/environment, check the budget, freeze.

Order matters: cheap refusals (request, model path, generation keys, entry points, budget) come
before hashing gigabytes of weights, and nothing touches the store until everything passed.
"""

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from genrun.schemas import Request, TokenBudget, layout

from ._io import write_bytes_atomic, write_model_atomic
from .budget import enforce
from .code_identity import code_refs, identify_code
from .environment import capture_environment
from .errors import RequestError
from .generation_keys import validate_generation
from .model_identity import identify_model, resolve_model_dir
from .request_loading import LoadedRequest, load_request, request_from_model
from .store import create_snapshot, resolve_store


class PreparedPlan(NamedTuple):
    """A request that passed every check, and how to freeze it (nothing written yet)."""

    name: str
    """The request's name (part of the snapshot id)."""
    freeze: Callable[[Path], None]
    """Writes the frozen files into a new snapshot directory."""


def plan_request(request_path: str | Path | Request, store: str | Path | None = None, force: bool = False,
                 *, base_dir: Path | None = None) -> Path:
    """Freeze a request (a file, or a `Request` built in Python) into a new snapshot directory and return its path.

    Raises RequestError (exit 2) for a bad request and BudgetRefused (exit 3) when the
    pre-flight does not fit and `force` is false; in both cases nothing is written.
    A `Request` resolves relative paths against `base_dir` (default: the current directory).
    """
    prepared = prepare_plan(request_path, force=force, base_dir=base_dir)
    return create_snapshot(resolve_store(store), prepared.name, prepared.freeze)


def prepare_plan(request_path: str | Path | Request, force: bool = False, *, base_dir: Path | None = None) -> PreparedPlan:
    """Every check of `plan_request` and the identities to freeze, without touching the store (sweeps check all items first)."""
    if isinstance(request_path, Request):
        loaded = request_from_model(request_path, base_dir or Path.cwd())
    else:
        loaded = load_request(request_path)
    request, base_dir = loaded.request, loaded.path.parent
    if request.model.backend == "transformers" and request.input.is_empty() and request.entrypoint is None:
        raise RequestError("[input] is empty; a causal LM needs one of 'prompt', 'prompts' or 'messages'")
    resolved = resolve_model_dir(request.model, base_dir)
    validate_generation(request.generation, request.model.backend, resolved.path)
    user_code = code_refs(request.entrypoint.callable if request.entrypoint else None, request.model.loader)
    code = identify_code(user_code, [base_dir], resolved.path, request.model.trust_remote_code)
    model = identify_model(request.model, base_dir)
    budget = estimate_budget(loaded, resolved.path, model.weight_bytes, force)
    enforce(budget)
    environment = capture_environment()

    def freeze(directory: Path) -> None:
        write_bytes_atomic(directory / f"{layout.REQUEST_SOURCE_PREFIX}.{loaded.format}", loaded.source)
        write_model_atomic(directory / layout.REQUEST, request)
        write_model_atomic(directory / layout.ENVIRONMENT, environment)
        write_model_atomic(directory / layout.CODE, code)
        write_model_atomic(directory / layout.MODEL, model)
        write_model_atomic(directory / layout.TOKEN_BUDGET, budget)

    return PreparedPlan(request.name, freeze)


def estimate_budget(loaded: LoadedRequest, model_dir: Path, weight_bytes: int, force: bool) -> TokenBudget:
    """Backend-specific pre-flight estimate (diffusers: weights + latents; transformers: weights + KV)."""
    if loaded.request.model.backend == "diffusers":
        from .backends.diffusers_budget import estimate_diffusers_budget

        return estimate_diffusers_budget(loaded.request, model_dir, weight_bytes, force)
    from .plan_budget import estimate_transformers_budget

    return estimate_transformers_budget(loaded.request, model_dir, weight_bytes, force)
