"""Build, train, verify and save ``tiny-lm``: a ~80k-parameter Llama that counts down.

Why this exists: tests and examples need a real causal LM that loads offline
with ``AutoModelForCausalLM`` / ``AutoTokenizer`` and whose greedy output is
known in advance, including *how many tokens it emits before EOS*.  A model
that counts down gives exactly that: the prompt's number controls the output
length, so one prompt can run 30+ tokens (to exercise ``max_new_tokens``
caps) and another can stop early on its own EOS.

Task and prompt format (whitespace-separated words, one token each)::

    prompt:      "count down from N :"          (tokenizer prepends <bos>)
    completion:  "N-1 N-2 ... 1 0" then <eos>

For N in 1..63 greedy decoding emits exactly N number tokens and then
``<eos>`` (N + 1 new tokens in total), so ``max_new_tokens=64`` always
reaches EOS.  Example: ``count down from 3 :`` -> ``2 1 0 <eos>``.

The model is also trained on prompts without ``<bos>`` (e.g. for callers
using ``add_special_tokens=False``) and is verified with left-padded batches.

Usage::

    python examples/models/make_tiny_lm.py [--out DIR]

The run is deterministic: fixed seed, deterministic torch algorithms and a
fixed thread count, so rebuilding yields a byte-identical
``model.safetensors`` on the same software stack.  The script exits non-zero
if the saved model does not reproduce every expected completion.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    LlamaConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)
from transformers.utils.logging import disable_progress_bar

MAX_N = 63  # N tokens + EOS must fit in the verification budget of 64 new tokens.
MAX_NEW_TOKENS = 64
MIN_MARGIN = 1.0  # top-1 minus top-2 logit; headroom so bf16/fp16 runs decode identically.
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")  # ids 0..3; pad != eos on purpose.
WORDS = ("count", "down", "from", ":")
SEED = 0
TRAIN_STEPS = 400
LEARNING_RATE = 1e-2
DEFAULT_OUT = Path(__file__).resolve().parent / "tiny-lm"


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Build a word-level tokenizer whose every prompt/output word is a single token.

    One token per number keeps the output length equal to N, which is what the
    tests rely on.  The WordPiece decoder re-inserts spaces between tokens so
    decoded text is readable ("2 1 0").
    """
    vocab_list = [*SPECIAL_TOKENS, *WORDS, *(str(n) for n in range(MAX_N + 1))]
    vocab = {token: index for index, token in enumerate(vocab_list)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="<bos> $A",
        pair="<bos> $A $B",
        special_tokens=[("<bos>", vocab["<bos>"])],
    )
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",  # decoder-only: batched generation needs left padding.
        model_max_length=256,
    )


