"""Tiny local causal LMs and request files for the instrumentation/execution tests.

Models are real checkpoints loaded with `from_pretrained` by the code under test:
- `tiny_lm_variant`: the bundled count-down model (`examples/models/tiny-lm`) with its
  `generation_config.json` replaced (a checkpoint `max_length`, no pad, no EOS, ...). Greedy
  output of `count down from N :` is `N-1 ... 0 <eos>` (N + 1 new tokens).
- `random_lm`: a randomly initialised Llama with the same tokenizer and a long context; with
  the default generation config it has **no EOS**, so it only stops on a limit (for max_time,
  signals and long runs).
Every built variant is named once in `MODEL_BUILDS` and shared by the whole session through conftest's
`fixture_models` (builds are cached by directory).
"""

import json
import shutil
from pathlib import Path
from collections.abc import Callable
from typing import Any

import orjson

REPO = Path(__file__).resolve().parent.parent
TINY_LM = REPO / "examples" / "models" / "tiny-lm"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
EOS, PAD, BOS = 2, 0, 1  # tiny-lm's special ids


def tiny_lm_variant(dest: Path, generation_config: dict[str, Any], config_updates: dict[str, Any] | None = None) -> Path:
    """A copy of tiny-lm whose `generation_config.json` is exactly `generation_config` (built once per path)."""
    if (dest / "config.json").is_file():
        return dest
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(TINY_LM, tmp)
    (tmp / "generation_config.json").write_text(json.dumps(generation_config))
    if config_updates:
        config = json.loads((tmp / "config.json").read_text())
        config.update(config_updates)
        (tmp / "config.json").write_text(json.dumps(config))
    tmp.rename(dest)
    return dest


