"""Render a `Report` with rich: short tables and unicode sparklines for the terminal."""

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from genrun.schemas import StopEvidence
from genrun.schemas.budget import NO_LENGTH_LIMIT
from genrun.schemas.rendering import after_first, describe_timings, human_bytes

from .report import Report

SPARK = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 48
_STATUS_STYLE = {"succeeded": "bold green", "failed": "bold red", "interrupted": "bold yellow", None: "bold red"}


def render_report(report: Report, console: Console, signoffs: str | None = None) -> None:
    """Print the post-mortem, most important first: how it ended, why, limits, time, budget, last tokens, charts.
    `signoffs`: the one-line `summarize_signoffs` of the snapshot's records, shown under the headline."""
    console.rule(Text(f"genrun report · {report.snapshot_id}"))
    # soft_wrap: lines that name ids and commands are never broken by rich (the terminal wraps them), so each copies whole
    console.print(Text(report.headline, style=_STATUS_STYLE.get(report.status, "bold")), soft_wrap=True)
    if report.complete:  # report reads, never hashes (that is verify's slow part): say so, so "succeeded" is not read as "intact"
        console.print(Text(f"files not checked against the seal: run 'genrun verify {report.snapshot_id}'", style="dim"), soft_wrap=True)
    if signoffs is not None:
        console.print(Text(f"sign-offs: {signoffs}"), soft_wrap=True)
    for note in report.notes:
        console.print(Text(f"! {note}", style="yellow"), soft_wrap=True)
    console.print(_request_table(report))
    if report.limits:
        console.print(_limits_table(report))
    if report.call_config is not None:
        console.print(_kv_table(report.call_config_heading, _call_config_rows(report)))
    if report.sequences:
        console.print(_stops_table(report))
    console.print(_timings_line(report))
    if report.stages:
        console.print(_stages_line(report))
    console.print(_budget_table(report))
    _print_last_tokens(report, console)
    _print_charts(report, console)


def _kv_table(title: str, rows: Sequence[tuple[str, Any]]) -> Table:
    table = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in rows:
        table.add_row(key, Text(_fmt(value)))  # Text: values are data, never rich markup ("[generation]" must survive)
    return table


def _call_config_rows(report: Report) -> list[tuple[str, Any]]:
    """The call config's values, only the fields its model declares the terminal shows (when it declares them)."""
    shown = report.call_config_shown
    return [(k, v) for k, v in (report.call_config or {}).items() if shown is None or k in shown]


def describe_inputs(shown: tuple[str, ...] | None, kind: str | None) -> str:
    """`1 conversation (3 messages, ...); first: system: …` for chat messages, `2 prompts (one batch); first: …` for prompts."""
    if not shown:
        return "(none)"
    first = _cut(str(shown[0]), 120)
    if kind == "messages":
        return f"1 conversation ({len(shown)} message{'s' if len(shown) != 1 else ''}, rendered by the chat template); first: {first}"
    return f"{len(shown)} prompt{'s' if len(shown) != 1 else ''} (one batch); first: {first}"


def _request_table(report: Report) -> Table:
    request = report.request
    rows: list[tuple[str, Any]] = []
    if request is not None:
        essentials = request.model_dump(mode="json", exclude={"input", "media"}, exclude_none=True)
        rows = list(essentials.items())
        shown = request.input
        if isinstance(shown, str):
            rows.insert(1, ("input", _cut(shown, 160)))
        else:
            rows.insert(1, ("input", describe_inputs(shown, request.input_kind)))
        if request.media:
            rows.insert(2, ("media", _cut(", ".join(request.media), 160)))
    identity = report.identity
    if identity.model_digest:
        rows.append(("model digest", f"{identity.model_digest[:16]}…  {identity.model_path or ''}"))
    if identity.packages:
        rows.append(("packages", ", ".join(f"{k} {v}" for k, v in identity.packages.items() if v)))
    if identity.host:
        rows.append(("host", identity.host + (f"; {identity.cuda}" if identity.cuda else "")))
    return _kv_table("Request", rows)


