"""`token-budget.json`: the pre-flight estimate, made before any weights are loaded."""

from typing import Literal

from ._base import Strict
from ._versioning import Versioned
from .progress import Unit

FrameRateSource = Literal["request", "model_codec"]
"""Where frames per second came from: `[units] per_second`, or the model's audio codec config (MusicGen)."""

LengthSource = Literal["request", "model_generation_config", "library_default"]
"""Who set the length limit generate stops at: the request, the checkpoint's generation config, or the library default."""


class DomainEstimate(Strict):
    """Estimates from `[budget]` and `[units]` domain hints."""

    input_seconds: float | None
    """Input media duration."""
    observed_units: int | None
    """input_seconds x units_per_input_second."""
    conservative_units: int | None
    """input_seconds x conservative_units_per_input_second."""
    context_constrained_units: int | None
    """Units that fit in the context after the prompt."""
    requested_frames: int | None
    """frames per second x requested seconds, for frame units."""
    frames_per_second: float | None = None
    """The frame rate the plan used (absent in snapshots planned before genrun read it from the codec)."""
    frames_per_second_source: FrameRateSource | None = None
    """`model_codec` (read from the checkpoint's audio codec config) or `request` (`[units] per_second`)."""
    observed_fits_budget: bool | None
    """The observed estimate fits within the requested units."""
    conservative_fits_budget: bool | None
    """The conservative estimate fits within the requested units."""


class TokenBudget(Versioned):
    """What the run may need, and whether it fits, computed before loading weights."""

    units: Unit
    """Unit of `requested_units`."""
    prompt_tokens: int | None
    """Padded prompt length in tokens (`None` for diffusion)."""
    batch_size: int
    """Prompts in the batch."""
    requested_units: int | None
    """New units the request allows (`max_new_tokens`, frames, or steps); `None` when unset."""
    requested_units_source: LengthSource | None
    """Where the length limit comes from."""
    effective_max_length: int | None
    """Total sequence length generate will stop at (prompt + new)."""
    context_limit: int | None
    """`max_position_embeddings` (or the tokenizer limit, whichever is smaller)."""
    fits_context: bool | None
    """`effective_max_length <= context_limit`; `None` when either is unknown."""
    kv_bytes_per_token: int | None
    """2 x layers x kv_heads x head_dim x dtype bytes, per row."""
    rows_per_request: int
    """batch x return sequences x `[budget] rows_per_request`."""
    kv_bytes_at_budget: int | None
    """KV cache at the full budget for all rows."""
    weight_bytes: int
    """Bytes of weights at the run dtype."""
    activation_bytes_estimate: int
    """Latents / logits / working memory estimate."""
    margin_bytes: int
    """Safety margin kept free."""
    required_bytes: int
    """weights + KV (or latents) + activations + margin."""
    device: str
    """Device the estimate is for (`cpu`, `cuda:0`)."""
    device_memory_free_bytes: int | None
    """Free memory on that device at plan time."""
    device_memory_total_bytes: int | None
    """Total memory of that device."""
    fits_memory: bool | None
    """`required_bytes <= device_memory_free_bytes`; `None` when free memory is unknown."""
    domain: DomainEstimate | None
    """Domain estimates when `[budget]` hints are given or a frame rate is known."""
    refusals: tuple[str, ...]
    """Why the pre-flight refused (empty when it fits)."""
    forced: bool
    """The plan went ahead despite refusals (`--force`)."""


NO_LENGTH_LIMIT = "no length limit in the request (the code that generates sets its own)"
"""What a plan without `requested_units` says: a loop or pipeline that stops where its own code decides."""


def describe_requested(budget: TokenBudget) -> str:
    """`64 tokens (request)`, `30 steps` (source unknown), or `NO_LENGTH_LIMIT` when the plan knows no limit."""
    if budget.requested_units is None:
        return NO_LENGTH_LIMIT
    source = f" ({budget.requested_units_source})" if budget.requested_units_source is not None else ""
    return f"{budget.requested_units:,} {budget.units}s{source}"
