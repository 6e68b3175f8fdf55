"""`generation-config.before-generate.json`: the config exactly as generate used it.

Core, unlike the built-in backends' other evidence models: this is the file of the `generation_config` evidence KIND,
which any backend may declare (`genrun.backends` exports it) and which analysis checks itself (the limits a request
set, and who set each: `analysis/_check_limits.py`); the `transformers` backend declares it as its call config.
"""

from typing import Any, Literal

from .call_config import CallConfigRecord

LimitSource = Literal["request", "model_generation_config", "library_default", "entrypoint", "model_config"]
"""Who set a limit; `model_config` is the checkpoint's `config.json` (the decoder's position limit)."""


class GenerationConfigBeforeGenerate(CallConfigRecord):
    """Written inside generate, after its merge, before the first token."""

    call_index: int
    """Which outermost generate call of the run this is (0 for the first)."""
    model_class: str
    """Class of the model generate ran on."""
    model_generation_config: dict[str, Any]
    """The checkpoint's own `generation_config` (non-default fields)."""
    overrides: dict[str, Any]
    """What the caller passed: `[generation]` overrides, or an entry point's own kwargs."""
    effective: dict[str, Any]
    """The merged config as generate used it, incl. derived `max_length` and `eos_token_id` as a list."""
    limit_sources: dict[str, LimitSource]
    """For `max_length`, `max_new_tokens`, `max_time`, `stop_strings`, `eos_token_id`: who set it; the context limit under the
    config key it is read from (`max_target_positions` for Whisper, else `max_position_embeddings`): `model_config`."""
    eos_token_ids: tuple[int, ...]
    """The effective EOS id set (empty when none)."""
    pad_token_id: int | None
    """The effective pad id (generate defaults it to `eos[0]`)."""
    pad_defaulted_to_eos: bool
    """The pad id was not set anywhere and generate used `eos[0]`."""
    prompt_length: int
    """Padded prompt length in tokens."""
    batch_rows: int
    """Rows decoded (batch x return sequences)."""
    context_limit: int | None
    """The decoder's position limit (Whisper: `max_target_positions`, else `max_position_embeddings`), when known; its key is
    in `limit_sources`."""
    dtype: str
    """Model parameter dtype."""
    device: str
    """Model device."""
