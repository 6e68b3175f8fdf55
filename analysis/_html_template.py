"""The review and index pages as jinja2 templates with autoescape: every value from a snapshot is text, never markup.

Prompts, outputs, evidence and messages are whatever a user or a model produced; autoescape turns
`<script>` into `&lt;script&gt;`. Only the SVG charts (built and escaped by `_svg`) and the index's rows (built and
escaped by `_index_rows`) are `Markup`.
"""

import re
from collections.abc import Sequence
from html import escape
from typing import Any

import jinja2
from markupsafe import Markup

from genrun.schemas.rendering import after_first, describe_timings

from ._svg import render_chart
from .html_report import IndexLine, ReviewPage, StoreIndex, charts

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1100px;padding:16px 24px;color:#1f2328}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 6px;border-bottom:1px solid #d0d7de;padding-bottom:3px}
table{border-collapse:collapse;margin:4px 0 8px;width:100%}th,td{border:1px solid #d0d7de;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f6f8fa}code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px}
pre{background:#f6f8fa;padding:6px 8px;white-space:pre-wrap;word-break:break-word;margin:2px 0}
.PASS,.valid,.succeeded,.completed{color:#1a7f37;font-weight:600}.WARN,.unsigned,.interrupted,.incomplete{color:#9a6700;font-weight:600}
.FAIL,.invalid,.failed{color:#cf222e;font-weight:600}.SKIP,.planned{color:#57606a}
.headline{font-size:16px;font-weight:600;margin:6px 0}.note{color:#9a6700}.empty{color:#57606a}
.chart{max-width:100%;height:auto;display:block;margin:6px 0}.chart .grid{stroke:#eaeef2}.chart .frame{fill:none;stroke:#8c959f}
.chart .tick{font-size:11px;fill:#57606a}.chart .axis{font-size:12px;fill:#1f2328}.chart .legend{font-size:11px;fill:#1f2328}
.chart .chart-title{font-size:13px;font-weight:600;fill:#1f2328}details{margin:0}summary{cursor:pointer}
"""

_BASE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{% block title %}{% endblock %}</title><style>{{ css }}</style></head>
<body>{% block body %}{% endblock %}</body></html>
"""

_REVIEW = """{% extends "base" %}{% set r = page.report %}{% set v = page.verification %}
{% block title %}genrun review · {{ r.snapshot_id }}{% endblock %}
{% block body %}
<h1>genrun review · <span class="mono">{{ r.snapshot_id }}</span></h1>
<p class="headline {{ r.status or 'incomplete' }}" id="headline">{{ r.headline }}</p>
<p>verify: <span class="{{ 'FAIL' if v.summary.failed else 'WARN' if v.summary.warnings else 'PASS' }}" id="verify-summary">{{ summary }}</span></p>
{% for note in r.notes %}<p class="note">! {{ note }}</p>{% endfor %}

<h2 id="signoff">Sign-off</h2>
<table><tr><th>plan digest (approve binds it)</th><td class="mono">{{ page.plan_digest or "—" }}</td></tr>
<tr><th>snapshot digest (accept / reject bind it)</th><td class="mono">{{ page.snapshot_digest or "— (not sealed)" }}</td></tr></table>
<p>{{ page.signoff_note }}</p>
{% for command in page.signoff_commands %}<pre class="command">{{ command }}</pre>{% endfor %}
{% if page.signoffs %}<table><tr><th>record</th><th>decision</th><th>by</th><th>binds</th><th>at</th><th>state</th><th>why</th></tr>
{% for s in page.signoffs %}<tr><td class="mono">{{ s.file }}</td><td>{{ s.decision or "—" }}</td><td>{{ s.by or "—" }}</td>
<td class="mono">{{ s.digest_kind or "" }} {{ (s.digest or "")[:16] }}</td><td>{{ s.at or "—" }}</td><td class="{{ s.state }}">{{ s.state }}</td>
<td>{{ s.reason }}</td></tr>{% endfor %}</table>{% else %}<p class="empty">No sign-offs yet.</p>{% endif %}

<h2 id="request">Request</h2>
<table>{% for key, value in (r.request.model_dump(mode="json", exclude_none=True) if r.request else {}).items() if key not in ("input", "input_kind") %}<tr><th>{{ key }}</th><td class="mono">{{ fmt(value) }}</td></tr>{% endfor %}
{% for key, value in identity_rows(r) %}<tr><th>{{ key }}</th><td class="mono">{{ fmt(value) }}</td></tr>{% endfor %}</table>
{% if page.inputs %}<p><b>Input</b> ({{ page.inputs|length }})</p>{% for text in page.inputs %}<pre class="input">{{ text }}</pre>{% endfor %}{% endif %}

{% if r.limits %}<h2 id="limits">Effective limits (as generate used them) and their sources</h2>
<table><tr><th>call</th><th>limit</th><th>value</th><th>set by</th></tr>
{% for l in r.limits %}<tr><td>{{ l.call_index }}</td><td class="mono">{{ l.name }}</td><td class="mono">{{ fmt(l.value) }}</td>
<td class="{{ 'WARN' if l.source == 'library_default' else '' }}">{{ l.source }}</td></tr>{% endfor %}</table>
<p>prompt {{ fmt(r.prompt_length) }} tokens · context {{ fmt(r.context_limit) }} · EOS {{ fmt(r.eos_token_ids|list) }} · pad {{ fmt(r.pad_token_id) }}</p>{% endif %}
{% if r.call_config %}<h2 id="call-config">{{ r.call_config_heading }}</h2><table>{% for key, value in r.call_config.items() %}
<tr><th>{{ key }}</th><td class="mono">{{ fmt(value) }}</td></tr>{% endfor %}</table>{% endif %}

<h2 id="stops">Why each row stopped</h2>
{% if r.sequences %}<table><tr><th>row</th><th>stop reason</th><th>{{ r.unit }}s</th><th>last id</th><th>EOS at</th><th>evidence</th><th>last {{ "tokens decoded" if r.ids_are_tokens else "ids" }}</th></tr>
{% for s in r.sequences %}<tr><td>{{ s.index }}</td><td class="stop-reason {{ 'PASS' if s.reason in ('eos', 'completed', 'stop_string') else 'FAIL' if s.reason in ('exception', 'unknown') else 'WARN' }}">{{ s.reason }}</td>
<td>{{ s.generated }}{% if s.steps_planned is not none %}/{{ s.steps_planned }}{% endif %}</td><td class="mono">{{ fmt(s.last_token_id) }}</td>
<td class="mono">{{ fmt(s.eos_positions|list) if s.eos_positions else "—" }}</td>
<td class="mono">{% if s.exception %}<b>{{ s.exception }}</b><br>{% endif %}{% if s.fired %}fired {{ s.fired|join(", ") }}<br>{% endif %}{% for k, val in evidence_items(s.evidence) %}{{ k }}={{ fmt(val) }}<br>{% endfor %}</td>
<td><pre>{{ s.last_text if s.last_text is not none else tokens(s.last_tokens) }}</pre><span class="mono">{{ tokens(s.last_tokens) }}</span></td></tr>{% endfor %}</table>
{% else %}<p class="empty">No stop record (the run has not ended, or its writer was killed).</p>{% endif %}
{% if not r.sequences and r.last_progress_ids %}<p>Last ids in progress.ndjson (row 0): <span class="mono">{{ tokens(r.last_progress_ids) }}</span></p>
{% if r.last_progress_text is not none %}<pre>{{ r.last_progress_text }}</pre>{% endif %}{% endif %}

{% if page.coverage %}<h2 id="coverage">Input coverage</h2><table><tr><th>input</th><th>output</th><th>covered</th><th>basis</th></tr>
{% for c in page.coverage %}<tr><td>{{ c.input }}</td><td>{{ c.covered }}</td><td>{{ pct(c.fraction) }}</td><td>{{ c.basis }}</td></tr>{% endfor %}</table>{% endif %}

{% if page.output_texts %}<h2 id="outputs">Output text</h2>{% for name, text in page.output_texts %}<p class="mono">{{ name }}</p><pre class="output">{{ text }}</pre>{% endfor %}{% endif %}

<h2 id="checks">Verify checks</h2>
<table><tr><th>status</th><th>check</th><th>message</th><th>evidence</th></tr>
{% for f in v.findings %}<tr class="finding finding-{{ f.status }}"><td class="{{ f.status }}">{{ f.status }}</td><td class="mono">{{ f.name }}</td><td>{{ f.message }}</td>
<td>{% if f.evidence %}<details><summary>{{ f.evidence|length }} fact(s)</summary><pre>{{ json(f.evidence) }}</pre></details>{% endif %}</td></tr>{% endfor %}</table>

<h2 id="charts">Throughput and memory over time</h2>
<p>{{ r.progress_records }} progress records{% if page.rows %}, {{ page.rows }} row(s) decoded in parallel{% endif %}.
{% if (page.rows or 1) > 1 %}Per-row rates count the furthest row; the summed rate is per-row × rows.{% endif %}</p>
{% for chart in charts %}{{ chart }}{% endfor %}

<h2 id="timings">Timings</h2>
<table><tr><th>load</th><th>first {{ r.unit }}</th><th>{{ after_first(r.unit) }}</th><th>total</th><th>rate</th></tr>
<tr><td>{{ secs(r.timings.load_s) }}</td><td>{{ secs(r.timings.first_token_s) }}</td><td>{{ secs(r.timings.decode_s) }}</td><td>{{ secs(r.timings.total_s) }}</td>
<td>{{ rate(r.timings.units_per_s) }} {{ r.unit }}s/s</td></tr></table>
{% if r.timings.phases %}<p>Where the total went (the phases sum to it): {{ describe_timings(r.timings, r.unit) }}.</p>{% endif %}
{% if r.stages %}<h2 id="stages">Stages</h2>
<table><tr><th>stage</th><th>units</th><th>rows</th><th>read from source</th><th>time</th><th>peak RSS</th></tr>
<tr><td>load</td><td></td><td></td><td></td><td>{{ secs(r.timings.load_s) }}</td><td></td></tr>
{% for s in r.stages %}<tr><td class="mono">{{ s.name }}</td><td>{{ s.units }} {{ s.unit }}s</td><td>{{ s.rows }}</td><td>{{ fmt(s.consumed) }}</td>
<td>{{ secs(s.seconds) }}</td><td>{{ fmt(s.rss_peak_bytes) }}</td></tr>{% endfor %}</table>{% endif %}

<h2 id="budget">Budget vs actual</h2>
<table>{% for key, value in budget_rows(r.budget).items() %}<tr><th>{{ key }}</th><td class="mono">{{ fmt(value, key) }}</td></tr>{% endfor %}</table>
<p class="empty">Snapshot directory: <span class="mono">{{ r.snapshot }}</span></p>
{% endblock %}
"""

_INDEX = """{% extends "base" %}{% block title %}genrun store · {{ index.store }}{% endblock %}
{% block body %}<h1>genrun store · <span class="mono">{{ index.store }}</span></h1>
{% if index.total is none %}<p>{{ index.snapshots|length }} snapshot(s)</p>
{% else %}<p>{{ index.total }} snapshot(s); this page: {{ index.first }}–{{ index.first + index.snapshots|length - 1 }}</p>{% endif %}
{% if index.note %}<p class="note">{{ index.note }}</p>{% endif %}
{% macro nav() %}{% if index.pages %}<nav class="pages">pages: {% for label, href in index.pages %}{% if loop.index == index.page %}<b>{{ label }}</b>
{% else %}<a href="{{ href }}">{{ label }}</a>{% endif %} {% endfor %}</nav>{% endif %}{% endmacro %}
{{ nav() }}
<table><tr><th>snapshot</th><th>state</th><th>sealed</th><th>stop reasons</th><th>WARN</th><th>FAIL</th><th>sign-offs</th></tr>
{{ rows }}</table>
{{ nav() }}
{% endblock %}
"""

_ENV = jinja2.Environment(loader=jinja2.DictLoader({"base": _BASE, "review": _REVIEW, "index": _INDEX}), autoescape=True,
                          undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def render_review_html(page: ReviewPage) -> str:
    """The whole review page as one HTML document."""
    from .verify import summary_line

    drawn = [render_chart(chart) for chart in charts(page)]
    return _ENV.get_template("review").render(page=page, css=Markup(CSS), charts=drawn, summary=summary_line(page.verification.summary),
                                              **_HELPERS)


def render_index_html(index: StoreIndex) -> str:
    """The store's index page."""
    return _ENV.get_template("index").render(index=index, css=Markup(CSS), rows=_index_rows(index.snapshots))


def _index_rows(lines: Sequence[IndexLine]) -> Markup:
    """The index table's rows, every value escaped (`_escaped`). Built here rather than in the template: a store's
    100,000 rows through jinja took seconds; these f-strings take a fraction of that."""
    out = []
    for s in lines:
        ident = _escaped(s.id)
        linked = f'<a href="{_escaped(s.href)}">{ident}</a>' if s.href else ident
        state = _escaped(s.state)
        shown = f'<td class="sweep {state}">sweep {state} ({_escaped(s.sweep_items)})</td>' if s.sweep_items else f'<td class="{state}">{state}</td>'
        out.append(f'<tr class="snapshot"><td class="mono">{"└ " if s.sweep else ""}{linked}</td>\n{shown}<td>{"yes" if s.sealed else "no"}</td>\n'
                   f'<td>{_escaped(", ".join(s.stop_reasons)) or "—"}</td>{_verify_cells(s)}<td>{_escaped(s.signoffs)}</td></tr>')
    return Markup("".join(out))


def _verify_cells(s: IndexLine) -> str:
    """The WARN and FAIL cells; one FAIL cell saying why, and the fix, when the snapshot's review page could not be made."""
    if s.page_error is not None:
        return f'<td colspan="2" class="FAIL page-error">{_escaped(s.page_error)}</td>\n'
    return (f'<td class="{"WARN" if s.warnings else ""}">{"—" if s.warnings is None else s.warnings}</td>\n'
            f'<td class="{"FAIL" if s.failed else ""}">{"—" if s.failed is None else s.failed}</td>')


_MARKUP = re.compile(r"[&<>\"']")
"""What `html.escape` replaces (with quote=True)."""


def _escaped(text: str) -> str:
    """`html.escape(text)`, returning a text with nothing to escape as it is: most cells (ids, states) have nothing, and
    500,000 `escape` calls (five replaces each) were a fifth of the store page at 100,000 snapshots."""
    return escape(text) if _MARKUP.search(text) else text


def _fmt(value: Any, key: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and key.endswith("bytes"):
        return f"{value:,} B ({value / 2**20:,.1f} MiB)"
    if isinstance(value, float):
        return f"{value:.1%}" if key.endswith("fraction") else f"{value:g}"
    if isinstance(value, (dict, list, tuple)):
        return _json(value)
    return str(value)


def _json(value: Any) -> str:
    import orjson

    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def _tokens(tokens: Any) -> str:
    return " ".join(f"{t.id}" + (f"({t.token})" if t.token is not None else "") for t in tokens)


def _budget_rows(budget: Any) -> dict[str, Any]:
    """The plan-time estimate (`token-budget.json`) followed by what happened, as one flat table."""
    planned = budget.plan.model_dump(mode="json", exclude_none=True) if budget.plan is not None else {}
    return {**planned, **budget.model_dump(mode="json", exclude={"plan"}, exclude_none=True)}


def _evidence_items(evidence: Any) -> list[tuple[str, Any]]:
    """A stop record's typed evidence as key/value rows (its `reason` tag is the row's reason already)."""
    if evidence is None:
        return []
    return list(evidence.model_dump(mode="json", exclude_none=True, exclude={"reason"}).items())


def _identity_rows(report: Any) -> list[tuple[str, Any]]:
    """The snapshot's identity, below the request's rows: the dtype and device the run used only where they say more
    than the request's (`auto` resolved), and then named so; the page listed both twice."""
    asked = report.request.model_dump(mode="json") if report.request is not None else {}
    rows = []
    for key, value in report.identity.model_dump(mode="json", exclude_none=True).items():
        if key in ("dtype", "device"):
            if str(value).removeprefix("torch.") == asked.get(key):
                continue
            key = f"{key} as run"
        rows.append((key, value))
    return rows


_HELPERS = {
    "identity_rows": _identity_rows,
    "describe_timings": describe_timings,
    "after_first": after_first,
    "budget_rows": _budget_rows,
    "evidence_items": _evidence_items,
    "fmt": _fmt,
    "json": _json,
    "tokens": _tokens,
    "pct": lambda f: "—" if f is None else f"{f:.1%}",
    "secs": lambda s: "—" if s is None else f"{s:.3f} s",
    "rate": lambda r: "—" if r is None else f"{r:,.1f}",
}
