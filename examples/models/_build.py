"""Shared by the random-weight model scripts: the `--out` argument, and saving a checkpoint with its processor."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any


def parse_args(doc: str, default_out: Path, *extra: tuple[str, Path]) -> argparse.Namespace:
    """`--out DIR` (default `default_out`) plus any `(--name, default path)` options; torch runs on one thread (determinism)."""
    import torch

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, default=default_out)
    for flag, default in extra:
        parser.add_argument(flag, type=Path, default=default)
    torch.set_num_threads(1)
    return parser.parse_args()


def save_checkpoint(out: Path, model: Any, processor: Any) -> None:
    """Replace `out` with the model and its tokenizer/processor, then print the file sizes."""
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    sizes = {p.name: p.stat().st_size for p in sorted(out.iterdir())}
    print(json.dumps({"out": str(out), "parameters": model.num_parameters(), "bytes": sizes}, indent=1))


def byte_level_tokenizer(specials: tuple[str, ...]) -> Any:
    """A `Qwen2Tokenizer` with one token per byte (no merges) and `specials` after them; the first special is EOS and pad."""
    from transformers import Qwen2Tokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {char: i for i, char in enumerate(bytes_to_unicode().values())}
    for token in specials:
        vocab[token] = len(vocab)
    return Qwen2Tokenizer(vocab=vocab, merges=[], unk_token=None, bos_token=None, eos_token=specials[0], pad_token=specials[0],
                          additional_special_tokens=list(specials[1:]))