def random_lm(
    dest: Path,
    *,
    hidden: int = 64,
    layers: int = 2,
    max_position: int = 8192,
    generation_config: dict[str, Any] | None = None,
    seed: int = 0,
) -> Path:
    """A random Llama with tiny-lm's tokenizer; default generation config has bos/pad only (no EOS)."""
    if (dest / "config.json").is_file():
        return dest
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, LlamaConfig

    config = LlamaConfig(
        vocab_size=72, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_position,
        bos_token_id=BOS, eos_token_id=None, pad_token_id=PAD, tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config = GenerationConfig(**(generation_config or {"bos_token_id": BOS, "pad_token_id": PAD}))
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    for name in TOKENIZER_FILES:
        if (TINY_LM / name).exists():
            shutil.copy2(TINY_LM / name, tmp / name)
    tokenizer_config = json.loads((tmp / "tokenizer_config.json").read_text())
    tokenizer_config["model_max_length"] = max_position  # tiny-lm's says 256
    (tmp / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    tmp.rename(dest)
    return dest


def toml_value(value: Any) -> str:
    """A TOML literal for simple values (JSON's syntax for these is valid TOML)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def request_text(
    model: Path,
    *,
    name: str = "t",
    prompt: str | None = "count down from 3 :",
    prompts: list[str] | None = None,
    generation: dict[str, Any] | None = None,
    model_extra: dict[str, Any] | None = None,
    entrypoint: str | None = None,
    entrypoint_kwargs: dict[str, Any] | None = None,
    progress: dict[str, Any] | None = None,
    units: dict[str, Any] | None = None,
) -> str:
    """A TOML request; `prompts` (a batch) replaces `prompt`."""
    lines = [f'name = "{name}"', "seed = 0", "[model]", f"path = {toml_value(str(model))}", 'dtype = "float32"', 'device = "cpu"']
    lines += [f"{k} = {toml_value(v)}" for k, v in (model_extra or {}).items()]
    lines.append("[input]")
    lines.append(f"prompts = {toml_value(prompts)}" if prompts is not None else f"prompt = {toml_value(prompt)}")
    lines.append("[generation]")
    lines += [f"{k} = {toml_value(v)}" for k, v in (generation or {}).items()]
    if entrypoint is not None:
        lines += ["[entrypoint]", f"callable = {toml_value(entrypoint)}"]
        if entrypoint_kwargs:
            lines.append(f"kwargs = {toml_value(entrypoint_kwargs)}")
    for table, values in (("progress", progress), ("units", units)):
        if values:
            lines.append(f"[{table}]")
            lines += [f"{k} = {toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def plan(directory: Path, text: str, *, store: Path | None = None, filename: str = "request.toml", force: bool = False) -> Path:
    """Write the request into `directory` and freeze it with the real `plan_request`; returns the snapshot."""
    from genrun.runner.plan import plan_request

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / filename
    path.write_text(text)
    return plan_request(path, store=store or directory / "store", force=force)


def read_json(snapshot: Path, name: str) -> Any:
    """Parse one JSON artifact."""
    return orjson.loads((snapshot / name).read_bytes())


def read_progress(snapshot: Path) -> list[dict[str, Any]]:
    """Every `progress.ndjson` record."""
    return [orjson.loads(line) for line in (snapshot / "progress.ndjson").read_bytes().splitlines()]


def read_ids(snapshot: Path) -> dict[str, list[int]]:
    """`generated-token-ids.safetensors` as lists."""
    from safetensors.torch import load_file

    return {k: v.tolist() for k, v in load_file(snapshot / "generated-token-ids.safetensors").items()}


BPE_SPECIALS = ("<|endoftext|>", "<pad>", "<s>")  # ids 0, 1, 2 in the BPE tokenizer


def bpe_tokenizer_dir(dest: Path, vocab_size: int = 512) -> Path:
    """A byte-level BPE tokenizer trained on transformers' own generation sources (local text only).

    tiny-lm's word-level tokenizer cannot build transformers' `StopStringCriteria` (it tokenises
    the probe string "abcdef" to `<unk>`), so stop-string cases use this one.
    """
    if (dest / "tokenizer.json").is_file():
        return dest
    import transformers.generation as generation_package
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    sources = sorted(str(p) for p in Path(generation_package.__file__).parent.glob("*.py"))
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(BPE_SPECIALS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train(sources, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=BPE_SPECIALS[0], pad_token=BPE_SPECIALS[1], bos_token=BPE_SPECIALS[2])
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    fast.save_pretrained(tmp)
    tmp.rename(dest)
    return dest


def random_bpe_lm(dest: Path, tokenizer_dir: Path, generation_config: dict[str, Any], *, seed: int = 0) -> Path:
    """A random Llama over the BPE tokenizer with exactly `generation_config` as its generation config."""
    if (dest / "config.json").is_file():
        return dest
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, LlamaConfig

    config = LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, bos_token_id=2, eos_token_id=None, pad_token_id=None,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config = GenerationConfig(**generation_config)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    for path in tokenizer_dir.iterdir():
        shutil.copy2(path, tmp / path.name)
    tmp.rename(dest)
    return dest


def pick_stop_string(tokenizer: Any, ids: list[int], min_step: int) -> tuple[str, int]:
    """A stop string from a greedy trajectory: the text of the first token at step >= `min_step` that is
    2+ printable characters and appears nowhere in the text before it. Returns (string, step)."""
    for step in range(min_step, len(ids)):
        text = tokenizer.decode([ids[step]])
        before = tokenizer.decode(ids[:step])
        if len(text) >= 2 and text.isprintable() and text.strip() == text and text not in before:
            return text, step
    raise AssertionError(f"no usable stop string in {ids}")


ENTRY_SOURCE = '''
"""Entry points and loaders used by genrun's tests (written next to the request file)."""
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaForCausalLM
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList


def _encode(tok, inputs):
    return tok(inputs["prompt"], return_tensors="pt")


def decode_only(model, tok, inputs, generation):
    """What a typical transcription helper does: keep only the text, special tokens dropped."""
    enc = _encode(tok, inputs)
    out = model.generate(**enc, **generation)
    return tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)


class RaiseAt(StoppingCriteria):
    def __init__(self, length):
        self.length = length

    def __call__(self, input_ids, scores, **kwargs):
        if input_ids.shape[1] >= self.length:
            raise RuntimeError(f"user criterion failed at length {input_ids.shape[1]}")
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


class StopAfter(StoppingCriteria):
    def __init__(self, length):
        self.length = length

    def __call__(self, input_ids, scores, **kwargs):
        return torch.full((input_ids.shape[0],), input_ids.shape[1] >= self.length, dtype=torch.bool, device=input_ids.device)


def raise_mid_run(model, tok, inputs, generation, after=3):
    enc = _encode(tok, inputs)
    criteria = StoppingCriteriaList([RaiseAt(enc["input_ids"].shape[1] + after)])
    return model.generate(**enc, stopping_criteria=criteria, **generation)


def custom_stop(model, tok, inputs, generation, after=3):
    enc = _encode(tok, inputs)
    criteria = StoppingCriteriaList([StopAfter(enc["input_ids"].shape[1] + after)])
    out = model.generate(**enc, stopping_criteria=criteria, **generation)
    return tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)


def stop_strings_without_tokenizer(model, tok, inputs, generation):
    enc = _encode(tok, inputs)
    return model.generate(**enc, stop_strings=["x"], **generation)  # generate refuses: no tokenizer


