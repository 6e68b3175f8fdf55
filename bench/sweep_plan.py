"""Planning cost per sweep item: every check per item, with and without the sweep's shared facts.

`genrun sweep plan` checks each item as strictly as `genrun plan` (request, model path, entry
points, model identity, budget from the item's own prompt). Inside a sweep, the facts every item
shares (environment, genrun's code hash, the model's config/tokenizer/generation config) are
computed once (one `genrun.runner.plan_context.PlanContext` for all items). This measures both ways
side by side in one process, alternating rounds, after a warm-up that pays the one-time imports:
`per item` gives each item its own context (as a lone `genrun plan` has), `shared` is what `sweep plan` does.
Then one full `plan_sweep` (checks + freezing every item snapshot, fsynced) for the total.

Usage: python bench/sweep_plan.py [--items 64] [--rounds 2]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TINY_LM = REPO / "examples" / "models" / "tiny-lm"


def write_inputs(directory: Path, items: int) -> Path:
    """A tiny-lm base request, `items` different prompts, the sweep file; returns the sweep file."""
    (directory / "base.toml").write_text(
        f'name = "base"\nseed = 0\n[model]\npath = "{TINY_LM}"\ndtype = "float32"\ndevice = "cpu"\n'
        '[input]\nprompt = "count down from 5 :"\n[generation]\nmax_new_tokens = 32\ndo_sample = false\n'
    )
    (directory / "items.jsonl").write_text("".join(json.dumps({"input.prompt": f"count down from {i % 20 + 1} :"}) + "\n" for i in range(items)))
    sweep = directory / "sweep.toml"
    sweep.write_text('[sweep]\nname = "plan-bench"\nrequest = "base.toml"\n[sweep.dataset]\npath = "items.jsonl"\n')
    return sweep


def check_items(sweep_file: Path, shared: bool) -> float:
    """Seconds to check every item (nothing written)."""
    from genrun.runner.plan_context import PlanContext
    from genrun.runner.sweep.spec import expand_items, load_sweep
    from genrun.runner.sweep.store import prepare_item

    t0 = time.perf_counter()
    sweep = load_sweep(sweep_file)
    items = expand_items(sweep)
    shared_context = PlanContext()
    for item in items:
        prepare_item(sweep, item, False, shared_context if shared else PlanContext())
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    from genrun.runner.sweep.store import plan_sweep

    with tempfile.TemporaryDirectory(prefix="genrun-plan-bench-") as tmp:
        root = Path(tmp)
        warm = root / "warm"
        warm.mkdir()
        check_items(write_inputs(warm, 1), shared=False)  # imports torch/transformers, fills the weight hash cache
        sweep_file = write_inputs(root, args.items)
        seconds: dict[str, list[float]] = {"per item": [], "shared": []}
        for _ in range(args.rounds):
            for mode in ("per item", "shared"):
                seconds[mode].append(check_items(sweep_file, shared=mode == "shared"))
        t0 = time.perf_counter()
        plan_sweep(sweep_file, root / "store")
        full = time.perf_counter() - t0
    load = os.getloadavg()
    print(f"{args.items} items over tiny-lm, {args.rounds} alternating rounds; load average {load[0]:.1f} on {os.cpu_count()} CPUs")
    for mode, values in seconds.items():
        per_item = [1000 * s / args.items for s in values]
        print(f"  checks, {mode:8s}: {statistics.median(per_item):7.1f} ms/item  (rounds: {', '.join(f'{v:.1f}' for v in per_item)})")
    print(f"  full 'sweep plan' (checks shared + freezing {args.items} snapshots): {1000 * full / args.items:.1f} ms/item, {full:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
