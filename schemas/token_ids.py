"""The `token_ids` evidence kind: `generated-token-ids.json` (a readable summary of `generated-token-ids.safetensors`)
and the facts every row's stop evidence carries (`TokenStopFacts`), whichever backend saved the ids."""


from ._base import Strict
from ._versioning import Versioned
from .stop import StopEvidence


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


class TokenStopFacts(StopEvidence):
    """What the token checks read from every row's evidence when the backend declares `token_ids`."""

    last_token_id: int | None = None
    """Last generated id (`None` when the row has no tokens)."""
    fired: tuple[str, ...] = ()
    """Criteria that fired at the step the row finished, e.g. `EosTokenCriteria`."""
    eos_token_ids: tuple[int, ...] = ()
    """Effective EOS set."""
    max_new_tokens: int | None = None
    """Effective `max_new_tokens`."""
    max_length: int | None = None
    """Effective `max_length` (prompt included)."""
    prompt_length: int | None = None
    """Padded prompt length."""
