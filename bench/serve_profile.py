"""Where a served request's time goes in `genrun serve`'s process: CPU per request, by step, without HTTP.

`bench/serve.py` measures tokens/s through HTTP against `vllm serve`; on a shared machine its rounds swing with the load.
This runs the server's own request path in this process (`ServedModel.run`: map the fields, plan, freeze, execute on
the shared engine, read the answer back) for `--requests` completions of `--tokens` tokens, `--concurrency` at once
from threads, as the server's pool runs them, and prints per step the thread CPU per request (`time.thread_time`: CPU
of the request's own thread, not time spent waiting for the GIL or the disk) and the wall time, then the process's CPU
per request (the engine's output handling included). A warm-up round of `--concurrency` requests runs first.

Usage (the vLLM environment): python bench/serve_profile.py [--requests 64] [--tokens 128] [--concurrency 16] [--model DIR]
"""

import argparse
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from serve import BUNDLED_MODEL, environment

STEPS = ("request_for", "prepare_plan", "create_snapshot", "_execute", "read_answer")
"""`genrun.runner.serve._served`'s steps of one request, timed where `ServedModel.run` calls them."""


class StepClock:
    """Thread CPU and wall seconds per step, summed over every request's thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.totals: dict[str, list[float]] = {}

    def timed(self, step: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed_call(*args: Any, **kwargs: Any) -> Any:
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                with self.lock:
                    total = self.totals.setdefault(step, [0.0, 0.0, 0])
                    total[0] += time.thread_time() - cpu
                    total[1] += time.perf_counter() - wall
                    total[2] += 1
        return timed_call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--model", type=Path, default=BUNDLED_MODEL)
    args = parser.parse_args()
    os.environ.update(environment())
    from genrun.runner.serve import _served
    from genrun.runner.serve._fields import ServedRequest

    work = Path(tempfile.mkdtemp(prefix="genrun-bench-serve-profile-"))
    request = work / "serve.toml"
    request.write_text(f'name = "bench-serve"\nseed = 0\n\n[model]\npath = {json.dumps(str(args.model.resolve()))}\nbackend = "vllm"\n'
                       'dtype = "float32"\ndevice = "cpu"\n\n[engine]\nenforce_eager = true\n')
    served = _served.ServedModel(request, work / "store")
    clock = StepClock()
    for step in STEPS:
        owner: Any = _served.ServedModel if hasattr(_served.ServedModel, step) else _served
        setattr(owner, step, clock.timed(step, getattr(owner, step)))

    def one(i: int) -> None:
        served.run(ServedRequest(model=None, input={"prompt": f"Count: {i}"}, seed=None, stream=False, include_usage=False,
                                 generation={"max_tokens": args.tokens, "ignore_eos": True, "temperature": 0}))

    try:
        with ThreadPoolExecutor(args.concurrency) as pool:
            list(pool.map(one, range(args.concurrency)))
            clock.totals.clear()
            wall, cpu = time.perf_counter(), time.process_time()
            list(pool.map(one, range(args.requests)))
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        served.interrupt("SIGTERM")
        served.close()
    print(f"{args.requests} requests x {args.tokens} tokens, {args.concurrency} at once: wall {wall:.2f} s, process CPU "
          f"{cpu / args.requests * 1000:.1f} ms per request, load {os.getloadavg()[0]:.2f}")
    for step, (step_cpu, step_wall, calls) in sorted(clock.totals.items(), key=lambda kv: -kv[1][0]):
        print(f"  {step:16s} thread CPU {step_cpu / calls * 1000:6.2f} ms  wall {step_wall / calls * 1000:7.1f} ms per request")


if __name__ == "__main__":  # vLLM's engine core is a spawned process: it imports this module again
    main()
