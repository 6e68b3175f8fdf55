"""`generated-token-ids.json`: a readable summary of `generated-token-ids.safetensors`."""


from ._base import Strict
from ._versioning import Versioned


class TokenSequenceSummary(Strict):
    """One generated sequence (new tokens only, no prompt, no trailing padding)."""

    index: int
    """Row index; the tensor is `sequence_<index>`."""
    call_index: int
    """Outermost generate call that produced it."""
    count: int
    """Generated tokens kept for this row."""
    last_ids: tuple[int, ...]
    """Last 64 ids."""
    eos_positions: tuple[int, ...]
    """0-based positions of EOS ids within the generated tokens."""
    text: str | None
    """Decode with `skip_special_tokens=True` (`None` without a tokenizer)."""
    text_with_special: str | None
    """Decode keeping special tokens."""


class GeneratedTokenIds(Versioned):
    """Per-sequence summaries of the saved token ids."""

    prompt_length: int | None
    """Padded prompt length of the (first) call."""
    eos_token_ids: tuple[int, ...]
    """Effective EOS set used to find `eos_positions`."""
    pad_token_id: int | None
    """Effective pad id (trailing pads after a row finished are not kept)."""
    sequences: tuple[TokenSequenceSummary, ...]
    """One entry per row."""