def build_model(tokenizer: PreTrainedTokenizerFast) -> PreTrainedModel:
    """Create a freshly initialised tiny Llama whose special ids match the tokenizer."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = AutoModelForCausalLM.from_config(config)
    # Only the special ids: no length/sampling defaults, so library defaults apply.
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return model


def prompt_for(n: int) -> str:
    """Return the canonical prompt asking the model to count down from ``n``."""
    return f"count down from {n} :"


def expected_ids(tokenizer: PreTrainedTokenizerFast, n: int) -> list[int]:
    """Return the exact greedy continuation for ``n``: ``n-1 ... 0`` then EOS."""
    numbers = " ".join(str(k) for k in range(n - 1, -1, -1))
    ids = tokenizer(numbers, add_special_tokens=False).input_ids
    return [*ids, tokenizer.eos_token_id]


def build_batch(tokenizer: PreTrainedTokenizerFast) -> dict[str, torch.Tensor]:
    """Tokenise every (N, with/without BOS) example into one right-padded batch.

    Only the completion (numbers + EOS) contributes to the loss: the prompt's N
    is arbitrary and cannot be predicted.  Right padding with explicit position
    ids keeps every example starting at position 0, as at inference time.
    """
    rows: list[tuple[list[int], list[int]]] = []
    for add_bos in (True, False):
        for n in range(1, MAX_N + 1):
            prompt = tokenizer(prompt_for(n), add_special_tokens=add_bos).input_ids
            completion = expected_ids(tokenizer, n)
            rows.append((prompt + completion, [-100] * len(prompt) + completion))
    width = max(len(ids) for ids, _ in rows)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in rows])
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in rows])
    attention_mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in rows])
    position_ids = torch.arange(width).expand(len(rows), width)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "labels": labels,
    }


def train(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> float:
    """Fit the whole (tiny) data set with full-batch AdamW; return the final loss.

    Full-batch training avoids any data-order randomness, which keeps the run
    reproducible; the data set is small enough that this is also fastest.
    """
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=TRAIN_STEPS)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(TRAIN_STEPS):
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    model.eval()
    return loss.item()


@torch.no_grad()
def find_failures(out_dir: Path) -> list[tuple[int, str]]:
    """Reload the saved model and tokenizer and check every greedy completion.

    Checking the reloaded artifacts (not the in-memory model) proves the saved
    directory is what callers get.  Covers single prompts with and without
    BOS, and one left-padded batch of all prompts.  Returns ``(N, reason)``.
    """
    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    model = AutoModelForCausalLM.from_pretrained(out_dir).eval()
    failures: list[tuple[int, str]] = []
    for add_bos in (True, False):
        for n in range(1, MAX_N + 1):
            inputs = tokenizer(prompt_for(n), return_tensors="pt", add_special_tokens=add_bos)
            output = model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
            generated = output[0, inputs.input_ids.shape[1] :].tolist()
            if generated != expected_ids(tokenizer, n):
                failures.append((n, f"bos={add_bos}: {tokenizer.decode(generated)!r}"))
    prompts = [prompt_for(n) for n in range(1, MAX_N + 1)]
    inputs = tokenizer(prompts, return_tensors="pt", padding=True)
    output = model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
    for n, row in zip(range(1, MAX_N + 1), output[:, inputs.input_ids.shape[1] :].tolist()):
        expected = expected_ids(tokenizer, n)
        if row[: len(expected)] != expected:
            failures.append((n, f"batched: {tokenizer.decode(row)!r}"))
    return failures


@torch.no_grad()
def min_margin(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> float:
    """Smallest top-1 minus top-2 logit over all supervised positions.

    A comfortable margin means greedy output survives lower-precision
    inference (bf16/fp16, GPU kernels), not just this CPU's float32 maths.
    """
    logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits[:, :-1]
    supervised = batch["labels"][:, 1:] != -100
    top2 = logits[supervised].topk(2, dim=-1).values
    return (top2[:, 0] - top2[:, 1]).min().item()


def dir_size(path: Path) -> int:
    """Total bytes of the files in ``path`` (the size budget is <= 5 MB)."""
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def parse_args() -> argparse.Namespace:
    """Parse the command line; only the output directory is configurable."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    return parser.parse_args()


def main() -> int:
    """Build, train, save and verify; return a process exit status."""
    args = parse_args()
    disable_progress_bar()
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(2)

    tokenizer = build_tokenizer()
    model = build_model(tokenizer)
    batch = build_batch(tokenizer)
    start = time.perf_counter()
    loss = train(model, batch)
    seconds = time.perf_counter() - start

    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)

    failures = find_failures(args.out)
    for n, reason in failures:
        print(f"FAIL N={n} {reason}", file=sys.stderr)
    margin = min_margin(model, batch)
    params = sum(p.numel() for p in model.parameters())
    verified = MAX_N - len({n for n, _ in failures})
    print(
        f"tiny-lm: params={params} dir_bytes={dir_size(args.out)} train_s={seconds:.1f} "
        f"final_loss={loss:.5f} min_margin={margin:.2f} "
        f"verified_N={verified}/{MAX_N} (1..{MAX_N}) out={args.out}"
    )
    return 1 if failures or margin < MIN_MARGIN else 0


if __name__ == "__main__":
    sys.exit(main())
