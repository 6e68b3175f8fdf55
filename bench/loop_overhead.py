"""Overhead of the loop backend's recorder: the same loop with `rec` recording vs with a recorder that does nothing.

Two loops, each run side by side in interleaved pairs (recorded/null, then null/recorded, ...) in one
process so drift in machine load hits both sides:

- `onnx`: the bundled greedy loop (`examples/lm_loop.py`) on onnxruntime over the ONNX export of the tiny
  model, 4 prompts of 64 new tokens each, a loop that does nothing but one model step and one `emit` per
  token. The figure is the median over pairs of (recorded time / null time) - 1: the recording's share,
  on the process's CPU time (`time.process_time`: the loop runs on one thread, so CPU time is its work and
  excludes time spent waiting for a core on a busy machine) and, for reference, on wall time.
- `onnx, engine opened once`: the same loop with the onnxruntime session and the tokenizer opened once before
  the pairs (cached), so the timed run is the generation steps alone: a smaller denominator (~85 ms, not
  ~100), the strictest reading of the share.
- `emit`: a loop with no model at all, 200,000 `emit(0, [id])` calls: the recorder's absolute cost per
  unit (µs), i.e. what it adds to any loop, whatever its engine.

The recorded side is what `genrun execute` runs: `LoopRecorder` appending `stage-progress.ndjson` and
driving a `ProgressRecorder` (`progress.ndjson`) at the default cadence (256 units / 30 s), in a
temporary directory. The null side's stage has the same methods and does nothing.

Usage:
    python bench/loop_overhead.py [--pairs 9]

Target: the recording's share of the ONNX loop <= 2 %.
"""

import argparse
import functools
import os
import random
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "examples")]

import lm_loop  # noqa: E402

from genrun.runner.backends.loop.recorder import LoopRecorder  # noqa: E402
from genrun.runner.recorder import ProgressRecorder  # noqa: E402
from genrun.snapshot_dir import SnapshotDir  # noqa: E402

MODEL = REPO / "examples" / "models" / "tiny-lm-onnx"
PROMPTS = ["count down from 63 :", "count down from 62 :", "count down from 61 :", "count down from 60 :"]
EMITS = 200_000
TARGET = 0.02
CLOSING_S: list[float] = []
"""Wall seconds of each recorded run's closing fsync (printed apart)."""


class _NullStage:
    def __init__(self, rows: int) -> None:
        self.rows = rows

    def __enter__(self) -> "_NullStage":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def emit(self, row: int, ids: Any) -> None:
        pass

    def stop(self, row: int, reason: str, **evidence: Any) -> None:
        pass


class NullRecorder:
    """The recorder's surface, doing nothing: the loop's own cost."""

    def __init__(self, outputs_dir: Path) -> None:
        self.outputs_dir = outputs_dir

    def config(self, mapping: Any) -> None:
        pass

    def stage(self, name: str, *, unit: str, per_second: float | None = None, rows: int, consumes: str | None = None) -> _NullStage:
        return _NullStage(rows)


