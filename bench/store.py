"""A store that holds a team's year: `genrun ls`, the store index and the store page at 1,000 / 10,000 / 100,000 snapshots.

Each store is made by hard-linking a few *real* sealed snapshots under new ids (`<time>-<name>-<hex>`, one second
apart): a real `genrun run` of the tiny model (eos) and a `max_new_tokens` stop, and a real 20-item sweep of the tiny
model (its items too), made once (or any store of real sealed snapshots with a sweep: `--seeds`). Sealed files are read-only, so links
are safe, and a 100,000-snapshot store takes minutes, not the days 100,000 runs would. The copies share their seeds' inodes
and page cache: every side reads warmer files than in a real store of that size (the same for the pre-index `ls`).

Measured, each in a fresh process (`python -m genrun.runner.cli ...`, output to /dev/null), in one run, as wall seconds
and as CPU seconds (user + system of the process: on a shared machine the wall figure grows with the load, the CPU figure
much less, so ratios are given for both):

- today: `ls --json` of the pre-index genrun, whole (`git archive` of `--before`, the last commit without the index,
  laid out as the installed package and put first on PYTHONPATH): what a user had before;
- no index: `ls --no-index --json` (this genrun reading every snapshot from its files), at every size: it also reads
  every file once before the cold build, as `today` does where it runs;
- cold: `ls --json` with no index (reads every snapshot, in a process per core from 1,000 of them, and builds the index);
  best of as many runs as `today` had (each after deleting the index); its CPU figure counts the workers too;
- warm: `ls --limit 0` (every row, as piped) and `ls --json` with the index built; `ls --limit 200`, what `genrun ls`
  shows on a terminal (the newest 200: only they are checked against their seals, the others placed by the index);
- filtered: `ls --state succeeded --stop-reason max_new_tokens --unsigned` (warm), every row it keeps (piped) and the
  newest 200 of them (a terminal's), and `ls --stop-reason eos --limit 200`;
- page: `report --store DIR --html FILE` (warm; the index pages, without review pages);
- startup: `ls` of an empty store, for each genrun: the floor under its figures (imports, parser), taken off before
  the per-snapshot figures are divided;
- `verify SWEEP` of a 1,000-item sweep (every item hashed and checked; a process per core): the items are copies of a
  real sweep's items (`make_big_sweep`), since 1,000 real runs take half an hour on two cores.

Every process may write its bytecode cache (an installed genrun has one; PYTHONDONTWRITEBYTECODE is dropped for the
children), and one `--version` of each genrun runs first to write it.

Usage: python bench/store.py [--sizes 1000 10000 100000] [--sweep-items 1000] [--repeat 3] [--work DIR] [--seeds STORE] [--reuse]
Goals: warm ls of 100,000 < 1 s and <= 2x its 1,000 figure; cold >= 5x faster per snapshot than today; page < 5 s at 100,000.
"""

import argparse
import json
import os
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import NamedTuple

from genrun.runner.cli.ls import TERMINAL_ROWS  # what `genrun ls` shows on a terminal: `--limit` that many takes its path piped

REPO = Path(__file__).resolve().parent.parent
GENRUN = [sys.executable, "-m", "genrun.runner.cli"]
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Timed(NamedTuple):
    wall: float
    cpu: float
    """User + system seconds of the process (and of any it waited for)."""


CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> Timed:
    """Wall and CPU seconds of one process (stdout discarded); raises when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env or CHILD_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, command))} failed ({done.returncode}): {done.stderr[-2000:]}")
    return Timed(wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def genrun(*args: str | Path, cwd: Path | None = None) -> Timed:
    return timed([*GENRUN, *map(str, args)], cwd=cwd)


def fastest(runs: list[Timed]) -> Timed:
    """The least wall and the least CPU seconds of `runs` (each may come from a different run)."""
    return Timed(min(r.wall for r in runs), min(r.cpu for r in runs))


def best(repeat: int, *args: str | Path) -> Timed:
    return fastest([genrun(*args) for _ in range(repeat)])


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
    """A sweep of `items` items in `target`: item k is a copy of the real sweep's item k mod n under a new id (a real copy:
    verify fails a snapshot whose files are hard-linked to names outside it, and a failing verify is not the one timed); the
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
        shutil.copytree(source / planned["snapshot_id"], target / new_id)  # copy2: same bytes, modes and times
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