def _limits_table(report: Report) -> Table:
    table = Table(title="Effective limits (as generate used them)", title_justify="left")
    for column in ("call", "limit", "value", "set by"):
        table.add_column(column)
    for line in report.limits:
        style = "yellow" if line.source == "library_default" else None
        table.add_row(str(line.call_index), Text(line.name), Text(_fmt(line.value)), Text(line.source, style=style or ""))
    context = f"{report.context_limit}" + (f" ({report.context_limit_key})" if report.context_limit_key else "")
    table.caption = Text(f"prompt {report.prompt_length} tokens · context {context} · EOS {list(report.eos_token_ids)} · "
                     f"pad {report.pad_token_id}")
    table.caption_justify = "left"
    return table


def _stops_table(report: Report) -> Table:
    table = Table(title="Why each sequence stopped", title_justify="left")
    for column in ("seq", "reason", "generated", "last id", "EOS at", "evidence"):
        table.add_column(column, overflow="fold")
    for s in report.sequences:
        last = s.last_tokens[-1].token if s.last_tokens and s.last_tokens[-1].token else None
        last_id = "—" if s.last_token_id is None else f"{s.last_token_id}" + (f" {last!r}" if last else "")
        evidence = ", ".join(f"{k}={_fmt(v)}" for k, v in _evidence_facts(s.evidence).items())
        if s.fired:
            evidence = f"fired {', '.join(s.fired)}" + (f"; {evidence}" if evidence else "")
        if s.exception:
            evidence = f"{s.exception}; {evidence}"
        generated = f"{s.generated}/{s.steps_planned}" if s.steps_planned is not None else str(s.generated)
        style = "green" if s.reason in ("eos", "completed", "stop_string") else "red" if s.reason in ("exception", "unknown") else "yellow"
        eos_at = _fmt(list(s.eos_positions)) if s.eos_positions else "—"
        table.add_row(str(s.index), Text(s.reason, style=style), generated, Text(last_id), eos_at, Text(evidence))
    return table


def _evidence_facts(evidence: StopEvidence | None) -> dict[str, Any]:
    """The evidence's facts, diffusion steps inlined, empty ones left out (the reason is its own column)."""
    if evidence is None:
        return {}
    facts = evidence.model_dump(mode="json", exclude={"reason"})
    facts |= facts.pop("steps", None) or {}
    return {k: v for k, v in facts.items() if v not in (None, [], {})}


def _timings_line(report: Report) -> Text:
    t = report.timings
    if t.phases is not None:
        parts = [describe_timings(t, report.unit)]
    else:  # no result.json, or one from before phases: what is known, each part on its own
        parts = [f"{label} {_seconds(value)}" for value, label in
                 ((t.load_s, "load"), (t.first_token_s, f"first {report.unit}"), (t.decode_s, after_first(report.unit)), (t.total_s, "total"))]
    rate = t.units_per_s
    if rate and t.rows and t.rows > 1:
        parts.append(f"{rate:,.1f} {report.unit}s/s summed over {t.rows:g} rows")
        if t.units_per_s_per_row:
            parts.append(f"{t.units_per_s_per_row:,.1f} {report.unit}s/s per row")
    elif rate:
        parts.append(f"{rate:,.1f} {report.unit}s/s")
    return Text("Timings: " + " · ".join(parts))


def _stages_line(report: Report) -> Text:
    """`Stages: load 0.000 s · ar 30.1 s (750 frames, peak RSS 1.2 GiB) · acoustic 8.0 s (7 windows, read 750 ar units)`."""
    parts = [f"load {_seconds(report.timings.load_s)}"]
    for s in report.stages:
        extra = f", read {s.consumed:,}" if s.consumed is not None else ""
        peak = f", peak RSS {s.rss_peak_bytes / 2**20:,.1f} MiB" if s.rss_peak_bytes else ""
        parts.append(f"{s.name} {_seconds(s.seconds)} ({s.units:,} {s.unit}s{extra}{peak})")
    return Text("Stages: " + " · ".join(parts))


