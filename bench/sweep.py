"""Sweep overhead: a bare Python loop vs `genrun sweep` (local worker; Ray actor), same 64 items.

64 items (a dataset of different prompts) on the random ~20M-parameter Llama (bench/_models.py),
128 new tokens each (`min_new_tokens = max_new_tokens = 128`, so every item makes 128), greedy,
batch 1. Measured in one run, each side in its own fresh process:

- bare: load the model once, call `generate` 64 times (the timed region starts after imports);
- `genrun sweep` with one local worker, then with two (2 cores: wall time vs one worker);
- `genrun sweep` on Ray with one actor (a local Ray instance started by the driver).

Sweep figures come from the sweep's own attempt log (`sweep-progress.ndjson`, driver clock):
start-up = time to the first item handed out (worker spawn, or `ray.init` + actor); execution =
first item started to last item ended (includes the worker's torch import and model load on its
first item, as the bare side's figure includes the model load). Per-item fixed cost = median
item duration (items 2..N, model already loaded) minus the median bare generate call, in ms.
Planning (validating and freezing 64 items) is printed separately.

Usage: python bench/sweep.py [--items 64] [--tokens 128] [--skip-ray]
Targets: local / bare <= 1.15; Ray / bare <= 1.30 excluding start-up.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench")]

TARGETS = {"local": 1.15, "ray": 1.30}

BARE = r'''
import json, sys, time
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
model_dir, prompts, tokens = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
t0 = time.monotonic()
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
tok = AutoTokenizer.from_pretrained(model_dir)
load = time.monotonic() - t0
calls = []
for prompt in prompts:
    torch.manual_seed(0)
    enc = tok(prompt, return_tensors="pt")
    t = time.monotonic()
    out = model.generate(**enc, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
    calls.append(time.monotonic() - t)
    assert out.shape[1] - enc["input_ids"].shape[1] == tokens
print(json.dumps({"load": load, "calls": calls}))
'''


class SweepTiming(NamedTuple):
    plan_s: float
    startup_s: float
    execution_s: float
    wall_s: float
    items: list[float]


def write_inputs(work: Path, model_dir: Path, prompts: list[str], tokens: int) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    (work / "base.toml").write_text(
        f'name = "bench"\nseed = 0\n[model]\npath = "{model_dir}"\ndtype = "float32"\ndevice = "cpu"\n'
        f'[input]\nprompt = "{prompts[0]}"\n[generation]\nmax_new_tokens = {tokens}\nmin_new_tokens = {tokens}\ndo_sample = false\n'
    )
    (work / "items.jsonl").write_text("".join(json.dumps({"input.prompt": p}) + "\n" for p in prompts))
    return work


def sweep_file(work: Path, kind: str, workers: int) -> Path:
    path = work / f"sweep-{kind}-{workers}.toml"
    path.write_text(f'[sweep]\nname = "bench-{kind}-{workers}"\nrequest = "base.toml"\n[sweep.dataset]\npath = "items.jsonl"\n'
                    f'[sweep.executor]\nkind = "{kind}"\nworkers = {workers}\n')
    return path


def run_sweep(path: Path, store: Path, env: dict[str, str]) -> SweepTiming:
    cli = [sys.executable, "-m", "genrun.runner.cli", "sweep"]
    t0 = time.monotonic()
    subprocess.run([*cli, "plan", str(path), "--store", str(store), "--json"], check=True, env=env, capture_output=True)
    plan_s = time.monotonic() - t0
    sweep_dir = next(p for p in store.iterdir() if (p / "sweep-plan.json").is_file())
    t1 = time.monotonic()
    done = subprocess.run([*cli, "execute", str(sweep_dir), "--json"], env=env, capture_output=True, text=True)
    wall = time.monotonic() - t1
    if done.returncode != 0:
        raise SystemExit(f"sweep {path.name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    records = [json.loads(line) for line in (sweep_dir / "sweep-progress.ndjson").read_text().splitlines()]
    started = {r["item"]: r["t"] for r in records if r["event"] == "started"}
    ended = {r["item"]: r["t"] for r in records if r["event"] == "ended"}
    items = [ended[i] - started[i] for i in sorted(started)]
    return SweepTiming(plan_s, min(started.values()), max(ended.values()) - min(started.values()), wall, items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--skip-ray", action="store_true")
    args = parser.parse_args()
    from _models import DEFAULT_OUT, build_random_lm

    model_dir = build_random_lm(DEFAULT_OUT)
    prompts = [f"count down from {n % 63 + 1} :" for n in range(args.items)]
    prompts = [p if i < 63 else f"{p} {i}" for i, p in enumerate(prompts)]  # different prompts even past 63 items
    with tempfile.TemporaryDirectory(prefix="genrun-bench-sweep-") as tmp:
        work = write_inputs(Path(tmp), model_dir, prompts, args.tokens)
        env = {**os.environ, "GENRUN_CACHE_DIR": str(work / "cache"), "HF_HUB_OFFLINE": "1",
               "RAY_TMPDIR": str(work / "ray"), "HOME": str(work / "home")}
        (work / "home").mkdir()
        bare_out = subprocess.run([sys.executable, "-c", BARE, str(model_dir), json.dumps(prompts), str(args.tokens)],
                                  check=True, capture_output=True, text=True, env=env)
        bare = json.loads(bare_out.stdout.strip().splitlines()[-1])
        bare_total = bare["load"] + sum(bare["calls"])
        runs = {"local x1": run_sweep(sweep_file(work, "local", 1), work / "s1", env),
                "local x2": run_sweep(sweep_file(work, "local", 2), work / "s2", env)}
        if not args.skip_ray:
            runs["ray x1"] = run_sweep(sweep_file(work, "ray", 1), work / "s3", env)
    bare_item = statistics.median(bare["calls"][1:] or bare["calls"])  # the first call warms up; one item has only it
    print(f"{args.items} items x {args.tokens} new tokens, random Llama ({model_dir.name}), greedy, batch 1")
    print(f"bare loop: load {bare['load']:.2f} s + {len(bare['calls'])} generate calls {sum(bare['calls']):.2f} s = {bare_total:.2f} s "
          f"(median call {bare_item * 1000:.1f} ms)")
    print(f"{'run':10} {'plan s':>7} {'start-up s':>10} {'exec s':>8} {'ratio':>6} {'target':>7} {'fixed ms/item':>13} {'wall s':>7}")
    for name, t in runs.items():
        ratio = t.execution_s / bare_total
        target = TARGETS.get(name.split()[0]) if name.endswith("x1") else None
        fixed = (statistics.median(t.items[1:]) - bare_item) * 1000 if len(t.items) > 1 else float("nan")
        print(f"{name:10} {t.plan_s:7.2f} {t.startup_s:10.2f} {t.execution_s:8.2f} {ratio:6.3f} "
              f"{'<= ' + format(target, '.2f') if target else '':>7} {fixed:13.1f} {t.wall_s:7.2f}")
    one, two = runs["local x1"], runs["local x2"]
    print(f"two local workers vs one: execution {two.execution_s:.2f} s vs {one.execution_s:.2f} s "
          f"({one.execution_s / two.execution_s:.2f}x on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
