"""A hand-written greedy loop for the tiny language model on an engine genrun does not run: ONNX Runtime or MNN.

numpy in, numpy out, no torch: the tokenizer is the checkpoint's `tokenizer.json` (the `tokenizers`
library), the model an onnxruntime session (`model.onnx`) or an MNN module (`model.mnn`), and each step
takes the argmax of the last position's logits. There is no KV cache, so a step re-runs the whole
sequence (fine for this model). genrun calls `generate` with its recorder `rec` (`[loop] callable =
"lm_loop:generate"`, `[loop] kwargs = { engine = "onnxruntime" }`).
"""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort  # here, not in open_engine: a machine without it is told at plan time, with the pip line
from tokenizers import Tokenizer

NextLogits = Callable[[list[int]], np.ndarray]
"""ids of one row -> logits of its last position, [vocab]."""


def open_engine(engine: str, model_dir: Path) -> NextLogits:
    """The model file of `model_dir` on `engine`, one CPU thread (deterministic and polite on a shared machine)."""
    if engine == "onnxruntime":
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(model_dir / "model.onnx"), options, providers=["CPUExecutionProvider"])
        return lambda ids: session.run(["logits"], {"input_ids": np.asarray([ids], dtype=np.int64)})[0][0, -1]
    if engine == "mnn":  # imported only when chosen: importing MNN prints a line to stdout, which a plan must not
        import MNN.expr as F
        import MNN.nn as nn

        module = nn.load_module_from_file(str(model_dir / "model.mnn"), ["input_ids"], ["logits"], shape_mutable=True,
                                          precision_mode=F.PrecisionMode.High, thread_num=1)
        return lambda ids: np.asarray(module.forward(F.const(ids, [1, len(ids)], F.NCHW, F.int)).read()).reshape(len(ids), -1)[-1]
    raise ValueError(f"engine {engine!r}: use 'onnxruntime' or 'mnn'")


def greedy(next_logits: NextLogits, prompt_ids: list[int], eos: int, max_new_tokens: int,
           on_token: Callable[[np.int64], None] = lambda _id: None) -> list[int]:
    """Greedy ids after `prompt_ids`, EOS included when reached; `on_token` sees each id as it is chosen."""
    ids, new = list(prompt_ids), []
    for _ in range(max_new_tokens):
        token = np.argmax(next_logits(ids))
        on_token(token)
        ids.append(int(token))
        new.append(int(token))
        if token == eos:
            break
    return new


def generate(model_dir: Path, inputs: dict[str, Any], generation: dict[str, Any], rec: Any, engine: str = "onnxruntime") -> None:
    """Every prompt of `[input]`, greedy, up to `[generation] max_new_tokens` (default 64) or EOS, recorded by `rec`."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    eos = json.loads((model_dir / "generation_config.json").read_text())["eos_token_id"]
    max_new_tokens = int(generation.get("max_new_tokens", 64))
    next_logits = open_engine(engine, model_dir)
    prompts = inputs["prompts"]
    rec.config({"engine": engine, "decoding": "greedy", "max_new_tokens": max_new_tokens, "eos_token_ids": [eos]})
    with rec.stage("lm", unit="token", rows=len(prompts)) as lm:
        for row, prompt in enumerate(prompts):
            new = greedy(next_logits, tokenizer.encode(prompt).ids, eos, max_new_tokens, on_token=lambda t, row=row: lm.emit(row, [t]))
            if new and new[-1] == eos:
                lm.stop(row, "eos", eos_token_id=eos)
            else:
                lm.stop(row, "max_new_tokens", limit=max_new_tokens)
            (rec.outputs_dir / f"sequence_{row}.txt").write_text(tokenizer.decode(new))
