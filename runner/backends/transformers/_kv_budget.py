"""KV-cache and context facts of a decoder checkpoint, read from its Hugging Face config.

Torch-free: a config object with `get_text_config` (transformers' `PretrainedConfig`, or any loader of
an HF `config.json` that offers it) is all these need, so every decoder backend shares one formula.
"""

from typing import Any, NamedTuple

from genrun.backends import DTYPE_BYTES


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
