"""Build ``tiny-audio-lm``: a random-weight Qwen2-Audio (audio encoder + decoder-only LM) with a locally built processor.

Why this exists: audio LLMs are where prompt length hides: audio features enter *inside the text prompt*
(the processor expands one `<|AUDIO|>` placeholder into one token per audio frame pair), so the
prompt's token count depends on the audio's duration and shares the decoder context with the output.
genrun's record must show that; random weights are fine, the record is the point.

- Processor: `Qwen2AudioProcessor` = the stock `WhisperFeatureExtractor` (80 mel bins, 16 kHz, 30 s)
  + a byte-level `Qwen2Tokenizer` built here (256 byte tokens, no merges, plus the special tokens).
- Model: `Qwen2AudioForConditionalGeneration` from a tiny config (d_model 16, one layer each).

Usage::

    python examples/models/make_tiny_audio_lm.py [--out DIR]

Deterministic (fixed seed).
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (GenerationConfig, Qwen2AudioConfig, Qwen2AudioForConditionalGeneration, Qwen2AudioProcessor,
                          WhisperFeatureExtractor)

from _build import byte_level_tokenizer, parse_args, save_checkpoint  # sibling module: the scripts run as `python examples/models/make_*.py`

SEED = 0
HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "tiny-audio-lm"
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|audio_bos|>", "<|AUDIO|>", "<|audio_eos|>")
MAX_POSITIONS = 2048


def build_tokenizer():
    return byte_level_tokenizer(SPECIALS)


def main() -> None:
    args = parse_args(__doc__, DEFAULT_OUT)
    tokenizer = build_tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIALS}
    processor = Qwen2AudioProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=80), tokenizer=tokenizer)
    config = Qwen2AudioConfig(
        audio_config={"num_mel_bins": 80, "d_model": 16, "encoder_layers": 1, "encoder_attention_heads": 2, "encoder_ffn_dim": 32,
                      "max_source_positions": 1500},
        text_config={"model_type": "qwen2", "vocab_size": len(tokenizer), "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                     "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": MAX_POSITIONS,
                     "eos_token_id": ids["<|endoftext|>"], "pad_token_id": ids["<|endoftext|>"]},
        audio_token_index=ids["<|AUDIO|>"],
    )
    torch.manual_seed(SEED)
    model = Qwen2AudioForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(eos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"])
    save_checkpoint(args.out, model, processor)


if __name__ == "__main__":
    main()
