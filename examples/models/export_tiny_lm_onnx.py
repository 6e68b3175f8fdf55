"""Export the bundled ``tiny-lm`` to ONNX (input_ids -> logits, full sequence, no KV cache) and check it.

The graph takes ``input_ids`` int64 [batch, sequence] and returns ``logits`` float32 [batch, sequence, vocab];
batch and sequence are dynamic.  No attention mask input: one unpadded row at a time, which is what a
hand-written greedy loop feeds it.  After exporting, the script runs the numpy/onnxruntime greedy loop of
``examples/lm_loop.py`` and transformers' greedy ``generate`` on the same prompts and exits non-zero unless the
ids are equal.  The tokenizer and generation config beside the ONNX file are copies of ``tiny-lm``'s.

Usage::

    python export_tiny_lm_onnx.py [--model DIR] [--out FILE.onnx]

Needs torch, transformers, onnx, onnxscript (torch's exporter) and onnxruntime.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = Path(__file__).resolve().parent
DEFAULT_MODEL = HERE / "tiny-lm"
DEFAULT_OUT = HERE / "tiny-lm-onnx" / "model.onnx"
OPSET = 18
CHECK_PROMPTS = ("count down from 3 :", "count down from 12 :", "count down from 40 :", "count down from 63 :")


class LogitsOnly(torch.nn.Module):
    """``input_ids -> logits`` with the cache off, so the exported graph has one input and one output."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False).logits


def export(model_dir: Path, out: Path) -> None:
    # Eager attention: the SDPA path exports an IsNaN guard that MNN's converter refuses ("Op Not Support: ONNX::IsNaN").
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager").eval()
    wrapper = LogitsOnly(model).eval()
    example = torch.tensor([[1, 4, 5, 6, 10, 7]])  # "<bos> count down from 3 :"
    out.parent.mkdir(parents=True, exist_ok=True)
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence", max=256)
    program = torch.onnx.export(wrapper, (example,), dynamo=True, opset_version=OPSET, input_names=["input_ids"],
                                output_names=["logits"], dynamic_shapes={"input_ids": {0: batch, 1: seq}}, external_data=False)
    program.save(str(out), external_data=False)
    strip_metadata(out)


def strip_metadata(path: Path) -> None:
    """Drop the exporter's per-node metadata (Python stack traces with this machine's absolute paths): it is over
    half the file and would make the bytes depend on where the export ran."""
    import onnx

    graph = onnx.load(str(path))
    for node in graph.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    onnx.save(graph, str(path))


@torch.no_grad()
def transformers_greedy(model_dir: Path, prompt: str, max_new_tokens: int) -> list[int]:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    return model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)[0, ids.shape[1]:].tolist()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    export(args.model, args.out)
    for name in ("tokenizer.json", "generation_config.json"):
        shutil.copyfile(args.model / name, args.out.parent / name)
    sys.path.insert(0, str(HERE.parent))
    from lm_loop import greedy, open_engine  # numpy + onnxruntime + tokenizers only
    from tokenizers import Tokenizer

    next_logits = open_engine("onnxruntime", args.out.parent)
    tokenizer = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    eos = json.loads((args.model / "generation_config.json").read_text())["eos_token_id"]
    results = []
    for prompt in CHECK_PROMPTS:
        ort_ids = greedy(next_logits, tokenizer.encode(prompt).ids, eos, max_new_tokens=64)
        hf_ids = transformers_greedy(args.model, prompt, 64)
        results.append({"prompt": prompt, "equal": ort_ids == hf_ids, "new_tokens": len(ort_ids)})
    print(json.dumps({"onnx": str(args.out), "bytes": args.out.stat().st_size, "checks": results}, indent=1))
    return 0 if all(r["equal"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
