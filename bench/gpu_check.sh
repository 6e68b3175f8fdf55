#!/usr/bin/env bash
# bench/gpu_check.sh: genrun on a CUDA machine, in one go, with one table at the end.
#
# 1. Builds a randomly initialised ~1.07 B-parameter Llama locally (no hub: LlamaConfig hidden 2048, 16 layers, 16 heads
#    of 128, intermediate 8192, bfloat16, saved with save_pretrained) with the byte-level tokenizer of the bundled
#    examples/models/tiny-vllm-lm (vocabulary 257, EOS 256).
# 2. Runs it through `genrun run` on the transformers backend and on the vLLM backend (256 new tokens, greedy, EOS
#    ignored so every run makes all 256) and checks the CUDA memory fields of progress.ndjson (cuda_allocated_bytes,
#    cuda_reserved_bytes, cuda_peak_allocated_bytes).
# 3. Overhead: genrun's tokens/s (result.json units_per_s) over bare `model.generate` (transformers) and bare
#    `LLM.generate` (vLLM) on the same model, prompt and length, timed after a warm-up with the device synchronised.
# 4. Sweep: bench/vllm_sweep.py on the same model (64 items x 256 tokens, one round): the vLLM sweep over bare LLM.generate.
#
# Usage (an environment with genrun, CUDA torch, transformers and vLLM's CUDA build: pip install -e '.[vllm]'):
#     PYTHON=.venv-cuda/bin/python bash bench/gpu_check.sh [WORK_DIR]
# Exit status: 0 when every check passes, 1 when one fails, 2 without a CUDA device. On CPU, CI only parses it (bash -n).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python}"
WORK="${1:-$(mktemp -d -t genrun-gpu-check-XXXXXX)}"
MODEL="$WORK/llama-1b-random"
STORE="$WORK/store"
TOKENS=256
PROMPT="Count: 0"
mkdir -p "$WORK" "$STORE"

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu_check: no CUDA device visible to $PY (torch.cuda.is_available() is False); run it on a CUDA machine" >&2
    exit 2
fi

echo "== building the model in $MODEL" >&2
"$PY" - "$REPO" "$MODEL" <<'PY'
import shutil, sys
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

repo, out = Path(sys.argv[1]), Path(sys.argv[2])
if not (out / "config.json").is_file():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=257, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=16,
                         num_key_value_heads=16, max_position_embeddings=4096, bos_token_id=None, eos_token_id=256, pad_token_id=256,
                         tie_word_embeddings=False, torch_dtype="bfloat16")
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(repo / "examples" / "models" / "tiny-vllm-lm" / name, out / name)
    print(f"parameters: {sum(p.numel() for p in model.parameters()):,}", file=sys.stderr)
PY

write_request() {  # NAME BACKEND GENERATION [ENGINE]
    {
        printf 'name = "%s"\nseed = 0\n\n[model]\npath = "%s"\nbackend = "%s"\ndtype = "bfloat16"\ndevice = "cuda"\n\n' "$1" "$MODEL" "$2"
        printf '[input]\nprompt = "%s"\n\n[generation]\n%s\n\n[progress]\nevery_units = 32\n' "$PROMPT" "$3"
        if [ -n "${4:-}" ]; then printf '\n[engine]\n%s\n' "$4"; fi
    } > "$WORK/$1.toml"
}
write_request gpu-transformers transformers "max_new_tokens = $TOKENS
min_new_tokens = $TOKENS
do_sample = false"
write_request gpu-vllm vllm "max_tokens = $TOKENS
temperature = 0
ignore_eos = true" "gpu_memory_utilization = 0.5"

echo "== genrun run (transformers, vLLM)" >&2
"$PY" -m genrun run "$WORK/gpu-transformers.toml" --store "$STORE" --json > "$WORK/transformers.json"
"$PY" -m genrun run "$WORK/gpu-vllm.toml" --store "$STORE" --json > "$WORK/vllm.json"

echo "== bare transformers generate, bare LLM.generate" >&2
"$PY" - "$MODEL" "$PROMPT" "$TOKENS" > "$WORK/bare-transformers.json" <<'PY'
import json, sys, time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