def real_recorder(directory: Path) -> tuple[LoopRecorder, ProgressRecorder, int]:
    core = ProgressRecorder(SnapshotDir(directory, writable=True).open_stream("progress.ndjson"), origin=time.monotonic(), unit="token", every_units=256, every_seconds=30.0)
    fd = os.open(directory / "stage-progress.ndjson", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    return LoopRecorder(core=core, progress_fd=fd, every_units=256, every_seconds=30.0, on_config=lambda _c: None, outputs_dir=directory), core, fd


def timed(recorded: bool, body: Any) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of `body`."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        if recorded:
            rec, core, fd = real_recorder(directory)
        else:
            rec, core, fd = NullRecorder(directory), None, None
        cpu_started, wall_started = time.process_time(), time.perf_counter()
        body(rec)
        timing = time.process_time() - cpu_started, time.perf_counter() - wall_started
        if core is not None:  # the fsync at close is the run's durability, paid once per run by every backend: timed apart
            closing = time.perf_counter()
            core.close()
            os.close(fd)
            CLOSING_S.append(time.perf_counter() - closing)
        return timing


def onnx_loop(rec: Any) -> None:
    lm_loop.generate(MODEL, {"prompts": PROMPTS}, {"max_new_tokens": 64}, rec)


def steps_only_loop(rec: Any) -> None:
    """`onnx_loop` with the engine and tokenizer opened once (cached): the timed run is the generation steps."""
    lm_loop.open_engine, lm_loop.Tokenizer = OPEN_ENGINE_ONCE, TOKENIZER_ONCE  # type: ignore[misc]
    try:
        onnx_loop(rec)
    finally:
        lm_loop.open_engine, lm_loop.Tokenizer = OPEN_ENGINE, TOKENIZER  # type: ignore[misc]


OPEN_ENGINE, TOKENIZER = lm_loop.open_engine, lm_loop.Tokenizer
OPEN_ENGINE_ONCE = functools.cache(OPEN_ENGINE)
TOKENIZER_ONCE = types.SimpleNamespace(from_file=functools.cache(TOKENIZER.from_file))


def emit_loop(rec: Any) -> None:
    rec.config({})
    with rec.stage("emit", unit="token", rows=1) as stage:
        for i in range(EMITS):
            stage.emit(0, [i])


Timing = tuple[float, float]


def pairs(body: Any, n: int) -> list[tuple[Timing, Timing, Timing]]:
    """(recorded, null, second null) (CPU s, wall s) per pair, the order alternating; the second null run is the A/A control."""
    timed(True, body), timed(False, body)  # warm-up: imports, the session's first run
    out = []
    for i in range(n):
        if i % 2:
            null = timed(False, body)
            rec = timed(True, body)
        else:
            rec = timed(True, body)
            null = timed(False, body)
        out.append((rec, null, timed(False, body)))
    return out


def shares(runs: list[tuple[Timing, Timing, Timing]], clock: int) -> tuple[list[float], list[float]]:
    """Per pair: recorded/null - 1 (the recording's share) and null/null - 1 (the A/A control), on one clock."""
    return ([rec[clock] / null[clock] - 1 for rec, null, _ in runs],
            [again[clock] / null[clock] - 1 for _, null, again in runs])


def median_interval(values: list[float], resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % bootstrap interval of the median: with single pairs spread over tens of percent, it says whether a median
    a few percent off the prediction is a difference at all."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def describe(values: list[float]) -> str:
    low, high = median_interval(values)
    return (f"median {statistics.median(values):+.2%} (95 % interval of the median {low:+.2%} .. {high:+.2%}; "
            f"single pairs {min(values):+.2%} .. {max(values):+.2%})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=9)
    args = parser.parse_args()
    onnx = pairs(onnx_loop, args.pairs)
    tokens = sum(64 for _ in PROMPTS)
    for clock, name in ((0, "CPU time"), (1, "wall time")):
        share, control = shares(onnx, clock)
        null_s = statistics.median(null[clock] for _, null, _ in onnx)
        rec_s = statistics.median(rec[clock] for rec, _, _ in onnx)
        print(f"onnx loop ({name}): {tokens} tokens, null {null_s * 1e3:.1f} ms, recorded {rec_s * 1e3:.1f} ms; "
              f"recording share {describe(share)}, target <= {TARGET:.0%}; A/A control (null vs null) {describe(control)}")
    steps = pairs(steps_only_loop, args.pairs)
    share, control = shares(steps, 0)
    print(f"onnx loop, engine and tokenizer opened once (CPU time): null {statistics.median(n[0] for _, n, _ in steps) * 1e3:.1f} ms; "
          f"recording share {describe(share)}; A/A control {describe(control)}")
    emit = pairs(emit_loop, args.pairs)
    per_unit_us = statistics.median((rec[0] - null[0]) / EMITS * 1e6 for rec, null, _ in emit)
    null_cpu = statistics.median(null[0] for _, null, _ in onnx)
    print(f"emit-only loop: {EMITS:,} emits, recorder cost {per_unit_us:.2f} µs CPU per unit (median over {args.pairs} pairs); "
          f"predicted share of the onnx loop {per_unit_us * 1e-6 * tokens / null_cpu:+.2%}")
    print(f"closing the recorded run's files (fsync, once per run, as for every backend's progress.ndjson): "
          f"median {statistics.median(CLOSING_S) * 1e3:.2f} ms wall")
    cpu_share, _ = shares(onnx, 0)
    return 0 if statistics.median(cpu_share) <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
