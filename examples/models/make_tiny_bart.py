"""Build ``tiny-bart``: a random-weight BART (encoder-decoder text model) with tiny-lm's word-level tokenizer.

Why this exists: an encoder-decoder's `max_length` / `max_new_tokens` count decoder tokens only (the
encoder input is not in the decoder's context); genrun's record must say so, and tests need such a
model offline. Random weights: the record is the point, not the text.

Usage::

    python examples/models/make_tiny_bart.py [--out DIR]

Deterministic (fixed seed); ~50 KB of weights.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoTokenizer, BartConfig, BartForConditionalGeneration, GenerationConfig

from _build import parse_args, save_checkpoint  # sibling module: the scripts run as `python examples/models/make_*.py`

SEED = 0
HERE = Path(__file__).resolve().parent
TOKENIZER_FROM = HERE / "tiny-lm"
DEFAULT_OUT = HERE / "tiny-bart"
MAX_POSITIONS = 64


def main() -> None:
    args = parse_args(__doc__, DEFAULT_OUT)
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER_FROM)
    tokenizer.padding_side = "right"  # an encoder reads the whole (masked) input; right padding is the convention
    pad, bos, eos = tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id
    config = BartConfig(
        vocab_size=len(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=MAX_POSITIONS,
        pad_token_id=pad, bos_token_id=bos, eos_token_id=eos, decoder_start_token_id=eos, forced_eos_token_id=None,
    )
    torch.manual_seed(SEED)
    model = BartForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(pad_token_id=pad, bos_token_id=bos, eos_token_id=eos, decoder_start_token_id=eos)
    save_checkpoint(args.out, model, tokenizer)


if __name__ == "__main__":
    main()
