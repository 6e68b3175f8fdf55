"""Pre-flight budget (`token-budget.json`): will the prompt plus the requested output fit the
context and the device memory? Computed from config files and the tokenizer only, before any
weights are loaded, so a run that cannot fit is refused in seconds instead of failing after hours.
"""

from pathlib import Path
from typing import Any, NamedTuple

from genrun.schemas import DomainEstimate, Request, TokenBudget, layout
from genrun.schemas.budget import FrameRateSource, LengthSource
from genrun.schemas.rendering import human_bytes

from .errors import BudgetRefused, RequestError

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1}


class LengthLimit(NamedTuple):
    """The length generate will stop at, and who set it."""

    max_length: int
    """Absolute length incl. the (padded) prompt."""
    new_tokens: int
    """max_length - prompt."""
    source: LengthSource


def effective_length(prompt_tokens: int, overrides: dict[str, Any], checkpoint: dict[str, Any], context: int | None) -> LengthLimit:
    """Mirror generate's length rules (transformers 5.x `_prepare_generated_length`).

    Request values win, unset ones are filled from the checkpoint's generation_config;
    `max_new_tokens` wins over `max_length`; with neither set, prompt + 20 capped at the context.
    """
    tables: tuple[tuple[LengthSource, dict[str, Any]], ...] = (("request", overrides), ("model_generation_config", checkpoint))
    for key in ("max_new_tokens", "max_length"):
        for source, table in tables:
            value = table.get(key)
            if value is None:
                continue
            if key == "max_new_tokens":
                return LengthLimit(prompt_tokens + value, value, source)
            return LengthLimit(value, value - prompt_tokens, source)
    limit = prompt_tokens + layout.LIBRARY_DEFAULT_NEW_TOKENS
    if context is not None:
        limit = min(limit, context)
    return LengthLimit(limit, limit - prompt_tokens, "library_default")


class ModelShape(NamedTuple):
    """What the KV formula needs from the decoder's config."""

    layers: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    context: int | None
    """`max_position_embeddings`."""
    dtype: str


def model_shape(config: Any, requested_dtype: str) -> ModelShape:
    """Read the decoder text config; `head_dim` from the config when present (Qwen3's differs from hidden/heads)."""
    text = config.get_text_config(decoder=True)
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    stored = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    stored_name = str(stored).removeprefix("torch.") if stored is not None else "float32"
    dtype = stored_name if requested_dtype == "auto" else requested_dtype
    return ModelShape(text.num_hidden_layers, kv_heads, head_dim, text.vocab_size,
                      getattr(text, "max_position_embeddings", None), dtype)


class PositionLimit(NamedTuple):
    """The decoder's context limit and the config attribute it is read from."""

    key: str
    """`max_target_positions` (Whisper) or `max_position_embeddings`."""
    value: int
    """Positions."""


def decoder_context_limit(config: Any) -> PositionLimit | None:
    """The decoder's position limit: Whisper's `max_target_positions` (its generate refuses beyond it), else
    `max_position_embeddings` of the decoder's text config; `None` for relative-position decoders such as T5."""
    text = config.get_text_config(decoder=True)
    for key in ("max_target_positions", "max_position_embeddings"):
        value = getattr(text, key, None)
        if isinstance(value, int):
            return PositionLimit(key, value)
    return None


def decoder_position_limit(config: Any) -> int | None:
    """`decoder_context_limit`'s value only."""
    limit = decoder_context_limit(config)
    return limit.value if limit is not None else None


def kv_bytes_per_token(shape: ModelShape) -> int:
    """2 (K and V) x layers x kv_heads x head_dim x dtype bytes, for one row."""
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * DTYPE_BYTES.get(shape.dtype, 4)


def rows_per_request(request: Request, batch_size: int, checkpoint: dict[str, Any] | None = None) -> int:
    """Rows decoded in parallel: batch x return sequences x beams x CFG-style rows.

    `guidance_scale > 1` (request, else the checkpoint's generation config) doubles the rows, as
    classifier-free guidance decodes a conditional and an unconditional row per request (MusicGen).
    """
    gen = request.generation
    guidance = gen.get("guidance_scale", (checkpoint or {}).get("guidance_scale"))
    cfg_rows = 2 if guidance is not None and guidance > 1 else 1
    return batch_size * int(gen.get("num_return_sequences") or 1) * int(gen.get("num_beams") or 1) * cfg_rows * request.budget.rows_per_request


class FrameRate(NamedTuple):
    """Frames per second of a frame-unit output, and who said so."""

    per_second: float
    source: FrameRateSource
    """`model_codec` (the backend read it from the checkpoint) or `request` (`[units] per_second`)."""