def _budget_table(report: Report) -> Table:
    b, plan = report.budget, report.budget.plan
    rows: list[tuple[str, Any]] = []
    if plan is not None:
        generated = "—" if b.generated_max is None else b.generated_max
        if plan.requested_units is None:
            rows.append((f"{plan.units}s", f"{generated}; {NO_LENGTH_LIMIT}"))
        else:
            source = f" (from {plan.requested_units_source})" if plan.requested_units_source is not None else ""
            rows.append((f"{plan.units}s", f"{generated} of {plan.requested_units} requested{source}"
                         + (f" = {b.used_fraction:.0%}" if b.used_fraction is not None else "")))
        if plan.effective_max_length is not None:
            rows.append(("length", f"max {plan.effective_max_length} of context {plan.context_limit} (fits: {plan.fits_context})"))
        rows.append(("memory", f"needs {b.memory_breakdown}; free at plan {_bytes(plan.device_memory_free_bytes)} "
                               f"(fits: {plan.fits_memory}){' FORCED' if plan.forced else ''}"))
    elif b.generated_max is not None:
        rows.append((f"{report.unit}s", str(b.generated_max)))
    if b.peak_rss_bytes or b.peak_cuda_allocated_bytes:
        rows.append(("peak", f"RSS {_bytes(b.peak_rss_bytes)}" + (
            f", CUDA allocated {_bytes(b.peak_cuda_allocated_bytes)}" if b.peak_cuda_allocated_bytes else "")))
    if b.requested_seconds:
        rows.append(("duration", f"{b.produced_seconds} s produced of {b.requested_seconds} s requested"))
    if report.outputs:
        rows.append(("outputs", ", ".join(report.outputs)))
    if plan is not None and plan.domain is not None:
        rows.append(("domain", ", ".join(f"{k}={v}" for k, v in plan.domain.model_dump(mode="json").items() if v is not None)))
    return _kv_table("Budget vs actual", rows)


def _print_last_tokens(report: Report, console: Console) -> None:
    if not report.sequences and report.last_progress_ids:  # a killed run: the stream's last ids are the latest evidence
        ids = " ".join(f"{t.id}" + (f"({t.token})" if t.token is not None else "") for t in report.last_progress_ids)
        console.print(Text("Last ids in progress.ndjson (row 0): ", style="bold") + Text(ids))
        if report.last_progress_text is not None:
            console.print(Text(f"  decoded: {_cut(report.last_progress_text, 200)!r}"))
    for s in report.sequences:
        if not s.last_tokens and not s.last_text:
            continue
        ids = " ".join(f"{t.id}" + (f"({t.token})" if t.token is not None else "") for t in s.last_tokens)
        console.print(Text(f"Last {'tokens' if report.ids_are_tokens else 'ids'} of sequence {s.index}: ", style="bold") + Text(ids))
        if s.last_text is not None:
            console.print(Text(f"  decoded: {_cut(s.last_text, 200)!r}"))


def _print_charts(report: Report, console: Console) -> None:
    samples = report.samples
    if not samples:
        console.print(Text("No progress records: no throughput or memory over time.", style="dim"))
        return
    span = f"t = {samples[0].t:.2f} … {samples[-1].t:.2f} s, {report.progress_records} records"
    console.print(Text(f"Over time ({span})", style="bold"))
    series = {
        f"{report.unit}s/s per row (window)": [s.window_units_per_s for s in samples if s.window_units_per_s is not None],
        f"{report.unit}s generated": [float(s.generated) for s in samples],
        "RSS MiB": [s.rss_bytes / 2**20 for s in samples if s.rss_bytes is not None],
        "CUDA alloc MiB": [s.cuda_allocated_bytes / 2**20 for s in samples if s.cuda_allocated_bytes is not None],
    }
    width = max(len(label) for label in series)  # "frames/s per row (window)" is longer than any fixed pad: labels never touch the chart
    for label, values in series.items():
        if values:
            console.print(Text(f"  {label:<{width}}  ") + Text(sparkline(values), style="cyan") + Text(f"  {min(values):,.1f} … {max(values):,.1f}"))


def sparkline(values: Sequence[float], width: int = SPARK_WIDTH) -> str:
    """Unicode block sparkline of `values`, averaged into at most `width` buckets."""
    if not values:
        return ""
    buckets = min(width, len(values))
    sums = [0.0] * buckets
    counts = [0] * buckets
    for i, v in enumerate(values):
        b = i * buckets // len(values)
        sums[b] += v
        counts[b] += 1
    means = [s / c for s, c in zip(sums, counts)]
    low, high = min(means), max(means)
    if high == low:
        return SPARK[len(SPARK) // 2] * buckets
    return "".join(SPARK[round((m - low) / (high - low) * (len(SPARK) - 1))] for m in means)


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list, tuple)):
        return _cut(str(value), 120)
    return str(value)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f} s"


def _bytes(value: int | None) -> str:
    return "—" if value is None else human_bytes(value)
