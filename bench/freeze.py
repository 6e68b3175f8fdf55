"""Benchmark of freezing a model's identity: hashing speed, parallel shards, and the hash cache.

Creates a local model directory with a `--size-gb` weight file (random bytes) and a checkpoint
of `--shards` shards of the same total size, then measures side by side in one run:

  (a) `hashlib.file_digest(f, "sha256")` on the single weight file: the single-core limit;
  (b) the first `identify_model` of that directory (empty hash cache); target: >= 90 % of (a)'s speed;
  (c) the sharded checkpoint: sequential file_digest of every shard, a bare thread pool of
      file_digest, and one `identify_model`, which hashes shards in parallel; both speed-ups over
      sequential are reported, and identify must reach >= 90 % of the bare pool's speed. (The
      pool is the yardstick because on a shared VM the cores actually available vary from second
      to second; an identify that hashed sequentially would fall to 1/cores of the pool.)
  (d) a second `identify_model` of the same weights (hash cache hit); target: < 0.1 s.

Both sides of each comparison see the same page-cache state. By default everything is measured
twice: warm (the files read into the page cache before every measurement), where sha256 on one
core is the limit, then cold (caches dropped before every measurement; needs a writable
/proc/sys/vm/drop_caches, skipped with a note otherwise), where the disk may be. Each measurement is the best of `--rounds`, the two sides
interleaved. Exits 1 when a target is missed, naming it. About 2 minutes at the defaults on 2 cores.

    python bench/freeze.py                 # 2 GB, 4 shards, work dir bench/_work (git-ignored)
    python bench/freeze.py --size-gb 0.5 --keep
"""

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from genrun.runner.model_identity import identify_model  # noqa: E402
from genrun.schemas import ModelIdentity, ModelSpec  # noqa: E402

CHUNK = 64 << 20  # bytes written per write() call
RATIO_TARGET = 0.90
SECOND_TARGET_S = 0.1
POOL_RATIO_TARGET = 0.90  # identify's sharded speed vs a bare thread pool of file_digest

T = TypeVar("T")


class Row(NamedTuple):
    """One line of the result table."""

    label: str
    seconds: float
    nbytes: int | None


class Check(NamedTuple):
    """One target: what was measured, its value, the target, whether it was met."""

    name: str
    value: str
    target: str
    ok: bool


class Models(NamedTuple):
    """The generated model directories."""

    single: Path
    sharded: Path
    total: int  # bytes of weights in each
    shards: int

    def weight_files(self) -> list[Path]:
        return [self.single / "model.safetensors", *sorted(self.sharded.glob("*.safetensors"))]


def main(argv: list[str] | None = None) -> int:
    """Build the test models, run the measurements, print the tables and the targets; 1 when one is missed."""
    args = _parse(argv)
    work = Path(args.work_dir).resolve() / "freeze"
    shutil.rmtree(work, ignore_errors=True)
    try:
        return _run(work, int(args.size_gb * 1e9), args.shards, args.rounds, args.page_cache)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", default=str(Path(__file__).resolve().parent / "_work"), help="where the test models are written")
    parser.add_argument("--size-gb", type=float, default=2.0, help="total weight bytes, GB (10^9)")
    parser.add_argument("--shards", type=int, default=4, help="shards of the sharded checkpoint")
    parser.add_argument("--rounds", type=int, default=3, help="repetitions per measurement (best is kept)")
    parser.add_argument("--page-cache", choices=("both", "cold", "warm"), default="both",
                        help="cold: drop caches before each measurement (needs a writable /proc/sys/vm/drop_caches); "
                             "warm: files read into the cache before each measurement; both (default): warm, then cold when possible")
    parser.add_argument("--keep", action="store_true", help="keep the generated models in the work dir")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.shards < 1 or args.size_gb <= 0:
        parser.error("--rounds and --shards must be >= 1 and --size-gb > 0")
    return args


