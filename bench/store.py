"""A store that holds a team's year: `genrun ls` and the store page at 1,000 / 10,000 / 100,000 snapshots, this genrun
beside an earlier one (`--before`, 04185e5 by default: the last with the store index inside the store), in one run.

Each store is made by hard-linking a few *real* sealed snapshots under new ids (`<time>-<name>-<hex>`, one second
apart): a real `genrun run` of the tiny model (eos) and a `max_new_tokens` stop, and a real 20-item sweep of the tiny
model (its items too), made once (or any store of real sealed snapshots with a sweep: `--seeds`). Sealed files are
read-only, so links are safe, and a 100,000-snapshot store takes minutes, not the days 100,000 runs would. The copies
share their seeds' inodes and page cache: every side reads warmer files than in a real store of that size.

Measured for each genrun, each in a fresh process (`python -m genrun.runner.cli ...`, output to /dev/null), as wall
seconds and as CPU seconds (user + system of the process and its children: on a shared machine the wall figure grows
with the load, the CPU figure much less):

- cold: `ls --json` with no cache (every snapshot read from its files; the cache filled): best of as many runs as
  allowed (each after removing that genrun's cache: its private folder, and 04185e5's `<store>/.genrun-index`);
- warm: `ls --limit 0` (every row, as piped), `ls --json`, and `ls --limit 200` (what `genrun ls` shows on a terminal);
- sign-offs: `ls --signed-by alice@example.com` (every row's sign-offs looked at now; none signed) and
  `ls --unsigned --limit 200`;
- filtered: `ls --state succeeded --stop-reason max_new_tokens` (every row it keeps, piped);
- page: `report --store DIR --html FILE` (warm; the index pages, without review pages);
- startup: `ls` of an empty store: the floor under every figure (imports, parser), taken off the per-snapshot figures.

Every process may write its bytecode cache, and one `--version` of each genrun runs first to write it. Each genrun's
listing cache goes to a folder of the run's own (`GENRUN_CACHE_DIR`), never the user's.

Usage: python bench/store.py [--sizes 1000 10000 100000] [--repeat 3] [--work DIR] [--seeds STORE] [--reuse] [--sweep-items 0]
Goals: warm ls of 100,000 < 1 s (terminal and --json), the terminal's <= 2x its 1,000 figure; a sign-off filter of
100,000 < 2 s; the page < 5 s at 100,000; cold no slower per snapshot than --before.
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
from collections.abc import Callable
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
    from genrun.snapshot_dir import SnapshotDir

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
    write_frozen_manifest(SnapshotDir(copy, writable=True))
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
        raise SystemExit(f"the earlier genrun is not the one imported (got {where})")
    return env


class Side(NamedTuple):
    """One genrun measured: how to run it and how to drop its cache of a store."""

    name: str
    env: dict[str, str]
    forget: Callable[[Path], None]


def sides(work: Path, before: str) -> list[Side]:
    """Each genrun with a cache folder of its own (`GENRUN_CACHE_DIR`, never the user's), forgotten with whatever index
    it keeps in the store (04185e5's `.genrun-index`; a later one keeps none there)."""
    def side(name: str, env: dict[str, str]) -> Side:
        cache = work / f"listing-cache-{name}"

        def forget(store: Path) -> None:
            shutil.rmtree(store / ".genrun-index", ignore_errors=True)
            shutil.rmtree(cache, ignore_errors=True)
        return Side(name, {**env, "GENRUN_CACHE_DIR": str(cache)}, forget)
    return [side(before, before_tree(work, before)), side("now", CHILD_ENV)]


FIGURES = (("cold", ["--json"]), ("warm", ["--limit", "0"]), ("warm_json", ["--json"]), ("window", ["--limit", str(TERMINAL_ROWS)]),
           ("signed_by", ["--signed-by", "alice@example.com"]), ("unsigned_window", ["--unsigned", "--limit", str(TERMINAL_ROWS)]),
           ("filtered", ["--state", "succeeded", "--stop-reason", "max_new_tokens"]))
LABELS = {"cold": "ls --json, cold (fills the cache)", "warm": "ls --limit 0, warm", "warm_json": "ls --json, warm",
          "window": f"ls --limit {TERMINAL_ROWS} (a terminal's), warm", "signed_by": "ls --signed-by X, warm",
          "unsigned_window": f"ls --unsigned --limit {TERMINAL_ROWS}, warm", "filtered": "ls --state --stop-reason, warm",
          "page": "store page (index pages), warm"}


def measure(store: Path, repeat: int, work: Path, side: Side) -> dict[str, Timed]:
    size = sum(1 for p in store.iterdir() if not p.name.startswith("."))
    once = 1 if size > 10_000 else repeat
    figures = {}
    for key, args in FIGURES:
        runs = []
        for _ in range(once if key == "cold" else repeat):
            if key == "cold":
                side.forget(store)
            runs.append(timed([*GENRUN, "ls", "--store", str(store), *args], env=side.env, cwd=work))
        figures[key] = fastest(runs)
    site = work / f"site-{side.name}-{size}"
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir()
    figures["page"] = fastest([timed([*GENRUN, "report", "--store", str(store), "--html", str(site / "index.html")], env=side.env, cwd=work)
                               for _ in range(repeat)])
    return figures


def report(rows: dict[int, dict[str, dict[str, Timed]]], startup: dict[str, Timed], field: str, sizes: list[int], names: list[str]) -> None:
    """One table of `field` (wall or cpu), each genrun side by side, and the goals measured from it."""
    pick = lambda t: getattr(t, field)  # noqa: E731
    print(f"\n{field} seconds{'':34}" + "".join(f"{f'{n} {s:,}':>16}" for s in sizes for n in names))
    for key, label in LABELS.items():
        print(f"{label:44}" + "".join(f"{pick(rows[s][n][key]):>16.2f}" for s in sizes for n in names))
    per = {n: [(pick(rows[s][n]["cold"]) - pick(startup[n])) / s * 1000 for s in sizes] for n in names}
    print(f"{'ms per snapshot, cold (- startup)':44}" + "".join(f"{per[n][i]:>16.3f}" for i in range(len(sizes)) for n in names))
    big, small = max(sizes), min(sizes)
    now = rows[big]["now"]
    print(f"goals ({field}, now, {big:,}): warm --limit 0 {pick(now['warm']):.2f} s, --json {pick(now['warm_json']):.2f} s, terminal "
          f"{pick(now['window']):.2f} s (< 1 s; terminal {pick(now['window']) / pick(rows[small]['now']['window']):.1f}x its {small:,} figure, <= 2x); "
          f"sign-off filter {pick(now['signed_by']):.2f} s (< 2 s); page {pick(now['page']):.2f} s (< 5 s); cold per snapshot "
          f"{per['now'][-1]:.3f} ms vs {per[names[0]][-1]:.3f} ms before; startup {pick(startup['now']):.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--sweep-items", type=int, default=1_000, help="items of the sweep that is verified (0: none)")
    parser.add_argument("--before", default="04185e5", help="the earlier genrun measured beside this one (a commit)")
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
    measured = sides(work, args.before)
    names = [side.name for side in measured]
    empty = work / "empty-store"
    empty.mkdir(exist_ok=True)
    startup = {}
    for side in measured:
        timed([*GENRUN, "--version"], env=side.env, cwd=work)  # its bytecode cache written before anything is timed
        startup[side.name] = fastest([timed([*GENRUN, "ls", "--store", str(empty), "--json"], env=side.env, cwd=work) for _ in range(args.repeat)])
    loads = [os.getloadavg()]
    rows: dict[int, dict[str, dict[str, Timed]]] = {}
    for size in args.sizes:
        store = work / f"store-{size}"
        t = time.perf_counter()
        if not (args.reuse and store.is_dir()):
            shutil.rmtree(store, ignore_errors=True)
            make_store(seeds, size, store)
        made = time.perf_counter() - t
        rows[size] = {}
        for side in measured:
            loads.append(os.getloadavg())
            rows[size][side.name] = measure(store, args.repeat, work, side)
            print(f"{size:,} snapshots, {side.name}: {rows[size][side.name]}; load {os.getloadavg()}", file=sys.stderr, flush=True)
        loads.append(os.getloadavg())
        print(f"{size:,} snapshots: store made in {made:.1f} s", file=sys.stderr)
        if not args.reuse:
            shutil.rmtree(store)
    verify = None
    if args.sweep_items:
        shutil.rmtree(work / "sweep-store", ignore_errors=True)
        verify = genrun("verify", make_big_sweep(sweep, args.sweep_items, work / "sweep-store"))
        loads.append(os.getloadavg())
    print(f"load averages (1, 5, 15 min) before and after each size and genrun: {[tuple(round(x, 1) for x in load) for load in loads]} "
          f"on {os.cpu_count()} CPUs")
    print(f"best of {args.repeat} for warm figures; startup (`ls` of an empty store): " +
          ", ".join(f"{n} {startup[n].wall:.2f} s wall, {startup[n].cpu:.2f} s CPU" for n in names))
    for field in ("wall", "cpu"):
        report(rows, startup, field, args.sizes, names)
    if verify is not None:
        print(f"verify of the {args.sweep_items}-item sweep: {verify.wall:.1f} s wall, {verify.cpu:.1f} s CPU (all processes)")


if __name__ == "__main__":
    main()
