"""A vLLM sweep on one engine vs bare `LLM.generate` over the same batch, and vs a transformers sweep, in one run.

Same prompts (`Count: <i>`: tiny-vllm-lm's digits never reach EOS, so every row makes exactly `--tokens` ids), greedy,
on examples/models/tiny-vllm-lm, both sides at vLLM's default (an engine-core process per engine, as `genrun sweep` and
`LLM(...)` run for users), measured in this order in one run:

- bare: `LLM.generate(prompts, SamplingParams(temperature=0, max_tokens=N))` in this process, timed around the call
  (engine started before; its start is printed apart);
- `genrun sweep` of the `--items` prompts, backend "vllm", one local worker (one engine, every item in flight at once),
  `--rounds` times, each between two bare runs (the machine is shared: each sweep is compared with the mean of the
  bare runs on either side of it; the median over rounds is the figure);
- `genrun sweep` of the first `--tf-items` prompts, backend "transformers", one local worker (one item at a time).

A sweep's window runs from the first item's generation start (`progress.ndjson` start event, written after the
engine was loaded) to the last item's seal (`manifest-sha256.txt` written): every item's plan check, evidence,
hashes and seal that did not overlap generation is inside it. Tokens/s = ids generated (every item's `result.json`)
over the window. Evidence cost per item = (vLLM sweep window - bare generate) / items, in ms. Planning is printed apart.

`--model DIR`: another checkpoint of the same construction (`examples/models/make_tiny_vllm_lm.py --layers 16
--intermediate 2048 --out DIR`: a model whose step costs what a small real model's does on this CPU). The evidence per
item is about fixed, so the ratio tells how it compares with an item's share of generation: on the bundled model a whole
item's 256 tokens take ~25 ms of the batch, about what its evidence takes.

Where an item's time goes (CPU per item on the items' threads and in the worker's group commit, a profile):
`bench/vllm_sweep_profile.py`, which runs the same worker code in its own process.

Usage (the vLLM environment): python bench/vllm_sweep.py [--items 64] [--tokens 256] [--tf-items 8] [--model DIR]
Goal: the vLLM sweep at >= 0.90 of bare `LLM.generate`'s tokens/s.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

# vLLM's default, as a user's `genrun sweep` and `LLM(...)` get it (genrun never sets it): the engine core in a process
# of its own, on both sides. (With it off, the engine's steps share the sweep worker's interpreter lock with every
# item's evidence: a configuration users do not run by default, and which measured that contention, not genrun.)
os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# One OpenMP thread for every side (the sweep's worker follows it too: `threads_per_worker`). Measured on the shared
# 2-core machine at load ~18: with vLLM CPU's two bound OpenMP threads, `LLM.generate` on the main thread took 1.9-4.2 s
# for 4 rows x 16 tokens, the same call on another thread 0.04-0.05 s, and with one thread 0.03-0.05 s on either:
# a comparison at two threads would measure that contention, not genrun.
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parent.parent
BUNDLED_MODEL = REPO / "examples" / "models" / "tiny-vllm-lm"
GOAL = 0.90


def prompts(count: int) -> list[str]:
    return [f"Count: {i}" for i in range(count)]


def bare_generate(llm, texts: list[str], tokens: int) -> tuple[int, float]:  # noqa: ANN001 (vllm.LLM)
    """(ids generated, seconds) of one `LLM.generate` over the batch."""
    from vllm import SamplingParams

    started = time.monotonic()
    outs = llm.generate(texts, SamplingParams(temperature=0, max_tokens=tokens), use_tqdm=False)
    seconds = time.monotonic() - started
    return sum(len(o.outputs[0].token_ids) for o in outs), seconds


def timed_bare(llm, texts: list[str], tokens: int) -> dict:  # noqa: ANN001 (vllm.LLM)
    load = os.getloadavg()[0]
    ids, seconds = bare_generate(llm, texts, tokens)
    return {"generated": ids, "seconds": seconds, "tokens_per_s": ids / seconds, "load": [load, os.getloadavg()[0]]}


def write_sweep(directory: Path, backend: str, texts: list[str], tokens: int, model: Path = BUNDLED_MODEL) -> Path:
    generation = (f"max_tokens = {tokens}\ntemperature = 0\n" if backend == "vllm"
                  else f"max_new_tokens = {tokens}\nmin_new_tokens = {tokens}\ndo_sample = false\n")
    engine = "\n[engine]\nenforce_eager = true\n" if backend == "vllm" else ""
    directory.mkdir(parents=True)
    (directory / "base.toml").write_text(
        f'name = "bench-{backend}"\nseed = 0\n\n[model]\npath = {json.dumps(str(model))}\nbackend = "{backend}"\n'
        f'dtype = "float32"\ndevice = "cpu"\n\n[input]\nprompt = "placeholder"\n\n[generation]\n{generation}{engine}')
    (directory / "items.jsonl").write_text("".join(json.dumps({"input.prompt": t}) + "\n" for t in texts))
    sweep = directory / "sweep.toml"
    sweep.write_text(f'[sweep]\nname = "bench-{backend}"\nrequest = "base.toml"\n\n[sweep.dataset]\npath = "items.jsonl"\n\n'
                     '[sweep.executor]\nkind = "local"\nworkers = 1\n')
    return sweep


def run_sweep(sweep_file: Path, store: Path) -> dict:
    """Plan and execute; the window, ids and statuses from the items' own evidence."""
    from genrun.runner.sweep.driver import execute_sweep
    from genrun.runner.sweep.executors import make_pool
    from genrun.runner.sweep.store import plan_sweep

    started = time.monotonic()
    sweep_dir = plan_sweep(sweep_file, store)
    plan_s = time.monotonic() - started
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    run = execute_sweep(sweep_dir, make_pool)
    execute_s = time.monotonic() - started
    unfinished = [f"{o.snapshot_id}: {o.status} ({o.message})" for o in run.result.items if o.status != "succeeded"]
    if unfinished:
        sys.exit(f"{len(unfinished)} item(s) did not succeed; the first: {unfinished[0]}")
    items = [store / item.snapshot_id for item in run.result.items]
    starts, seals, generated, before_generate = [], [], 0, []
    for item in items:
        first = json.loads((item / "progress.ndjson").read_text().splitlines()[0])
        starts.append(datetime.fromisoformat(first["wall_time"]).timestamp())
        before_generate.append(first["t"])  # seconds from the item's execute start to its generation start
        seals.append((item / "manifest-sha256.txt").stat().st_mtime)
        generated += json.loads((item / "result.json").read_text())["generated"]
    window = max(seals) - min(starts)
    return {"statuses": sorted({o.status for o in run.result.items}), "items": len(items), "generated": generated, "plan_s": plan_s,
            "execute_s": execute_s, "window_s": window, "tokens_per_s": generated / window,
            "item_before_generate_s_median": statistics.median(before_generate), "load": [load_before, os.getloadavg()[0]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3, help="vLLM sweeps, each between two bare runs")
    parser.add_argument("--tf-items", type=int, default=8, help="items of the transformers sweep (0: skip it)")
    parser.add_argument("--model", type=Path, default=BUNDLED_MODEL, help="checkpoint (default: the bundled tiny-vllm-lm)")
    args = parser.parse_args()
    texts = prompts(args.items)
    from vllm import LLM

    started = time.monotonic()
    llm = LLM(model=str(args.model), dtype="float32", seed=0, enforce_eager=True)  # the arguments genrun's plan passes
    print(f"bare engine start: {time.monotonic() - started:.1f} s", file=sys.stderr)
    bare_generate(llm, texts[:2], 4)  # warm-up
    report: dict = {"model": str(args.model), "cpus": os.cpu_count(), "items": args.items, "tokens": args.tokens, "rounds": []}
    with tempfile.TemporaryDirectory(prefix="genrun-bench-vllm-") as tmp:
        before = timed_bare(llm, texts, args.tokens)
        for index in range(args.rounds):  # bare, sweep, bare, sweep, bare ...: each sweep against the bare runs around it
            sweep = run_sweep(write_sweep(Path(tmp) / f"vllm-{index}", "vllm", texts, args.tokens, args.model), Path(tmp) / "store")
            after = timed_bare(llm, texts, args.tokens)
            bare_s = (before["seconds"] + after["seconds"]) / 2
            report["rounds"].append({"bare_before": before, "vllm_sweep": sweep, "bare_after": after,
                                     "ratio_vllm_sweep_to_bare": sweep["tokens_per_s"] / (sweep["generated"] / bare_s),
                                     "evidence_ms_per_item": 1000 * (sweep["window_s"] - bare_s) / args.items})
            before = after
        if args.tf_items:
            report["transformers_sweep"] = run_sweep(write_sweep(Path(tmp) / "tf", "transformers", texts[: args.tf_items], args.tokens, args.model),
                                                     Path(tmp) / "store")
    ratios = [r["ratio_vllm_sweep_to_bare"] for r in report["rounds"]]
    report["ratio_vllm_sweep_to_bare_median"] = statistics.median(ratios)
    report["evidence_ms_per_item_median"] = statistics.median(r["evidence_ms_per_item"] for r in report["rounds"])
    if "transformers_sweep" in report:
        vllm_rate = statistics.median(r["vllm_sweep"]["tokens_per_s"] for r in report["rounds"])
        report["ratio_vllm_sweep_to_transformers_sweep"] = vllm_rate / report["transformers_sweep"]["tokens_per_s"]
    print(json.dumps(report, indent=2))
    print(f"vLLM sweep / bare LLM.generate: {[round(r, 3) for r in ratios]}, median {report['ratio_vllm_sweep_to_bare_median']:.3f} "
          f"(goal >= {GOAL}); evidence {report['evidence_ms_per_item_median']:.1f} ms per item (median)", file=sys.stderr)


if __name__ == "__main__":
    main()