def _run(work: Path, total: int, shards: int, rounds: int, page_cache: str) -> int:
    t0 = time.perf_counter()
    shard_sizes = [total // shards + (1 if i < total % shards else 0) for i in range(shards)]
    models = Models(
        _make_model(work / "single", [("model.safetensors", total)]),
        _make_model(work / "sharded", [(f"model-{i + 1:05d}-of-{shards:05d}.safetensors", n) for i, n in enumerate(shard_sizes)]),
        total,
        shards,
    )
    print(f"genrun freeze benchmark: {total / 1e9:.2f} GB of weights, {shards} shards, {os.cpu_count()} logical cores, "
          f"best of {rounds}; models written in {time.perf_counter() - t0:.1f} s; {_load()}")
    os.sync()  # the writeback of the new files must not overlap the measurements
    # Warm first, so the warm figures are not taken just after drop_caches emptied the memory
    # (on the VM this was written on, runs right after a drop looked slower, though noise was high).
    modes = {"both": ["warm", "cold"], "cold": ["cold"], "warm": ["warm"]}[page_cache]
    checks: list[Check] = []
    for mode in modes:
        if mode == "cold" and not _can_drop_caches():
            print("page cache: /proc/sys/vm/drop_caches is not writable here, so no cold measurement")
            continue
        checks += _measure(work, models, rounds, cold=mode == "cold")
    print(f"after the measurements: {_load()}")
    print("targets:")
    for check in checks:
        print(f"  {check.name:<46} {check.value:>10}  {check.target:<17} {'ok' if check.ok else 'MISSED'}")
    missed = [c.name for c in checks if not c.ok]
    sys.stdout.flush()
    for name in missed:
        print(f"MISSED: {name}", file=sys.stderr)
    return 1 if missed else 0


def _measure(work: Path, models: Models, rounds: int, cold: bool) -> list[Check]:
    """(a)-(d) under one page-cache state, re-established before every timed measurement; prints the table."""
    mode = "cold" if cold else "warm"
    weights = models.single / "model.safetensors"
    shard_files = models.weight_files()[1:]

    def state(paths: list[Path]) -> Callable[[], None]:
        # Warm is re-established each time too: this VM's DAMON pages out page cache left idle for
        # about a minute, so "read once at the start" would not hold through the run.
        return _drop_caches if cold else lambda: _warm(paths)

    cache_of: dict[Path, str] = {}

    def first_identify(directory: Path) -> ModelIdentity:
        cache_of[directory] = tempfile.mkdtemp(prefix=f"cache-{mode}-", dir=work)  # an empty hash cache each time
        os.environ["GENRUN_CACHE_DIR"] = cache_of[directory]
        return _identify(directory)

    def second_identify(directory: Path) -> ModelIdentity:
        os.environ["GENRUN_CACHE_DIR"] = cache_of[directory]  # filled by the latest first identify
        return _identify(directory)

    # (a) and (b): one file; (c): shards: sequential file_digest, a bare thread pool of file_digest
    # (the parallelism this machine gives right now: other tenants share its cores) and one identify
    single = _race(rounds, state([weights]), {"digest": lambda: _digest(weights), "identify": lambda: first_identify(models.single)})
    sharded = _race(rounds, state(shard_files), {
        "sequential": lambda: [_digest(p) for p in shard_files],
        "pool": lambda: _digest_pool(shard_files),
        "identify": lambda: first_identify(models.sharded),
    })
    # (d): the same weights again, with the cache the latest first identify filled
    second = _race(rounds, state([weights]), {"identify": lambda: second_identify(models.single)})["identify"]
    second_sharded = _race(rounds, state(shard_files), {"identify": lambda: second_identify(models.sharded)})["identify"]

    total, shards = models.total, models.shards
    print(f"page cache: {mode} " + ("(dropped before every measurement)" if cold else "(files read into it before every measurement)"))
    _print_table([
        Row("(a) hashlib.file_digest, 1 file", single["digest"].seconds, total),
        Row("(b) identify_model first, 1 file", single["identify"].seconds, total),
        Row(f"(c) file_digest sequential, {shards} shards", sharded["sequential"].seconds, total),
        Row(f"(c) file_digest thread pool, {shards} shards", sharded["pool"].seconds, total),
        Row(f"(c) identify_model first, {shards} shards", sharded["identify"].seconds, total),
        Row("(d) identify_model second, 1 file", second.seconds, None),
        Row(f"(d) identify_model second, {shards} shards", second_sharded.seconds, None),
    ])
    ratio = single["digest"].seconds / single["identify"].seconds
    speedup = sharded["sequential"].seconds / sharded["identify"].seconds
    pool_speedup = sharded["sequential"].seconds / sharded["pool"].seconds
    of_pool = sharded["pool"].seconds / sharded["identify"].seconds
    ideal = min(os.cpu_count() or 1, shards)
    checks = [
        Check(f"{mode}: (b)/(a) speed ratio", f"{ratio:.3f}", f">= {RATIO_TARGET:.2f}", ratio >= RATIO_TARGET),
        Check(f"{mode}: (c) identify speed-up vs sequential", f"{speedup:.2f}x", f"(info; {ideal}x ideal)", True),
        Check(f"{mode}: (c) thread-pool speed-up vs sequential", f"{pool_speedup:.2f}x", "(info)", True),
        Check(f"{mode}: (c) identify / thread-pool speed", f"{of_pool:.3f}", f">= {POOL_RATIO_TARGET:.2f}", of_pool >= POOL_RATIO_TARGET),
        Check(f"{mode}: (d) second identify, 1 file", f"{second.seconds:.4f} s", f"< {SECOND_TARGET_S} s", second.seconds < SECOND_TARGET_S),
        Check(f"{mode}: (d) second identify, {shards} shards", f"{second_sharded.seconds:.4f} s", f"< {SECOND_TARGET_S} s",
              second_sharded.seconds < SECOND_TARGET_S),
    ]
    first, first_sharded, second, second_sharded = (  # type: ignore[assignment]
        single["identify"].value, sharded["identify"].value, second.value, second_sharded.value
    )
    # A timing only means something if the weights took the intended path and the digest is right.
    sources = _sources(first) | _sources(first_sharded)
    checks.append(Check(f"{mode}: first identify hashed the weights", ",".join(sorted(sources)), "computed", sources == {"computed"}))
    again = _sources(second) | _sources(second_sharded)
    checks.append(Check(f"{mode}: second identify used the cache", ",".join(sorted(again)), "hash_cache", again == {"hash_cache"}))
    right = next(f.sha256 for f in first.files if f.path == "model.safetensors") == _digest(weights)
    checks.append(Check(f"{mode}: identify sha256 == file_digest", str(right), "True", right))
    return checks


def _load() -> str:
    """The load average: other processes on the machine compete for the cores being measured."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return "load average " + " ".join(f.read().split()[:3])
    except OSError:
        return "load average unknown"


def _make_model(directory: Path, files: list[tuple[str, int]]) -> Path:
    """A model dir with config.json and weight files of random bytes (one random block, varied per chunk: fast)."""
    directory.mkdir(parents=True)
    (directory / "config.json").write_text('{"model_type": "llama", "note": "genrun bench: random weights"}\n')
    block = np.frombuffer(os.urandom(CHUNK), dtype=np.uint64)
    counter = 0
    for name, size in files:
        with open(directory / name, "wb") as f:
            left = size
            while left:
                counter += 1
                chunk = (block ^ np.uint64(counter * 0x9E3779B97F4A7C15 % (1 << 64))).tobytes()  # distinct, incompressible
                f.write(chunk[: min(left, CHUNK)])
                left -= min(left, CHUNK)
    return directory


def _can_drop_caches() -> bool:
    """Try to drop the page cache once; True when it worked (then it is dropped before every measurement)."""
    try:
        _drop_caches()
    except OSError:
        return False
    return True


def _drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def _warm(paths: list[Path]) -> None:
    """Read every byte into the page cache (fast when it is there already)."""
    buffer = bytearray(16 << 20)
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buffer):
                pass


def _digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _identify(directory: Path) -> ModelIdentity:
    return identify_model(ModelSpec(path=str(directory)), directory.parent)


def _timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


class Timing(NamedTuple):
    """Best time of one side of a race and its last result."""

    seconds: float
    value: Any


def _race(rounds: int, prepare: Callable[[], None], sides: dict[str, Callable[[], Any]]) -> dict[str, Timing]:
    """Best time of each side over `rounds`, rotating which goes first, `prepare` (untimed) before each run."""
    names = list(sides)
    best: dict[str, Timing] = {}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            prepare()
            seconds, value = _timed(sides[name])
            best[name] = Timing(min(seconds, best[name].seconds) if name in best else seconds, value)
    return best


def _digest_pool(paths: list[Path]) -> list[str]:
    """file_digest of each file on a bare thread pool: the most parallel hashing this machine gives now."""
    with ThreadPoolExecutor(max_workers=min(os.cpu_count() or 1, len(paths))) as pool:
        return list(pool.map(_digest, paths))


def _sources(identity: ModelIdentity) -> set[str]:
    return {f.hash_source for f in identity.files}


def _print_table(rows: list[Row]) -> None:
    print(f"{'measure':<42} {'seconds':>9} {'GB/s':>7}")
    for row in rows:
        speed = f"{row.nbytes / row.seconds / 1e9:7.3f}" if row.nbytes else f"{'-':>7}"
        print(f"{row.label:<42} {row.seconds:9.4f} {speed}")


if __name__ == "__main__":
    sys.exit(main())
