"""Build ``tiny-vllm-lm``: a tiny Llama that vLLM's CPU attention accepts, whose greedy output is known in advance.

Why this exists: vLLM's CPU attention kernels refuse head_dim 16 (the bundled ``tiny-lm``), so vLLM tests need a
checkpoint with head_dim >= 32 (this one: 64).  Its greedy output is fixed *by construction*, not by training:
the embeddings of the byte classes below are orthonormal (scaled to unit RMS) and ``lm_head`` maps each class to
its successor, so greedy decoding walks a fixed successor table with a logit margin of ~16 that the random
(std 0.02) attention/MLP layers cannot flip, on any kernel or dtype.  The build takes a second and needs no training.

Successor table (the next token depends only on the last byte of the text so far)::

    '0' -> '1' -> ... -> '9' -> '0'      digits cycle forever: never EOS (max_tokens / max_model_len stops)
    'a' -> 'b' -> ... -> 'z' -> <eos>    letters run to EOS: a prompt ending in 'w' gives "xyz" + EOS
    ' ' -> 'a'                           a prompt ending in a space gives the alphabet + EOS (27 tokens)
    any other byte -> ' '                e.g. "Hi!" gives " abcdefghijklmnopqrstuvwxyz" + EOS (28 tokens)

- Tokenizer: a byte-level ``Qwen2Tokenizer`` (one token per byte, no merges) + ``<|endoftext|>`` (id 256) as
  EOS and pad, so decoded text is the bytes themselves and stop strings match.
- Chat template (``chat_template.jinja``): ``role: content`` lines, then ``assistant:`` as the generation prompt, so a
  conversation's greedy answer is the alphabet + EOS (the prompt ends in ':', then ' ' -> 'a').
- ``generation_config.json`` sets ``max_new_tokens`` = GENERATION_CONFIG_MAX_NEW_TOKENS: vLLM's default
  ``generation_config="auto"`` turns it into a hidden ``max_tokens`` cap (and transformers applies it too).
- Model: Llama, hidden 128, 2 heads of 64 (1 KV head), 2 layers, intermediate 256, 1024 positions, untied head.
  ``--layers`` / ``--intermediate`` build a heavier model of the same construction (same tokenizer and greedy
  output; the check below still runs) for benchmarks where generation should cost what a real model's does:
  ``--layers 16 --intermediate 2048`` is 13 M parameters (54 MB), logit margin 14.6.

Usage::

    python make_tiny_vllm_lm.py [--out DIR] [--layers N --intermediate N]

Deterministic (fixed seed); exits non-zero unless the reloaded checkpoint reproduces every expected completion.
"""

from __future__ import annotations

import argparse
import json
import shutil
import string
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
MODELS_DIR = HERE  # _build.py sits beside this script
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(MODELS_DIR))
from _build import byte_level_tokenizer  # noqa: E402  (the repo's byte-level tokenizer, shared with tiny-llava/tiny-audio-lm)

from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaConfig  # noqa: E402
from transformers.convert_slow_tokenizer import bytes_to_unicode  # noqa: E402