def before_tree(work: Path, commit: str) -> dict[str, str]:
    """The genrun of `commit`, laid out as installed (genrun/ with runner, analysis, schemas inside, as pyproject's
    package-dir maps them); returns the environment that runs it instead of this one."""
    root = work / f"before-{commit}"
    package = root / "genrun"
    if not package.is_dir():
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "genrun", "runner", "analysis", "schemas"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
        for sub in ("runner", "analysis", "schemas"):
            (root / sub).rename(package / sub)
    env = {**CHILD_ENV, "PYTHONPATH": str(root)}  # run from `work` (the current directory comes first on sys.path)
    where = subprocess.run([sys.executable, "-c", "import genrun.runner.cli.ls as m; print(m.__file__)"], env=env, cwd=work,
                           capture_output=True, text=True, check=True).stdout.strip()
    if not where.startswith(str(root)):
        raise SystemExit(f"the pre-index genrun is not the one imported (got {where})")
    return env


def measure(store: Path, repeat: int, work: Path, before: dict[str, str], today_up_to: int) -> dict[str, Timed]:
    size = sum(1 for p in store.iterdir() if not p.name.startswith("."))
    once = 1 if size > 10_000 else repeat
    nothing = Timed(float("nan"), float("nan"))
    figures = {"today": nothing}
    if size <= today_up_to:
        runs = [timed([*GENRUN, "ls", "--store", str(store), "--json"], env=before, cwd=work) for _ in range(once)]
        figures["today"] = fastest(runs)
    # also where `today` is not run: every snapshot's files read once before the cold build, at every size alike (else
    # the first build of 100,000 reads what the machine has dropped from its page cache since the store was made)
    figures["no_index"] = best(once, "ls", "--store", store, "--no-index", "--json")
    colds = []
    for _ in range(once):  # best of as many as `today` had: each with no index
        shutil.rmtree(store / ".genrun-index", ignore_errors=True)
        colds.append(genrun("ls", "--store", store, "--json"))
    figures["cold"] = fastest(colds)
    figures["warm"] = best(repeat, "ls", "--store", store, "--limit", "0")
    figures["window"] = best(repeat, "ls", "--store", store, "--limit", str(TERMINAL_ROWS))
    figures["warm_json"] = best(repeat, "ls", "--store", store, "--json")
    filters = ("--state", "succeeded", "--stop-reason", "max_new_tokens", "--unsigned")
    figures["filtered"] = best(repeat, "ls", "--store", store, *filters)
    figures["filtered_window"] = best(repeat, "ls", "--store", store, *filters, "--limit", str(TERMINAL_ROWS))
    figures["reason_window"] = best(repeat, "ls", "--store", store, "--stop-reason", "eos", "--limit", str(TERMINAL_ROWS))
    site = work / f"site-{size}"
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir()
    figures["page"] = best(repeat, "report", "--store", store, "--html", site / "index.html")
    pages = list(site.glob("index*.html"))
    kb = sum(p.stat().st_size for p in pages) / len(pages) / 1024
    figures["page_kb"] = Timed(kb, kb)
    return figures


LABELS = (("today", "ls --json before the index"), ("no_index", "ls --json --no-index"), ("cold", "ls --json, cold (builds index)"),
          ("warm", "ls --limit 0, warm"), ("window", f"ls --limit {TERMINAL_ROWS} (a terminal's), warm"), ("warm_json", "ls --json, warm"), ("filtered", "ls filtered, warm"),
          ("filtered_window", f"ls filtered --limit {TERMINAL_ROWS}, warm"), ("reason_window", f"ls --stop-reason eos --limit {TERMINAL_ROWS}, warm"),
          ("page", "store page (index pages)"))


