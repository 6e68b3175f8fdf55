"""Benchmark model fixtures: a randomly initialised ~20M-parameter Llama.

Why this exists: ``examples/models/tiny-lm`` (~80k params) is too small for
timings to mean anything, while downloading a real checkpoint is impossible
offline.  A random Llama of realistic layer shapes gives representative
compute per token.  It reuses the tiny-lm tokenizer (so prompts such as
``count down from 40 :`` tokenise the same way), but its weights are random:
its output is noise and it will rarely emit EOS, so benchmarks should bound
generation with ``max_new_tokens``.

Run ``python bench/_models.py [OUT_DIR]`` to build it and print its size.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    LlamaConfig,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
TINY_LM_DIR = REPO_ROOT / "examples" / "models" / "tiny-lm"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# bench/_work/ is git-ignored: the ~84 MB of random weights must never be committed.
DEFAULT_OUT = REPO_ROOT / "bench" / "_work" / "random-lm"


def build_random_lm(
    out_dir: Path | str,
    hidden: int = 512,
    layers: int = 8,
    heads: int = 8,
    kv_heads: int = 8,
    vocab_size: int | None = None,
    seed: int = 0,
    tokenizer_dir: Path = TINY_LM_DIR,
) -> Path:
    """Build (once) a random Llama causal LM in ``out_dir`` and return its path.

    Building is skipped when ``out_dir/config.json`` already exists, so
    benchmarks can call this unconditionally.  ``vocab_size`` defaults to the
    tokenizer's size and must equal it if given: a larger embedding would let
    the random model emit ids the tokenizer cannot decode.  The defaults give
    ~21M parameters (intermediate size is 2 * hidden).
    """
    out = Path(out_dir)
    if (out / "config.json").exists():
        return out
    if not (tokenizer_dir / "tokenizer.json").exists():
        raise FileNotFoundError(
            f"{tokenizer_dir} has no tokenizer; run examples/models/make_tiny_lm.py first"
        )
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if vocab_size is None:
        vocab_size = len(tokenizer)
    if vocab_size != len(tokenizer):
        raise ValueError(f"vocab_size={vocab_size} but the tokenizer has {len(tokenizer)} tokens")
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    # Same policy as tiny-lm: special ids only, so library length defaults apply.
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    # Copy rather than re-save, so the tokenizer files match tiny-lm byte for byte.
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).exists():
            shutil.copy2(tokenizer_dir / name, out / name)
    return out


def count_params(model_dir: Path) -> int:
    """Load the saved model and count its parameters (tied weights counted once)."""
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return sum(p.numel() for p in model.parameters())


if __name__ == "__main__":
    path = build_random_lm(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
    print(f"random-lm: params={count_params(path)} path={path}")