def fail_after_generate(model, tok, inputs, generation):
    decode_only(model, tok, inputs, generation)
    raise ValueError("post-processing failed after generate returned")


def two_calls(model, tok, inputs, generation, second="count down from 5 :"):
    first = decode_only(model, tok, inputs, generation)
    return {"first": first, "second": decode_only(model, tok, {"prompt": second}, {"max_new_tokens": 3})}


def passed_config(model, tok, inputs, generation):
    """A caller's own GenerationConfig: unset fields are still filled from the checkpoint."""
    enc = _encode(tok, inputs)
    out = model.generate(**enc, generation_config=GenerationConfig(**generation))
    return out[0].tolist()


def in_a_thread(model, tok, inputs, generation):
    """The TextIteratorStreamer pattern: generate runs in a worker thread."""
    import threading
    box = {}
    worker = threading.Thread(target=lambda: box.update(text=decode_only(model, tok, inputs, generation)))
    worker.start()
    worker.join()
    return box["text"]


class RemoteStyleLM(LlamaForCausalLM):
    """Like a trust_remote_code model: overrides generate and calls super().generate()."""

    calls = 0

    def generate(self, *args, **kwargs):
        type(self).calls += 1
        return super().generate(*args, **kwargs)


def load_remote_style(path, dtype, device, **kwargs):
    model = RemoteStyleLM.from_pretrained(path).to(device).eval()
    return model, AutoTokenizer.from_pretrained(path)
'''


def write_entry_module(directory: Path, name: str) -> str:
    """Write the test entry points as `<directory>/<name>.py`; returns the module name (unique per test avoids sys.modules reuse)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.py").write_text(ENTRY_SOURCE)
    return name


MODEL_BUILDS: dict[str, Callable[["FixtureModels"], Path]] = {
    "random-no-eos": lambda m: random_lm(m.dir("random-no-eos")),
    "tiny-pad-unset": lambda m: tiny_lm_variant(m.dir("tiny-pad-unset"), {"bos_token_id": 1, "eos_token_id": EOS}, {"pad_token_id": None}),
    "tiny-no-eos": lambda m: tiny_lm_variant(m.dir("tiny-no-eos"), {"bos_token_id": 1, "pad_token_id": PAD}, {"eos_token_id": None}),
    "tiny-max-length-12": lambda m: tiny_lm_variant(
        m.dir("tiny-max-length-12"), {"bos_token_id": 1, "eos_token_id": EOS, "pad_token_id": PAD, "max_length": 12}),
    "tiny-sampling": lambda m: tiny_lm_variant(m.dir("tiny-sampling"), {
        "bos_token_id": 1, "eos_token_id": EOS, "pad_token_id": PAD, "do_sample": True, "temperature": 0.6, "top_k": 5, "top_p": 0.9}),
    "bpe-tokenizer": lambda m: bpe_tokenizer_dir(m.dir("bpe-tokenizer")),
    "bpe-no-eos": lambda m: random_bpe_lm(m.dir("bpe-no-eos"), m.get("bpe-tokenizer"), {"bos_token_id": 2, "pad_token_id": 1}),
    "bpe-pad-unset": lambda m: random_bpe_lm(m.dir("bpe-pad-unset"), m.get("bpe-tokenizer"), {"bos_token_id": 2, "eos_token_id": 0}),
}
"""Every locally built fixture model, by name: one definition each, built on first use, once per session."""


class FixtureModels:
    """The session's fixture models (conftest's `fixture_models`): `get(name)` builds `MODEL_BUILDS[name]` once."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def dir(self, name: str) -> Path:
        """Where model `name` is built."""
        return self.root / name

    def get(self, name: str) -> Path:
        """The built model directory (builds are cached by path, so a second call only checks it exists)."""
        return MODEL_BUILDS[name](self)


def assert_counts_agree(snapshot: Path) -> None:
    """ids tensor lengths == summary counts == stop `generated`; final progress == furthest row; result == sum."""
    ids = read_ids(snapshot)
    summary = read_json(snapshot, "generated-token-ids.json")["sequences"]
    stops = read_json(snapshot, "generation-stop.json")["sequences"]
    result = read_json(snapshot, "result.json")
    counts = [len(ids[f"sequence_{s['index']}"]) for s in summary]
    assert counts == [s["count"] for s in summary] == [s["generated"] for s in stops]
    assert result["generated_tokens"] == sum(counts)
    final = read_progress(snapshot)[-1]
    assert final["event"] in ("end", "exception", "interrupted")
    per_call: dict[int, int] = {}
    for s in stops:
        per_call[s["call_index"]] = max(per_call.get(s["call_index"], 0), s["generated"])
    assert final["generated"] == sum(per_call.values())
