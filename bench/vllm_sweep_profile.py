"""Where a vLLM sweep item's time goes outside the engine: CPU per item on the items' threads and the group commit's.

A local vLLM sweep runs its items in a spawned worker (`batch_worker`), out of a profiler's reach. This runs the same
worker code in this process: `start_worker` (its group commit), one `BatchWorker`, every item of the sweep on its own
thread through `BatchWorker.run`, as `batch_worker_main` does. Per round it prints the items' thread CPU per item
(`time.thread_time`: CPU, not the time spent waiting for the GIL or the disk), of which after its generation ended (the
sweep's tail when every item ends at once: nothing of it overlaps the engine), the committer's CPU per item, the engine
thread's (vLLM's front end: admitting requests, stepping, processing outputs, every item's `on_output`), the groups
it committed, the sweep's window (first generation start to last seal) and how far apart the items started generating.
`--profile`: the last round under `cProfile` with `time.thread_time` (each item's thread and the committer), the top
functions by cumulative CPU; then the engine thread's own profile over every round.

Usage (the vLLM environment): python bench/vllm_sweep_profile.py [--items 64] [--tokens 256] [--rounds 3] [--profile]
[--model DIR]
"""

import argparse
import cProfile
import json
import os
import pstats
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import vllm_sweep  # noqa: F401 (sets the same environment as the side-by-side bench before vLLM is imported)
from vllm_sweep import BUNDLED_MODEL, prompts, write_sweep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3, help="the first round also loads the engine")
    parser.add_argument("--profile", action="store_true", help="cProfile the last round")
    parser.add_argument("--model", type=Path, default=BUNDLED_MODEL)
    args = parser.parse_args()
    from genrun.runner import group_commit
    from genrun.runner.recorder import ProgressRecorder
    from genrun.runner.sweep.batch_worker import BatchWorker
    from genrun.runner.sweep.store import plan_sweep
    from genrun.runner.sweep.worker import start_worker
    from genrun.schemas import layout

    engine_profile = cProfile.Profile(time.thread_time) if args.profile else None
    if engine_profile is not None:
        from genrun.runner.backends.vllm._shared import SharedEngine

        loop = SharedEngine._loop

        def profiled_loop(engine: SharedEngine) -> None:
            engine_profile.runcall(loop, engine)

        SharedEngine._loop = profiled_loop  # type: ignore[method-assign]
    start_worker("profile")
    worker = BatchWorker("profile")
    profiles: list[cProfile.Profile] = []
    commit_cpu: list[float] = []
    groups: list[int] = []
    commit = group_commit.commit

    def timed_commit(group: list) -> None:  # the committer thread's CPU (and its profile)
        started = time.thread_time()
        profile = profiles[0] if profiles else None
        if profile is not None:
            profile.enable()
        try:
            commit(group)
        finally:
            if profile is not None:
                profile.disable()
            commit_cpu.append(time.thread_time() - started)
            groups.append(len(group))

    group_commit.commit = timed_commit
    generation_ended: dict[int, float] = {}  # item thread -> its CPU when its generation returned
    mark_generation_end = ProgressRecorder.mark_generation_end

    def timed_generation_end(recorder: ProgressRecorder) -> None:
        generation_ended[threading.get_ident()] = time.thread_time()
        mark_generation_end(recorder)

    ProgressRecorder.mark_generation_end = timed_generation_end  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(prefix="genrun-bench-profile-") as tmp:
        for index in range(args.rounds):
            profiling = args.profile and index == args.rounds - 1
            if profiling:
                profiles.append(cProfile.Profile(time.thread_time))
            sweep_dir = plan_sweep(write_sweep(Path(tmp) / f"s{index}", "vllm", prompts(args.items), args.tokens, args.model), Path(tmp) / "store")
            items = [Path(tmp) / "store" / i["snapshot_id"] for i in json.loads((sweep_dir / layout.SWEEP_PLAN).read_text())["items"]]
            item_cpu: list[float] = []
            after_generation: list[float] = []
            commit_cpu.clear()
            groups.clear()

            def run(snapshot: Path) -> None:
                profile = cProfile.Profile(time.thread_time) if profiling else None
                started = time.thread_time()
                if profile is not None:
                    profile.enable()
                worker.run(snapshot)
                if profile is not None:
                    profile.disable()
                    profiles.append(profile)
                ended = time.thread_time()
                item_cpu.append(ended - started)
                after_generation.append(ended - generation_ended.pop(threading.get_ident(), ended))

            engine_cpu = _engine_thread_cpu()
            threads = [threading.Thread(target=run, args=(s,)) for s in items]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            engine_cpu = _engine_thread_cpu() - engine_cpu
            starts = [datetime.fromisoformat(json.loads((s / layout.PROGRESS).read_text().splitlines()[0])["wall_time"]).timestamp()
                      for s in items]
            seals = [(s / layout.MANIFEST).stat().st_mtime for s in items]
            print(f"round {index}: items' CPU {1000 * sum(item_cpu) / len(items):.2f} ms/item "
                  f"({1000 * sum(after_generation) / len(items):.2f} after generation), group commit's "
                  f"{1000 * sum(commit_cpu) / len(items):.2f} ms/item in groups {groups}, the engine thread's "
                  f"{1000 * engine_cpu / len(items):.2f} ms/item; window {max(seals) - min(starts):.2f} s, "
                  f"starts spread over {max(starts) - min(starts):.2f} s; load {os.getloadavg()[0]:.1f}", file=sys.stderr)
    worker.close()
    if profiles:
        stats = pstats.Stats(profiles[0])
        for profile in profiles[1:]:
            stats.add(profile)
        stats.sort_stats("cumulative").print_stats(40)
    if engine_profile is not None:
        print("the engine thread (every round):")
        pstats.Stats(engine_profile).sort_stats("cumulative").print_stats(30)


def _engine_thread_cpu() -> float:
    """CPU seconds of the worker's engine thread so far (0 before the first item opened the batch)."""
    for thread in threading.enumerate():
        if thread.name == "genrun-vllm-shared-engine" and thread.ident is not None:
            return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    return 0.0


if __name__ == "__main__":
    main()