SEED = 0
DEFAULT_OUT = HERE / "tiny-vllm-lm"
EOS = "<|endoftext|>"
HIDDEN = 128
HEADS, KV_HEADS, HEAD_DIM = 2, 1, 64  # head_dim >= 32 for vLLM's CPU attention
LAYERS = 2
INTERMEDIATE = 256
MAX_POSITIONS = 1024
GENERATION_CONFIG_MAX_NEW_TOKENS = 20  # distinct from vLLM's own default of 16, so the two caps are told apart
LOGIT_SCALE = 0.125  # target logit = scale * HIDDEN = 16; every other logit ~0
MIN_MARGIN = 8.0
DIGITS, LETTERS = string.digits, string.ascii_lowercase
CHAT_TEMPLATE = ("{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


def successor(char: str) -> str | None:
    """The designed next character after ``char``; None means EOS."""
    if char in DIGITS:
        return DIGITS[(DIGITS.index(char) + 1) % 10]
    if char in LETTERS:
        return None if char == "z" else LETTERS[LETTERS.index(char) + 1]
    return "a" if char == " " else " "


def expected_completion(prompt: str, limit: int = 64) -> tuple[str, bool]:
    """(text, ends_with_eos) of greedy decoding after ``prompt``, at most ``limit`` tokens (EOS included)."""
    text, last = "", prompt[-1]
    for _ in range(limit):
        nxt = successor(last)
        if nxt is None:
            return text, True
        text, last = text + nxt, nxt
    return text, False


def byte_token_ids(tokenizer) -> dict[int, int]:
    """byte value -> token id of the byte-level tokenizer."""
    return {b: tokenizer.convert_tokens_to_ids(ch) for b, ch in bytes_to_unicode().items()}


def design_weights(model, tokenizer) -> None:
    """Orthonormal class embeddings and an lm_head that maps each class to its successor (see the module doc)."""
    ids = byte_token_ids(tokenizer)
    classes = [*DIGITS, *LETTERS, " ", "other"]
    basis = torch.linalg.qr(torch.randn(HIDDEN, len(classes)))[0].T * HIDDEN**0.5  # rows: orthogonal, RMS 1
    vector = dict(zip(classes, basis))
    embed = model.model.embed_tokens.weight.data
    head = model.lm_head.weight.data
    head.zero_()  # tokens that are nobody's successor (other bytes) keep logit ~0
    for byte, token in ids.items():
        char = chr(byte)
        embed[token] = vector[char if char in vector else "other"]
    embed[tokenizer.convert_tokens_to_ids(EOS)] = vector["other"]
    for char in classes:
        nxt = successor("!" if char == "other" else char)  # "!" stands for every other byte
        target = tokenizer.convert_tokens_to_ids(EOS) if nxt is None else ids[ord(nxt)]
        head[target] += LOGIT_SCALE * vector[char]


def build(out: Path, layers: int = LAYERS, intermediate: int = INTERMEDIATE) -> None:
    torch.manual_seed(SEED)
    tokenizer = byte_level_tokenizer((EOS,))
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=HIDDEN, intermediate_size=intermediate, num_hidden_layers=layers,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=eos_id, pad_token_id=eos_id,
    )
    model = AutoModelForCausalLM.from_config(config).eval()
    design_weights(model, tokenizer)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=eos_id,
                                               max_new_tokens=GENERATION_CONFIG_MAX_NEW_TOKENS)
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)


CHECK_PROMPTS = ("abc", "Count: 0", "vw", "Hi!", "hello ", "x", "z", "The year 1999", "q")


@torch.no_grad()
def check(out: Path) -> tuple[list[str], float]:
    """Reload ``out``; return (failures, smallest top-1 minus top-2 logit margin) over CHECK_PROMPTS (64 tokens each)."""
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    failures, margin = [], float("inf")
    for prompt in CHECK_PROMPTS:
        text, eos = expected_completion(prompt)
        want = tokenizer(text, add_special_tokens=False).input_ids + ([tokenizer.eos_token_id] if eos else [])
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        result = model.generate(ids, max_new_tokens=64, do_sample=False, output_logits=True, return_dict_in_generate=True)
        got = result.sequences[0, ids.shape[1]:].tolist()
        if got != want:
            failures.append(f"{prompt!r}: got {tokenizer.decode(got)!r}, want {text!r} eos={eos}")
        top2 = torch.stack(result.logits)[:, 0].topk(2, dim=-1).values
        margin = min(margin, (top2[:, 0] - top2[:, 1]).min().item())
    return failures, margin


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--layers", type=int, default=LAYERS, help=f"decoder layers (default {LAYERS}: the bundled model)")
    parser.add_argument("--intermediate", type=int, default=INTERMEDIATE, help=f"MLP width (default {INTERMEDIATE})")
    args = parser.parse_args()
    if (args.layers, args.intermediate) != (LAYERS, INTERMEDIATE) and args.out == DEFAULT_OUT:
        parser.error("--layers/--intermediate build a benchmark model: give it its own --out (the bundled one stays as it is)")
    torch.set_num_threads(1)
    build(args.out, args.layers, args.intermediate)
    failures, margin = check(args.out)
    for failure in failures:
        print("FAIL", failure, file=sys.stderr)
    sizes = {p.name: p.stat().st_size for p in sorted(args.out.iterdir())}
    print(json.dumps({"out": str(args.out), "min_margin": round(margin, 2), "failures": len(failures), "bytes": sizes}, indent=1))
    return 1 if failures or margin < MIN_MARGIN else 0


if __name__ == "__main__":
    sys.exit(main())