def report(rows: dict[int, dict[str, Timed]], startup: dict[str, Timed], field: str, sizes: list[int]) -> None:
    """One table of `field` (wall or cpu) and the goals' ratios measured from it."""
    pick = lambda t: getattr(t, field)  # noqa: E731
    print(f"\n{field} seconds{'':24}" + "".join(f"{s:>12,}" for s in sizes))
    for key, label in LABELS:
        print(f"{label:36}" + "".join(f"{pick(rows[s][key]):>12.2f}" for s in sizes))
    # per snapshot, less the process start-up every figure pays
    per = {s: ((pick(rows[s]["today"]) - pick(startup["today"])) / s, (pick(rows[s]["cold"]) - pick(startup["now"])) / s) for s in sizes}
    print(f"{'ms per snapshot, today (- startup)':36}" + "".join(f"{1000 * t:>12.3f}" for t, _ in per.values()))
    print(f"{'ms per snapshot, cold (- startup)':36}" + "".join(f"{1000 * c:>12.3f}" for _, c in per.values()))
    print(f"{'cold vs today, per snapshot':36}" + "".join(f"{t / c:>11.1f}x" for t, c in per.values()))
    big, small = max(sizes), min(sizes)
    ratios = [t / c for t, c in per.values() if t == t]
    for key in ("warm", "window"):
        print(f"goal ({field}), {dict(LABELS)[key]}: {big:,} = {pick(rows[big][key]):.2f} s (< 1 s), "
              f"{pick(rows[big][key]) / pick(rows[small][key]):.1f}x its {small:,} figure (<= 2x)")
    print(f"goals ({field}): cold {min(ratios, default=float('nan')):.1f}x faster per snapshot than today (>= 5x); "
          f"page {pick(rows[big]['page']):.2f} s (< 5 s); startup {pick(startup['now']):.2f} s (before the index: {pick(startup['today']):.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--sweep-items", type=int, default=1_000, help="items of the sweep that is verified")
    parser.add_argument("--before", default="acaead3", help="the commit whose `ls` is 'today' (the last one without the index)")
    parser.add_argument("--today-up-to", type=int, default=10**9, help="skip the pre-index figures above this size (linear in size)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N for the warm figures")
    parser.add_argument("--work", type=Path, help="keep the seeds and stores here (default: a temporary directory)")
    parser.add_argument("--seeds", type=Path, help="a store of real sealed snapshots with one sweep to copy (default: made here)")
    parser.add_argument("--reuse", action="store_true", help="keep each store in --work and use one already there (a 100,000 store takes minutes to make)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="genrun-bench-store-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.seeds:
        seeds, sweep = args.seeds, next(p for p in args.seeds.iterdir() if (p / "sweep-plan.json").is_file())
    else:
        seeds, sweep = make_seeds(work, 20)
    before = before_tree(work, args.before)
    timed([*GENRUN, "--version"], env=before, cwd=work)  # write each genrun's bytecode cache before anything is timed
    genrun("--version")
    loads = [os.getloadavg()]
    empty = work / "empty-store"
    empty.mkdir(exist_ok=True)
    runs = [timed([*GENRUN, "ls", "--store", str(empty), "--json"], env=before, cwd=work) for _ in range(args.repeat)]
    startup = {"today": fastest(runs), "now": best(args.repeat, "ls", "--store", empty, "--json")}
    rows = {}
    for size in args.sizes:
        store = work / f"store-{size}"
        t = time.perf_counter()
        if not (args.reuse and store.is_dir()):
            shutil.rmtree(store, ignore_errors=True)
            make_store(seeds, size, store)
        made = time.perf_counter() - t
        loads.append(os.getloadavg())
        rows[size] = measure(store, args.repeat, work, before, args.today_up_to)
        loads.append(os.getloadavg())
        print(f"{size:,} snapshots: store made in {made:.1f} s; {rows[size]}", file=sys.stderr)
        if not args.reuse:
            shutil.rmtree(store)
    shutil.rmtree(work / "sweep-store", ignore_errors=True)
    big_sweep = make_big_sweep(sweep, args.sweep_items, work / "sweep-store")
    verify = genrun("verify", big_sweep)
    loads.append(os.getloadavg())
    print(f"load averages (1, 5, 15 min) before and after each size: {[tuple(round(x, 1) for x in load) for load in loads]} on {os.cpu_count()} CPUs")
    print(f"best of {args.repeat} for warm figures; startup (`ls` of an empty store): {startup['now'].wall:.2f} s wall, {startup['now'].cpu:.2f} s CPU "
          f"(before the index: {startup['today'].wall:.2f} s, {startup['today'].cpu:.2f} s)")
    for field in ("wall", "cpu"):
        report(rows, startup, field, args.sizes)
    print(f"\nstore page, kB per page file: " + ", ".join(f"{rows[s]['page_kb'].wall:.0f} at {s:,}" for s in args.sizes))
    print(f"verify of the {args.sweep_items}-item sweep: {verify.wall:.1f} s wall, {verify.cpu:.1f} s CPU (all processes)")

if __name__ == "__main__":
    main()