model_dir, prompt, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
tokenizer = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to("cuda")
inputs = tokenizer([prompt], return_tensors="pt").to("cuda")
kwargs = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
model.generate(**inputs, **{**kwargs, "max_new_tokens": 8, "min_new_tokens": 8})  # warm-up
rates = []
for _ in range(3):
    torch.cuda.synchronize()
    started = time.perf_counter()
    out = model.generate(**inputs, **kwargs)
    torch.cuda.synchronize()
    rates.append((out.shape[1] - inputs["input_ids"].shape[1]) / (time.perf_counter() - started))
print(json.dumps({"tokens_per_s": sorted(rates)[1]}))
PY
"$PY" - "$MODEL" "$PROMPT" "$TOKENS" > "$WORK/bare-vllm.json" <<'PY'
import json, sys, time

if __name__ == "__main__":
    from vllm import LLM, SamplingParams

    model_dir, prompt, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
    llm = LLM(model=model_dir, dtype="bfloat16", seed=0, gpu_memory_utilization=0.5)
    params = SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True)
    llm.generate([prompt], SamplingParams(max_tokens=8, temperature=0), use_tqdm=False)  # warm-up
    rates = []
    for _ in range(3):
        started = time.perf_counter()
        (out,) = llm.generate([prompt], params, use_tqdm=False)
        rates.append(len(out.outputs[0].token_ids) / (time.perf_counter() - started))
    print(json.dumps({"tokens_per_s": sorted(rates)[1]}))
PY

echo "== vLLM sweep vs bare LLM.generate (bench/vllm_sweep.py)" >&2
"$PY" "$REPO/bench/vllm_sweep.py" --model "$MODEL" --items 64 --tokens "$TOKENS" --rounds 1 --tf-items 0 > "$WORK/vllm-sweep.json"

"$PY" - "$WORK" <<'PY'
import json, sys
from pathlib import Path

work = Path(sys.argv[1])
rows, failed = [], False


def check(name: str, value: str, goal: str, ok: bool | None) -> None:
    global failed
    failed |= ok is False
    rows.append((name, value, goal, {True: "PASS", False: "FAIL", None: "-"}[ok]))


for side in ("transformers", "vllm"):
    snapshot = Path(json.loads((work / f"{side}.json").read_text())["snapshot"])
    result = json.loads((snapshot / "result.json").read_text())
    check(f"{side}: run", f"{result['status']}, {result['generated']} tokens", "succeeded, 256", result["status"] == "succeeded" and result["generated"] == 256)
    records = [json.loads(line) for line in (snapshot / "progress.ndjson").read_text().splitlines() if line.strip()]
    for field in ("cuda_allocated_bytes", "cuda_reserved_bytes", "cuda_peak_allocated_bytes"):
        values = [r[field] for r in records if r.get(field) is not None]
        shown = f"{max(values) / 2**30:.2f} GiB max over {len(values)} records" if values else "absent"
        if side == "transformers":
            check(f"{side}: progress {field}", shown, "> 0", bool(values) and max(values) > 0)
        else:  # vLLM's weights and KV cache live in its engine-core process, not in the process genrun records
            check(f"{side}: progress {field}", shown, "shown only", None)
    bare = json.loads((work / f"bare-{side}.json").read_text())["tokens_per_s"]
    ratio = result["units_per_s"] / bare
    goal = 0.98 if side == "transformers" else 0.95
    check(f"{side}: genrun / bare tokens/s", f"{result['units_per_s']:.1f} / {bare:.1f} = {ratio:.3f}", f">= {goal}", ratio >= goal)
sweep = json.loads((work / "vllm-sweep.json").read_text())
check("vLLM sweep / bare LLM.generate", f"{sweep['ratio_vllm_sweep_to_bare_median']:.3f}", ">= 0.90", sweep["ratio_vllm_sweep_to_bare_median"] >= 0.90)
check("evidence per sweep item", f"{sweep['evidence_ms_per_item_median']:.1f} ms", "<= 3 ms", sweep["evidence_ms_per_item_median"] <= 3)

widths = [max(len(r[i]) for r in rows + [("check", "value", "goal", "verdict")]) for i in range(4)]
for row in [("check", "value", "goal", "verdict"), tuple("-" * w for w in widths), *rows]:
    print(" | ".join(cell.ljust(width) for cell, width in zip(row, widths)))
sys.exit(1 if failed else 0)
PY
