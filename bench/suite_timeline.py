"""Where the test suite's time goes, per xdist worker: a pytest plugin plus a summary.

    PYTHONPATH=bench GENRUN_TIMELINE=/tmp/timeline python -m pytest -p suite_timeline
    python bench/suite_timeline.py /tmp/timeline

The plugin appends one JSON line per test (node id, start, end, CPU seconds of the worker and of the
children it reaped) to `$GENRUN_TIMELINE/<worker>.jsonl`; the summary prints each worker's end and busy
time and, in order, the modules that took longest on it. CPU of processes a test did not reap itself
(Ray actors, sweep workers, forked children) is not in the CPU columns: compare with `time`'s total.
"""

import json
import os
import sys
import time
from pathlib import Path

import pytest

_out = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # noqa: ANN001, ANN201 - pytest's hook signature
    global _out
    if _out is None:
        directory = Path(os.environ.get("GENRUN_TIMELINE", "timeline"))
        directory.mkdir(parents=True, exist_ok=True)
        _out = open(directory / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl", "a")
    start, before = time.time(), os.times()
    yield
    after = os.times()
    _out.write(json.dumps({
        "id": item.nodeid, "t0": start, "t1": time.time(),
        "cpu_self": (after.user + after.system) - (before.user + before.system),
        "cpu_children": (after.children_user + after.children_system) - (before.children_user + before.children_system),
    }) + "\n")
    _out.flush()


def summarize(directory: Path, shown_seconds: float = 8.0) -> None:
    rows = {path.stem: [json.loads(line) for line in path.open()] for path in sorted(directory.glob("*.jsonl"))}
    origin = min(r["t0"] for tests in rows.values() for r in tests)
    for worker, tests in rows.items():
        tests.sort(key=lambda r: r["t0"])
        busy = sum(r["t1"] - r["t0"] for r in tests)
        print(f"{worker}: {len(tests)} tests, ends at {tests[-1]['t1'] - origin:.0f} s, busy {busy:.0f} s")
        modules: dict[str, list[float]] = {}
        for r in tests:
            span = modules.setdefault(r["id"].split("::")[0], [r["t0"], r["t1"], 0.0, 0.0])
            span[0], span[1] = min(span[0], r["t0"]), max(span[1], r["t1"])
            span[2] += r["t1"] - r["t0"]
            span[3] += r["cpu_self"] + r["cpu_children"]
        for module, (first, last, seconds, cpu) in sorted(modules.items(), key=lambda kv: kv[1][0]):
            if seconds >= shown_seconds:
                print(f"  {first - origin:5.0f}-{last - origin:5.0f} s  {seconds:6.1f} s in tests, {cpu:6.1f} s CPU seen  {module}")


if __name__ == "__main__":
    summarize(Path(sys.argv[1] if len(sys.argv) > 1 else "timeline"))
