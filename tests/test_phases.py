"""Timings that add up: result.json names every phase of the execution and they sum to `total_s`; `genrun run` shows
planning's share (the process's start included) beside it, so its parts add up to the whole command; the review page's
charts run over the recorded span, never past the run's end."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from _forked import spawn_cli
from conftest import EXAMPLES, PROCESS_TIMEOUT_S, run_cli, tiny_request, write_request

from genrun.analysis._svg import Chart, Series, render_chart
from genrun.schemas import Phases, Timings, layout
from genrun.schemas.rendering import describe_phases, describe_timings

X_TICK = re.compile(r'text-anchor="middle" class="tick">([^<]+)</text>')
SECONDS = re.compile(r"([a-z]+(?: [a-z]+)?) (\d+\.\d\d) s")
"""`checks 0.04 s`, `first token 0.03 s`: a named part of a printed time line."""


def _x_ticks(svg: str) -> list[float]:
    return [float(v.replace(",", "")) for v in X_TICK.findall(svg)]


def test_phases_of_a_real_run_sum_to_the_total_and_the_charts_stay_in_the_recorded_span(tmp_path: Path, tiny_lm: Path) -> None:
    # progress records only at start, first token and end: the throughput chart has a single point (the end's rate)
    text = tiny_request(tiny_lm, tables="[progress]\nevery_units = 1000\nevery_seconds = 1000.0")
    store = tmp_path / "store"
    proc = run_cli("run", write_request(tmp_path, text), "--store", store)
    assert proc.returncode == 0, proc.stderr
    snapshot = next(store.iterdir())
    timings = json.loads((snapshot / layout.RESULT).read_text())["timings"]
    phases = timings["phases"]
    assert set(phases) == set(Phases.model_fields)
    reached = [v for v in phases.values() if v is not None]
    assert all(v >= 0 for v in reached) and len(reached) == len(phases)  # a plain run passes through every phase
    assert sum(reached) == pytest.approx(timings["total_s"], abs=1e-6)
    assert phases["load_s"] == pytest.approx(timings["load_s"], abs=0.05)  # the backend's own load measure, inside the phase
    assert phases["generate_s"] >= timings["first_token_s"] + timings["decode_s"] - 1e-6
    line = describe_timings(Timings.model_validate(timings))
    assert line.endswith(f"= total {timings['total_s']:.2f} s")
    assert "checks" in line and "imports" in line and "evidence" in line
    # `run` planned first in the same process: the execution's phases are its second part (see the next test)
    assert f"execute {timings['total_s']:.2f} s" in proc.stderr
    assert "execute: " + describe_phases(Timings.model_validate(timings)) in " ".join(proc.stderr.split())
    report = run_cli("report", snapshot)
    assert line.split(" (")[0] in " ".join(report.stdout.split())

    html = tmp_path / "review.html"
    assert run_cli("report", snapshot, "--html", html).returncode == 0
    page = html.read_text()
    assert "the phases sum to it" in page
    times = [json.loads(line)["t"] for line in (snapshot / layout.PROGRESS).read_text().splitlines()]
    first, last = min(times), max(times)
    charts = re.findall(r"<svg.*?</svg>", page, flags=re.S)
    assert len(charts) == 3
    for svg in charts:
        ticks = _x_ticks(svg)
        assert ticks, svg
        assert all(first - 1e-5 * last <= t <= last * (1 + 1e-5) for t in ticks), (first, last, ticks)


def _printed_time(stderr: str) -> dict[str, dict[str, float]]:
    """`run`'s time lines: {"time": {"plan": ..., "execute": ..., "total": ...}, "plan": {phase: s}, "execute": {phase: s}}."""
    lines = [line.strip() for line in stderr.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("time: "))
    parsed = {}
    for line in lines[start:start + 3]:
        label, _, rest = line.partition(": ")
        parsed[label] = {name: float(value) for name, value in SECONDS.findall(rest)}
    return parsed


def _assert_adds_up(printed: dict[str, dict[str, float]]) -> None:
    time = printed["time"]
    assert set(time) == {"plan", "execute", "total"}, printed
    assert time["plan"] + time["execute"] == pytest.approx(time["total"], abs=0.011)
    assert sum(printed["plan"].values()) == pytest.approx(time["plan"], abs=0.006 * len(printed["plan"]))
    executed = {k: v for k, v in printed["execute"].items() if k not in ("first token", "decode")}  # inside generate
    assert sum(executed.values()) == pytest.approx(time["execute"], abs=0.006 * len(executed))


