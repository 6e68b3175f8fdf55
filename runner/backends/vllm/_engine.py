"""The engine configuration: `[engine]` + `[model]` as vLLM resolves them, at plan time without loading weights, and the
same arguments when the engine starts (one function builds both, so plan and run agree)."""

import json
import os
from pathlib import Path
from typing import Any, NamedTuple

from genrun.backends import Request, RequestError

class ResolvedEngine(NamedTuple):
    """The engine's limits as vLLM derives them from the arguments and the checkpoint (no weights loaded)."""

    max_model_len: int
    """Context in tokens (prompt + generated), derived from the checkpoint unless `[engine]` sets it."""
    max_num_seqs: int
    """Rows the scheduler runs at once."""
    max_num_batched_tokens: int
    """Tokens per engine step."""
    block_size: int | None
    """Tokens per KV block."""
    kv_cache_bytes: int | None
    """KV cache size fixed before start: `[engine] kv_cache_memory_bytes`, or on CPU `VLLM_CPU_KVCACHE_SPACE` GiB (which wins);
    `None` when the engine sizes it at start from free memory (GPU `gpu_memory_utilization`)."""
    memory_fraction: float
    """`[engine] gpu_memory_utilization` as resolved (vLLM's default 0.92): on CPU without a fixed KV size, the share of the
    machine's memory the worker reserves for weights and KV cache at start (vLLM refuses to start if that much is not free)."""
    generation_config: str
    """`auto` merges the checkpoint's generation_config.json into the sampling defaults."""
    checkpoint_sampling: dict[str, Any]
    """What `generation_config` contributes to the sampling defaults (`max_new_tokens` already renamed `max_tokens`)."""
    device: str
    """`cpu` or `cuda`."""


def engine_arguments(request: Request, model_dir: Path) -> dict[str, Any]:
    """`EngineArgs`/`LLM` keyword arguments: the model, dtype and seed from the request, then `[engine]` as written."""
    dtype = request.model.dtype
    return {"model": str(model_dir), "dtype": dtype, "seed": request.seed, **request.backend_tables.get("engine", {})}


def resolve_engine(request: Request, model_dir: Path) -> tuple[ResolvedEngine, Any]:
    """`(ResolvedEngine, VllmConfig)` with the usage context `LLM()` itself passes (its scheduler defaults differ from the
    bare `EngineArgs` ones). A value vLLM refuses is a RequestError naming it (exit 2)."""
    from vllm import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    arguments = engine_arguments(request, model_dir)
    try:
        config = EngineArgs(**arguments).create_engine_config(usage_context=UsageContext.LLM_CLASS)
    except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError; it names the field and the value
        shown = {k: v for k, v in arguments.items() if k != "model"}
        raise RequestError(f"[engine] refused by vLLM's engine configuration ({shown}): {_first_lines(str(exc))}; "
                           "fix the named [engine] value") from exc
    model, cache = config.model_config, config.cache_config
    device = str(config.device_config.device_type)
    return ResolvedEngine(
        max_model_len=model.max_model_len, max_num_seqs=config.scheduler_config.max_num_seqs,
        max_num_batched_tokens=config.scheduler_config.max_num_batched_tokens, block_size=cache.block_size,
        kv_cache_bytes=cache.kv_cache_memory_bytes, memory_fraction=float(cache.gpu_memory_utilization),
        generation_config=str(model.generation_config), checkpoint_sampling=dict(model.get_diff_sampling_param()), device=device,
    ), config


def kv_bytes_per_token(model_dir: Path, dtype_bytes: int) -> int | None:
    """K and V for every layer and KV head at `dtype_bytes` each, from the checkpoint's config.json (`None` if it says too little)."""
    config = json.loads((model_dir / "config.json").read_text())
    config = config.get("text_config", config)
    layers, heads = config.get("num_hidden_layers"), config.get("num_attention_heads")
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or (config["hidden_size"] // heads if heads and config.get("hidden_size") else None)
    if not (layers and kv_heads and head_dim):
        return None
    return 2 * layers * kv_heads * head_dim * dtype_bytes


VLLM_OWN_VARIABLES = frozenset({"VLLM_DIST_IDENT", "VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME"})
"""Set by vLLM itself when an engine starts, random per engine: left in the process's environment for the next engine,
they are not settings (a rerun in the same process would otherwise differ from its parent in them)."""


def vllm_environment() -> dict[str, str]:
    """The user's `VLLM_*` settings (read before the engine starts; vLLM's own per-engine identifiers left out)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("VLLM_") and k not in VLLM_OWN_VARIABLES}


def _first_lines(text: str, lines: int = 4) -> str:
    return " ".join(line.strip() for line in text.strip().splitlines()[:lines])
