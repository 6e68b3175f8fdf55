"""`[generation]` (vLLM's `SamplingParams`) and `[engine]` (vLLM's `EngineArgs`): names and values checked against the
installed vLLM at plan time, so what the engine would reject is refused before it starts.

vLLM is imported inside the functions: genrun imports this package without vLLM installed (the core test
environment has none), and only a vLLM request pays vLLM's import time.
"""

import dataclasses
import functools
import inspect
from typing import Any

from genrun.backends import RequestError, refuse_generation, unknown_key_message

SET_BY_GENRUN = frozenset({"output_kind", "skip_clone"})
"""`SamplingParams` fields genrun sets itself (the step loop needs per-step deltas)."""

ENGINE_SET_BY_GENRUN = frozenset({"model", "tokenizer", "dtype", "seed", "device"})
"""`EngineArgs` that come from `[model]` and the request's `seed`, never from `[engine]`."""

TRANSFORMERS_NAMES = {
    "max_new_tokens": "vLLM calls it `max_tokens`",
    "max_length": "vLLM has no per-request max_length: set `max_tokens`, or [engine] max_model_len for the context",
    "do_sample": "vLLM samples whenever temperature > 0: set `temperature = 0` for greedy decoding",
    "num_return_sequences": "vLLM calls it `n`",
    "eos_token_id": "vLLM stops at the tokenizer's EOS; add more ids with `stop_token_ids`",
    "stop_strings": "vLLM calls it `stop`",
    "num_beams": "vLLM's SamplingParams has no beam search",
}
"""transformers' `generate` names people carry over, and what vLLM calls them."""

CPU_KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
"""On CPU the KV cache size is this environment variable (GiB), not an engine argument."""


@functools.cache
def sampling_fields() -> tuple[str, ...]:
    """The user-settable `SamplingParams` names of the installed vLLM: read once per process (the vLLM imported cannot
    change under it), not per item of a sweep or request of a server (`inspect.signature` each time)."""
    from vllm import SamplingParams

    return tuple(n for n in inspect.signature(SamplingParams.from_optional).parameters if n not in SET_BY_GENRUN)


def engine_fields() -> list[str]:
    """The `EngineArgs` names of the installed vLLM that `[engine]` may set."""
    from vllm import EngineArgs

    return [f.name for f in dataclasses.fields(EngineArgs) if f.name not in ENGINE_SET_BY_GENRUN]


def generation_key_problems(generation: dict[str, Any]) -> list[str]:
    """Unknown `[generation]` keys (with a did-you-mean), and types vLLM's own checks would crash on or let through."""
    valid = sampling_fields()
    problems = []
    for key, value in generation.items():
        if key in SET_BY_GENRUN:
            problems.append(f"[generation] {key} is set by genrun (it reads every step's new ids); remove it")
        elif key in TRANSFORMERS_NAMES:
            problems.append(f"unknown key {key!r} in [generation]: {TRANSFORMERS_NAMES[key]}")
        elif key not in valid:
            problems.append(unknown_key_message(("generation",), key, list(valid)))
        else:
            problems.extend(_type_problems(key, value))
    return problems


_NUMBERS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")
_INTEGERS = ("n", "top_k", "max_tokens", "min_tokens", "seed", "logprobs", "prompt_logprobs")


def _type_problems(key: str, value: Any) -> list[str]:
    """Types vLLM does not check itself (`seed = "x"` passes its constructor; `temperature = "hot"` crashes in a comparison)."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if key in _NUMBERS and not (is_int or isinstance(value, float)):
        return [f"[generation] {key} = {value!r} must be a number"]
    if key in _INTEGERS and not is_int:
        return [f"[generation] {key} = {value!r} must be an integer"]
    if key == "stop_token_ids":
        ok = isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)
        if not ok:
            return [f"[generation] stop_token_ids = {value!r} must be a list of token ids (integers >= 0)"]
    if key == "stop" and not (isinstance(value, str) or (isinstance(value, list) and all(isinstance(s, str) for s in value))):
        return [f"[generation] stop = {value!r} must be a string or a list of strings"]
    return []


def sampling_value_problems(generation: dict[str, Any], vocab_size: int | None) -> list[str]:
    """What vLLM's `SamplingParams` constructor refuses, in its own words (it names the field and the value)."""
    from vllm import SamplingParams
    from vllm.exceptions import VLLMError

    problems = []
    try:
        SamplingParams.from_optional(**generation)
    except (ValueError, TypeError, VLLMError) as exc:  # VLLMValidationError names the parameter and the value
        problems.append(f"[generation] refused by vLLM's SamplingParams: {exc}")
    ids = generation.get("stop_token_ids") or []
    if vocab_size is not None and any(i >= vocab_size for i in ids):
        problems.append(f"[generation] stop_token_ids = {ids!r}: ids must be below the vocabulary size {vocab_size}")
    return problems


def engine_key_problems(engine: dict[str, Any]) -> None:
    """Refuse unknown `[engine]` keys (exit 2) with a did-you-mean; `[model]`'s own settings are named as such."""
    valid = engine_fields()
    problems = []
    for key in engine:
        if key in ENGINE_SET_BY_GENRUN:
            problems.append(f"[engine] {key} comes from the request ([model] path/dtype/device, top-level seed); remove it from [engine]")
        elif key == "kv_cache_space" or key == CPU_KV_CACHE_ENV:
            problems.append(f"[engine] {key}: the KV cache size is [engine] kv_cache_memory_bytes, or on CPU the environment "
                            f"variable {CPU_KV_CACHE_ENV} (whole GiB, it wins), set where genrun runs")
        elif key not in valid:
            problems.append(unknown_key_message(("engine",), key, valid))
    if problems:
        raise RequestError("[engine] refused:" + "".join(f"\n  - {p}" for p in problems))


__all__ = ["engine_key_problems", "generation_key_problems", "refuse_generation", "sampling_value_problems"]