def test_run_shows_the_plans_share_and_the_parts_add_up_to_the_whole_command(tmp_path: Path) -> None:
    # a real process: the time before planning (the interpreter's start, genrun's imports) is its first part
    proc = spawn_cli("run", EXAMPLES / "tiny.toml", "--store", tmp_path / "store")
    _, stderr = proc.communicate(timeout=PROCESS_TIMEOUT_S)
    assert proc.returncode == 0, stderr
    printed = _printed_time(stderr)
    assert list(printed["plan"]) == ["startup", "checks", "imports", "hashing", "budget", "environment", "freeze"]
    assert list(printed["execute"])[0] == "checks" and "evidence" in printed["execute"]
    _assert_adds_up(printed)
    result = json.loads((next((tmp_path / "store").iterdir()) / layout.RESULT).read_text())
    assert printed["time"]["execute"] == round(result["timings"]["total_s"], 2)  # result.json keeps the execution's own


SHELL_DELAY_S = 8
"""What a shell runs before it execs genrun in its own process: long against genrun's own start on a loaded machine."""


def test_startup_counts_from_genruns_start_not_from_what_the_shell_ran_before(tmp_path: Path) -> None:
    """`bash -c 'sleep 8; genrun run ...'` (bash execs its last command in its own process, whose start is then the
    shell's): the recorded startup was 9.8 s, the sleep included; it must leave the sleep out."""
    command = [sys.executable, "-m", "genrun.runner.cli", "run", str(EXAMPLES / "tiny.toml"), "--store", str(tmp_path / "store"), "--json"]
    proc = subprocess.run(["bash", "-c", f'sleep {SHELL_DELAY_S}; exec "$@"', "bash", *command],
                          capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    planned = json.loads(proc.stdout)["plan_timings"]
    assert planned["startup_s"] is not None
    assert 0 <= planned["startup_s"] < SHELL_DELAY_S, planned


def test_run_in_process_shows_planning_and_json_gives_its_phases(tmp_path: Path) -> None:
    printed = _printed_time(run_cli("run", EXAMPLES / "tiny.toml", "--store", tmp_path / "a").stderr)
    assert list(printed["plan"]) == ["checks", "imports", "hashing", "budget", "environment", "freeze"]  # no process start of its own
    _assert_adds_up(printed)
    document = json.loads(run_cli("run", EXAMPLES / "tiny.toml", "--store", tmp_path / "b", "--json").stdout)
    planned = document["plan_timings"]
    assert planned["startup_s"] is None
    assert sum(v for k, v in planned.items() if k != "total_s" and v is not None) == pytest.approx(planned["total_s"], abs=1e-6)


def test_a_single_point_chart_runs_over_the_given_span_only() -> None:
    single = Chart("Throughput", "s", "tokens/s", [Series("rate", [(6.2, 30.0)])], x_span=(0.0, 6.2))
    assert max(_x_ticks(render_chart(single))) <= 6.2
    unspanned = Chart("Throughput", "s", "tokens/s", [Series("rate", [(6.2, 30.0)])])
    assert max(_x_ticks(render_chart(unspanned))) > 6.2  # what the page drew before: the axis ran to twice the time


def test_timings_without_phases_read_and_render_as_before() -> None:
    old = Timings.model_validate({"load_s": 1.13, "first_token_s": 0.03, "decode_s": 0.52, "total_s": 6.21})
    assert old.phases is None
    assert describe_timings(old) == "load 1.13 s, first token 0.03 s, decode 0.52 s, total 6.21 s"


def test_the_phase_clock_names_the_phases_result_json_records_in_their_order() -> None:
    """`Phase` (the clock's names) and `Phases` (result.json's fields) name the same phases, in order."""
    from typing import get_args

    from genrun.runner.phases import Phase

    assert [f"{p}_s" for p in get_args(Phase)] == list(Phases.model_fields)


def test_a_pipelines_steps_are_not_called_decode() -> None:
    """A diffusion run's summary said "decode" for its denoising steps (issue 41, item 11)."""
    timings = Timings(load_s=0.5, first_token_s=0.2, decode_s=1.0, total_s=2.0)
    assert describe_timings(timings, "step") == "load 0.50 s, first step 0.20 s, later steps 1.00 s, total 2.00 s"
    assert describe_timings(timings, "frame") == "load 0.50 s, first frame 0.20 s, decode 1.00 s, total 2.00 s"
