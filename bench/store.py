"""A store that holds a team's year: `genrun ls`, the store index and the store page at 1,000 / 10,000 / 100,000 snapshots.

Each store is made by hard-linking a few *real* sealed snapshots under new ids (`<time>-<name>-<hex>`, one second
apart): a real `genrun run` of the tiny model (eos) and a `max_new_tokens` stop, and a real 20-item sweep of the tiny
model (its items too), made once (or any store of real sealed snapshots with a sweep: `--seeds`). Sealed files are read-only, so links
are safe and a 100,000-snapshot store takes seconds, not the hours 100,000 runs would.

Measured, each in a fresh process (`python -m genrun.runner.cli ...`, output to /dev/null), in one run:

- today: `ls --json` as it was before the index (`runner/cli/ls.py` at `--before`, run against this genrun), and
  `ls --no-index --json` (this genrun reading every snapshot from its files);
- cold: `ls --json` with no index (reads every snapshot and builds the index);
- warm: `ls` and `ls --json` with the index built;
- filtered: `ls --state succeeded --stop-reason max_new_tokens --unsigned` (warm);
- page: `report --store DIR --html FILE` (warm; the index pages, without review pages);
- startup: `genrun --version`, the floor under every figure;
- `verify SWEEP` of a 1,000-item sweep (every item hashed and checked; a process per core): the items are linked
  copies of a real sweep's items (`make_big_sweep`), since 1,000 real runs take half an hour on two cores.

Usage: python bench/store.py [--sizes 1000 10000 100000] [--sweep-items 1000] [--repeat 3] [--work DIR] [--seeds STORE]
Goals: warm ls of 100,000 < 1 s and <= 2x its 1,000 figure; cold >= 5x faster per snapshot than today; page < 5 s at 100,000.
"""

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GENRUN = [sys.executable, "-m", "genrun.runner.cli"]
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def genrun(*args: str | Path, cwd: Path | None = None) -> float:
    """Wall seconds of one `genrun` process (stdout discarded); raises when it fails."""
    t = time.perf_counter()
    done = subprocess.run([*GENRUN, *map(str, args)], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"genrun {' '.join(map(str, args))} failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed


def best(repeat: int, *args: str | Path) -> float:
    return min(genrun(*args) for _ in range(repeat))


def make_seeds(work: Path, sweep_items: int) -> tuple[Path, Path]:
    """Real runs and a real sweep of the bundled tiny model: (store of the seeds, the sweep snapshot)."""
    seeds = work / "seeds"
    if (seeds / "done").is_file():
        return seeds / "store", next(p for p in (seeds / "store").iterdir() if (p / "sweep-plan.json").is_file())
    shutil.rmtree(seeds, ignore_errors=True)
    seeds.mkdir(parents=True)
    shutil.copy(REPO / "examples" / "tiny.toml", seeds / "tiny.toml")
    shutil.copytree(REPO / "examples" / "models", seeds / "models")
    store = seeds / "store"
    genrun("run", "tiny.toml", "--store", store, cwd=seeds)
    (seeds / "cut.toml").write_text((seeds / "tiny.toml").read_text().replace('name = "tiny"', 'name = "tiny-cut"')
                                    .replace("max_new_tokens = 64", "max_new_tokens = 4"))
    genrun("run", "cut.toml", "--store", store, cwd=seeds)
    prompts = [json.dumps({"input.prompt": f"count down from {i % 20 + 1} :"}) for i in range(sweep_items // 2)]
    (seeds / "items.jsonl").write_text("\n".join(prompts) + "\n")
    (seeds / "sweep.toml").write_text('[sweep]\nname = "nightly"\nrequest = "tiny.toml"\n'
                                      '[sweep.grid]\n"generation.max_new_tokens" = [4, 16]\n'
                                      '[sweep.dataset]\npath = "items.jsonl"\n[sweep.executor]\nkind = "local"\nworkers = 2\n')
    t = time.perf_counter()
    genrun("sweep", "sweep.toml", "--store", store, cwd=seeds)
    print(f"seeds: 2 runs and a {sweep_items}-item sweep made in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    (seeds / "done").write_text("")
    return store, next(p for p in store.iterdir() if (p / "sweep-plan.json").is_file())


def link_tree(source: Path, target: Path) -> None:
    """A copy of a sealed snapshot whose files are hard links (same bytes, same read-only modes)."""
    for root, dirs, files in os.walk(source):
        here = target / Path(root).relative_to(source)
        here.mkdir(mode=0o755)
        for name in files:
            os.link(Path(root) / name, here / name)


def make_store(seeds: Path, size: int, target: Path) -> Path:
    """`size` snapshots: copies of the seed runs and sweep items (no sweep snapshot: its plan names its own items)."""
    runs = sorted(p for p in seeds.iterdir() if p.is_dir() and not p.name.startswith(".") and not (p / "sweep-plan.json").is_file())
    target.mkdir(parents=True)
    for i in range(size):
        seed = runs[i % len(runs)]
        name = seed.name[17:-7]
        when = (START + timedelta(seconds=i)).strftime("%Y%m%dT%H%M%SZ")
        link_tree(seed, target / f"{when}-{name}-{secrets.token_hex(3)}")
    return target


def make_big_sweep(sweep: Path, items: int, target: Path) -> Path:
    """A sweep of `items` items in `target`: item k is a linked copy of the real sweep's item k mod n under a new id; the
    sweep's plan and result list them (same changes and digests, the copies being byte-identical), then it is frozen and
    sealed again with genrun's own functions. The real sweep's progress log is kept as it was."""
    from genrun.runner.store import seal_snapshot, write_frozen_manifest

    plan = json.loads((sweep / "sweep-plan.json").read_text())
    result = json.loads((sweep / "sweep-result.json").read_text())
    source = Path(plan["store"])
    target.mkdir(parents=True, exist_ok=True)
    new_plan, new_result = [], []
    for k in range(items):
        planned, done = dict(plan["items"][k % len(plan["items"])]), dict(result["items"][k % len(result["items"])])
        new_id = f"{(START + timedelta(days=1, seconds=k)).strftime('%Y%m%dT%H%M%SZ')}-sweep-item-{secrets.token_hex(3)}"
        link_tree(source / planned["snapshot_id"], target / new_id)
        new_plan.append({**planned, "index": k, "snapshot_id": new_id})
        new_result.append({**done, "index": k, "snapshot_id": new_id, "attempts": [new_id]})
    copy = target / f"{START.strftime('%Y%m%dT%H%M%SZ')}-nightly-{secrets.token_hex(3)}"
    shutil.copytree(sweep, copy, ignore=shutil.ignore_patterns("manifest-sha256.txt", "frozen-sha256.txt", "signoffs"))
    for path in copy.iterdir():
        path.chmod(0o644)
    (copy / "sweep-plan.json").write_text(json.dumps({**plan, "store": str(target), "items": new_plan}))
    (copy / "sweep-result.json").write_text(json.dumps({**result, "counts": {"succeeded": items}, "items": new_result}))
    write_frozen_manifest(copy)
    seal_snapshot(copy)
    return copy


_BEFORE = """
import argparse, importlib.util, sys
spec = importlib.util.spec_from_file_location("genrun.runner.cli._ls_before", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
sys.exit(module.handle(argparse.Namespace(store=sys.argv[2], allowed_signers=None, json=True)))
"""


def _timed(command: list[str]) -> float:
    t = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{command} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - t


def measure(store: Path, repeat: int, work: Path, before: Path, today_up_to: int) -> dict[str, float]:
    size = sum(1 for p in store.iterdir() if not p.name.startswith("."))
    once = 1 if size > 10_000 else repeat
    figures = {"today": float("nan"), "no_index": float("nan")}
    if size <= today_up_to:
        figures = {"today": min(_timed([sys.executable, "-c", _BEFORE, str(before), str(store)]) for _ in range(once)),
                   "no_index": best(once, "ls", "--store", store, "--no-index", "--json")}
    shutil.rmtree(store / ".genrun-index", ignore_errors=True)
    figures["cold"] = genrun("ls", "--store", store, "--json")
    figures["warm"] = best(repeat, "ls", "--store", store)
    figures["warm_json"] = best(repeat, "ls", "--store", store, "--json")
    figures["filtered"] = best(repeat, "ls", "--store", store, "--state", "succeeded", "--stop-reason", "max_new_tokens", "--unsigned")
    site = work / f"site-{size}"
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir()
    figures["page"] = best(repeat, "report", "--store", store, "--html", site / "index.html")
    figures["page_kb"] = sum(p.stat().st_size for p in site.glob("index*.html")) / len(list(site.glob("index*.html"))) / 1024
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--sweep-items", type=int, default=1_000, help="items of the sweep that is verified")
    parser.add_argument("--before", default="acaead3", help="the commit whose `ls` is 'today' (the last one without the index)")
    parser.add_argument("--today-up-to", type=int, default=10**9, help="skip the pre-index figures above this size (linear in size)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N for the warm figures")
    parser.add_argument("--work", type=Path, help="keep the seeds and stores here (default: a temporary directory)")
    parser.add_argument("--seeds", type=Path, help="a store of real sealed snapshots with one sweep to copy (default: made here)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="genrun-bench-store-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.seeds:
        seeds, sweep = args.seeds, next(p for p in args.seeds.iterdir() if (p / "sweep-plan.json").is_file())
    else:
        seeds, sweep = make_seeds(work, 20)
    before = work / "ls_before.py"
    before.write_bytes(subprocess.run(["git", "-C", str(REPO), "show", f"{args.before}:runner/cli/ls.py"], check=True,
                                      capture_output=True).stdout)
    load = os.getloadavg()
    startup = best(args.repeat, "--version")
    rows = {}
    for size in args.sizes:
        store = work / f"store-{size}"
        shutil.rmtree(store, ignore_errors=True)
        t = time.perf_counter()
        make_store(seeds, size, store)
        made = time.perf_counter() - t
        rows[size] = measure(store, args.repeat, work, before, args.today_up_to)
        print(f"{size:,} snapshots: store made in {made:.1f} s; {rows[size]}", file=sys.stderr)
        shutil.rmtree(store)
    big_sweep = make_big_sweep(sweep, args.sweep_items, work / "sweep-store")
    verify_s = genrun("verify", big_sweep)
    print(f"load average before: {load}; after: {os.getloadavg()}")
    print(f"\ngenrun store figures (s, one process each, best of {args.repeat} for warm; startup `genrun --version` {startup:.2f} s)")
    head = f"{'':34}" + "".join(f"{s:>12,}" for s in args.sizes)
    print(head)
    for key, label in (("today", "ls --json before the index"), ("no_index", "ls --json --no-index"), ("cold", "ls --json, cold (builds index)"), ("warm", "ls, warm"),
                       ("warm_json", "ls --json, warm"), ("filtered", "ls filtered, warm"), ("page", "store page (index pages)"),
                       ("page_kb", "store page, kB per page file")):
        print(f"{label:34}" + "".join(f"{rows[s][key]:>12.2f}" for s in args.sizes))
    # per snapshot, less the process start-up every figure pays
    per = {s: ((rows[s]["today"] - startup) / s, (rows[s]["cold"] - startup) / s) for s in args.sizes}
    print(f"{'ms per snapshot, today (- startup)':34}" + "".join(f"{1000 * t:>12.3f}" for t, _ in per.values()))
    print(f"{'ms per snapshot, cold (- startup)':34}" + "".join(f"{1000 * c:>12.3f}" for _, c in per.values()))
    print(f"{'cold vs today, per snapshot':34}" + "".join(f"{t / c:>11.1f}x" for t, c in per.values()))
    print(f"verify of the {args.sweep_items}-item sweep: {verify_s:.1f} s")
    big, small = max(args.sizes), min(args.sizes)
    print(f"goals: warm ls {big:,} = {rows[big]['warm']:.2f} s (< 1 s); {rows[big]['warm'] / rows[small]['warm']:.1f}x its {small:,} "
          f"figure (<= 2x); cold {min((t / c for t, c in per.values() if t == t), default=float('nan')):.1f}x faster per snapshot than today (>= 5x); "
          f"page {rows[big]['page']:.2f} s (< 5 s)")


if __name__ == "__main__":
    main()