def domain_estimate(request: Request, requested_units: int | None, prompt_tokens: int, context: int | None,
                    frame_rate: FrameRate | None = None) -> DomainEstimate | None:
    """Estimates from `[budget]` input seconds and `[units]` requested seconds x the frame rate, when known."""
    budget, units = request.budget, request.units
    frames = round(frame_rate.per_second * units.requested_seconds) if frame_rate is not None and units.requested_seconds else None
    if budget.input_seconds is None and frame_rate is None:
        return None

    def scaled(density: float | None) -> int | None:
        return round(budget.input_seconds * density) if budget.input_seconds and density else None

    observed, conservative = scaled(budget.units_per_input_second), scaled(budget.conservative_units_per_input_second)

    def fits(estimate: int | None) -> bool | None:
        return None if estimate is None or requested_units is None else estimate <= requested_units

    return DomainEstimate(
        input_seconds=budget.input_seconds,
        observed_units=observed,
        conservative_units=conservative,
        context_constrained_units=None if context is None else max(context - prompt_tokens, 0),
        requested_frames=frames,
        frames_per_second=frame_rate.per_second if frame_rate is not None else None,
        frames_per_second_source=frame_rate.source if frame_rate is not None else None,
        observed_fits_budget=fits(observed),
        conservative_fits_budget=fits(conservative),
    )


class DeviceMemory(NamedTuple):
    device: str
    free_bytes: int | None
    total_bytes: int | None


def device_memory(device: str) -> DeviceMemory:
    """Free/total memory of the run device: `cudaMemGetInfo` for CUDA, MemAvailable for CPU."""
    if device.startswith("cuda"):
        import torch

        free, total = torch.cuda.mem_get_info(torch.device(device))
        return DeviceMemory(device, free, total)
    info = _meminfo()
    return DeviceMemory("cpu", info.get("MemAvailable"), info.get("MemTotal"))


def _meminfo() -> dict[str, int]:
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return {}
    values = {}
    for line in lines:
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key] = int(parts[0]) * 1024  # kB -> bytes
    return values


class MemoryFit(NamedTuple):
    """The memory half of `token-budget.json`, shared by every backend's estimate."""

    margin_bytes: int
    required_bytes: int
    device: str
    device_memory_free_bytes: int | None
    device_memory_total_bytes: int | None
    fits_memory: bool | None


def memory_fit(device: str, margin_fraction: float, needed_bytes: int) -> MemoryFit:
    """needed (weights + KV or latents + activations) + a margin of the device's total, vs its free memory."""
    memory = device_memory(resolve_device(device))
    margin = round((memory.total_bytes or 0) * margin_fraction)
    required = needed_bytes + margin
    fits = None if memory.free_bytes is None else required <= memory.free_bytes
    return MemoryFit(margin, required, memory.device, memory.free_bytes, memory.total_bytes, fits)


def with_refusals(draft: TokenBudget, refusals: tuple[str, ...], force: bool) -> TokenBudget:
    """Record the refusals, and whether `--force` overrode them (plan enforces them before writing anything)."""
    return draft.model_copy(update={"refusals": refusals, "forced": bool(refusals) and force})


def resolve_device(device: str) -> str:
    """`auto` -> `cuda:0` when CUDA is available, else `cpu`; `cuda` -> `cuda:0`."""
    if device == "auto":
        import torch

        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise RequestError(f"[model] device = {device!r}, but this torch has no usable CUDA device "
                               f"(torch {torch.__version__}); use device = 'cpu' or 'auto'")
    if device == "cuda":
        return "cuda:0"
    return device


def refusals_for(budget: TokenBudget, unit_word: str = "max_new_tokens") -> tuple[str, ...]:
    """Human reasons the plan must not run; empty when it fits."""
    reasons = []
    limit = budget.context_limit  # set whenever fits_context is (None: no context limit known)
    if budget.fits_context is False and limit is not None and (budget.prompt_tokens or 0) >= limit:
        prompt = budget.prompt_tokens or 0
        reasons.append(
            f"the prompt is too long: {prompt:,} tokens, but the model's context is {limit:,} tokens; "
            f"cut at least {prompt - limit + 1:,} tokens from [input] to generate anything "
            f"({prompt - limit + (budget.requested_units or 0):,} to keep {unit_word} = {budget.requested_units or 0:,}), "
            "or use a model with a longer context"
        )
    elif budget.fits_context is False and limit is not None:
        allowed = limit - (budget.prompt_tokens or 0)
        reasons.append(
            f"prompt ({budget.prompt_tokens:,} tokens) + budget ({budget.requested_units:,}) = {budget.effective_max_length:,} "
            f"exceeds the model's context limit {limit:,}; lower [generation] {unit_word} to at most {max(allowed, 0):,}, "
            "or pass --force to run anyway"
        )
    if budget.fits_memory is False:
        reasons.append(
            f"needs ~{human_bytes(budget.required_bytes)} (weights {human_bytes(budget.weight_bytes)} + KV {human_bytes(budget.kv_bytes_at_budget or 0)} "
            f"for {budget.rows_per_request} row(s) x {budget.effective_max_length or 0:,} tokens + activations {human_bytes(budget.activation_bytes_estimate)} "
            f"+ margin {human_bytes(budget.margin_bytes)}) but {budget.device} has {human_bytes(budget.device_memory_free_bytes or 0)} free; "
            "lower the budget or the batch, use a smaller dtype, free memory, or pass --force"
        )
    return tuple(reasons)


def enforce(budget: TokenBudget) -> None:
    """Raise BudgetRefused (exit 3) naming the numbers, unless the plan was forced."""
    if budget.refusals and not budget.forced:
        raise BudgetRefused("pre-flight refused the plan:" + "".join(f"\n  - {r}" for r in budget.refusals))

