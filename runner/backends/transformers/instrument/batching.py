"""Continuous batching (`generate_batch`, or generate with `cache_implementation="paged"`): what can be recorded.

It takes no streamer and no stopping criteria, so genrun records, around the call: the effective
config (the config `generate_batch` decodes with, `max_new_tokens` applied), the ids of every
request, and each request's stop from the rule its `RequestState.update_and_check_completion`
applies (the last id is in the request's EOS set, else the `max_new_tokens` limit was reached).
Per-step progress and first-token timing are not observable (`missing` says so).
"""

import copy
from typing import Any

from .capture import CallCapture, CaptureSession, RequestOutput
from .criteria import CriterionKind, RowCriteria
from .effective_config import build_before_generate


def _continuous_mixin() -> type | None:
    """transformers' continuous-batching mixin; `None` in a transformers without it (nothing to wrap)."""
    try:
        from transformers.generation.continuous_batching import ContinuousMixin
    except ImportError:
        return None
    return ContinuousMixin


ContinuousMixin = _continuous_mixin()

NAME = "generate_batch"
"""What `fired` names for a continuous-batching stop (no criterion object exists)."""


def record_batch_call(original: Any, session: CaptureSession, call: CallCapture, model: Any, args: tuple, kwargs: dict) -> Any:
    """Run `generate_batch` untouched; write the effective config before it starts and keep its requests."""
    inputs = kwargs.get("inputs", args[0] if args else None)
    passed = kwargs.get("generation_config", args[1] if len(args) > 1 else None)
    try:
        config = copy.deepcopy(passed if passed is not None else model.generation_config)
        if kwargs.get("max_new_tokens") is not None:
            config.max_new_tokens = kwargs["max_new_tokens"]
        if config.eos_token_id is None:  # generate_batch falls back to the model config's EOS
            config.eos_token_id = getattr(model.config, "eos_token_id", None)
        prompts = [list(p) for p in inputs or []]
        call.prompt_length = max((len(p) for p in prompts), default=0)
        call.batch_rows = len(prompts) * (config.num_return_sequences or 1)
        call.config = build_before_generate(
            call_index=call.index, model=model, config=config, arguments=call.arguments, caller=call.caller,
            prompt_length=call.prompt_length, batch_rows=call.batch_rows, has_default_max_length=None,
        )
    except Exception as exc:  # never break the call
        call.missing.append(f"continuous batching: effective config not recorded ({type(exc).__name__}: {exc})")
        config = None
    else:
        session.on_config(call)
    result = original(model, *args, **kwargs)
    try:
        call.requests = tuple(_request_output(result[key], config) for key in _ordered(result))
    except Exception as exc:
        call.missing.append(f"continuous batching: request outputs not recorded ({type(exc).__name__}: {exc})")
    return result


def _ordered(result: dict[str, Any]) -> list[str]:
    """`req_0, req_1, ...` in request order (the dict is in finishing order)."""
    keys = list(result)
    if all(k.startswith("req_") and k[4:].isdigit() for k in keys):
        return sorted(keys, key=lambda k: int(k[4:]))
    return keys


def _request_output(output: Any, config: Any) -> RequestOutput:
    ids = tuple(int(i) for i in output.generated_tokens)
    prompt = len(output.prompt_ids)
    eos = config.eos_token_id if config is not None else None
    eos_set = {eos} if isinstance(eos, int) else set(eos or ())
    limit = config.max_new_tokens if config is not None else None
    kind: CriterionKind | None = None
    if ids and ids[-1] in eos_set:
        kind = "eos"
    elif limit is not None and len(ids) >= limit:
        kind = "max_new_tokens"
    if kind is None or getattr(output, "error", None):
        return RequestOutput(ids, prompt, RowCriteria(False, None, None, (), ()))
    return RequestOutput(ids, prompt, RowCriteria(True, prompt + len(ids), ids[-1], (NAME,), (kind,)))
