"""Timings that add up: result.json names every phase of the execution and they sum to `total_s`; the review page's
charts run over the recorded span, never past the run's end."""

import json
import re
from pathlib import Path

import pytest

from conftest import run_cli, tiny_request, write_request

from genrun.analysis._svg import Chart, Series, render_chart
from genrun.schemas import Phases, Timings, layout
from genrun.schemas.rendering import describe_timings

X_TICK = re.compile(r'text-anchor="middle" class="tick">([^<]+)</text>')


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
    assert line in " ".join(proc.stderr.split()) and line.endswith(f"= total {timings['total_s']:.2f} s")
    assert "checks" in line and "imports" in line and "evidence" in line
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


def test_a_single_point_chart_runs_over_the_given_span_only() -> None:
    single = Chart("Throughput", "s", "tokens/s", [Series("rate", [(6.2, 30.0)])], x_span=(0.0, 6.2))
    assert max(_x_ticks(render_chart(single))) <= 6.2
    unspanned = Chart("Throughput", "s", "tokens/s", [Series("rate", [(6.2, 30.0)])])
    assert max(_x_ticks(render_chart(unspanned))) > 6.2  # what the page drew before: the axis ran to twice the time


def test_timings_without_phases_read_and_render_as_before() -> None:
    old = Timings.model_validate({"load_s": 1.13, "first_token_s": 0.03, "decode_s": 0.52, "total_s": 6.21})
    assert old.phases is None
    assert describe_timings(old) == "load 1.13 s, first token 0.03 s, decode 0.52 s, total 6.21 s"
