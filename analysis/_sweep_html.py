"""`genrun report SWEEP --html FILE`: a sweep's review page (its checks, counts, items needing attention, its own sign-offs).

A sweep is not a run: it has no request, no token stream and no result.json, so the run review
page would show it as a failed run. This page shows what `genrun verify SWEEP` shows, and offers
the sign-off that applies to the sweep itself (accept/reject bind the sweep's manifest, which
records every item's snapshot digest).
"""

import shlex
from pathlib import Path

import jinja2
from markupsafe import Markup

from genrun.schemas import layout

from ._check_integrity import PLANNED
from ._html_template import CSS
from .signoffs import SignoffStatus, evaluate_signoffs
from .sweep import SweepVerification, sweep_summary_line

_SWEEP = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>genrun sweep · {{ v.sweep_id }}</title><style>{{ css }}</style></head><body>
<h1>genrun sweep · <span class="mono">{{ v.sweep_id }}</span></h1>
<p class="headline {{ verdict }}" id="headline">sweep {{ v.status }}: {{ counts }}</p>
<p>verify: <span class="{{ verdict }}" id="verify-summary">{{ summary }}</span></p>

<h2 id="signoff">Sign-off of the sweep</h2>
<p>{{ note }}</p>
{% for command in commands %}<pre class="command">{{ command }}</pre>{% endfor %}
{% if signoffs %}<table><tr><th>record</th><th>decision</th><th>by</th><th>binds</th><th>at</th><th>state</th><th>why</th></tr>
{% for s in signoffs %}<tr><td class="mono">{{ s.file }}</td><td>{{ s.decision or "—" }}</td><td>{{ s.by or "—" }}</td>
<td class="mono">{{ s.digest_kind or "" }} {{ (s.digest or "")[:16] }}</td><td>{{ s.at or "—" }}</td><td class="{{ s.state }}">{{ s.state }}</td>
<td>{{ s.reason }}</td></tr>{% endfor %}</table>{% else %}<p class="empty">No sign-offs of the sweep yet.</p>{% endif %}

<h2 id="checks">Sweep checks</h2>
<table><tr><th>check</th><th>status</th><th>finding</th></tr>
{% for f in v.findings %}<tr><td class="mono">{{ f.name }}</td><td class="{{ f.status }}">{{ f.status }}</td><td>{{ f.message }}</td></tr>{% endfor %}</table>

<h2 id="items">Items ({{ v.distribution.items }})</h2>
<table><tr><th>by</th><th>value</th><th>items</th></tr>
{% for label, mapping in groups %}{% for key, n in mapping %}<tr><td>{{ label }}</td><td class="{{ key }}">{{ key }}</td><td>{{ n }}</td></tr>{% endfor %}{% endfor %}</table>
{% if attention %}<h3>Items needing attention</h3>
<table><tr><th>item</th><th>status</th><th>stop</th><th>units</th><th>WARN</th><th>FAIL</th><th>snapshot</th></tr>
{% for i in attention %}<tr class="item"><td>{{ i.index }}</td><td class="{{ i.status }}">{{ i.status }}</td><td>{{ i.stop_reasons|join(", ") or "—" }}</td>
<td>{{ "—" if i.generated is none else i.generated }}</td><td>{{ i.warnings|join(", ") or "—" }}</td><td>{{ i.failures|join(", ") or "—" }}</td>
<td class="mono">{{ i.snapshot_id or "—" }}</td></tr>{% endfor %}</table>
<p class="empty">Review an item with <span class="mono">genrun report ITEM --html FILE</span>.</p>
{% else %}<p class="empty">Every item succeeded with no WARN or FAIL.</p>{% endif %}
<p class="empty">Sweep directory: <span class="mono">{{ v.sweep }}</span></p>
</body></html>
"""

_ENV = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def render_sweep_html(v: SweepVerification, allowed_signers: Path | None = None) -> str:
    """The sweep's review page as one HTML document."""
    d = v.distribution
    failed = any(f.status == "FAIL" for f in v.findings) or any(i.failures for i in v.items)
    warned = any(f.status == "WARN" for f in v.findings) or any(i.warnings for i in v.items) or d.statuses.keys() - {"succeeded"}
    commands, note = sweep_signoff_commands(Path(v.sweep), planned=v.status == "planned")
    groups = [(label, sorted(mapping.items(), key=lambda kv: (-kv[1], kv[0])))
              for label, mapping in (("status", d.statuses), ("stop reason", d.stop_reasons), ("WARN check", d.warn_checks),
                                     ("FAIL check", d.fail_checks))]
    signoffs: list[SignoffStatus] = evaluate_signoffs(Path(v.sweep), allowed_signers)
    return _ENV.from_string(_SWEEP).render(
        v=v, css=Markup(CSS), verdict="FAIL" if failed else "WARN" if warned else "PASS", summary=sweep_summary_line(v),
        counts=", ".join(f"{n} {s}" for s, n in sorted(d.statuses.items())), commands=commands, note=note, signoffs=signoffs,
        groups=groups, attention=[i for i in v.items if i.failures or i.warnings or i.status != "succeeded"])


def sweep_signoff_commands(sweep: Path, *, planned: bool = False) -> tuple[tuple[str, ...], str]:
    """accept/reject once the sweep is sealed (they bind its manifest); nothing before."""
    if planned:
        return (), f"{PLANNED}: run it with 'genrun sweep execute {sweep}'; once sealed, accept and reject apply"
    if not (sweep / layout.MANIFEST).is_file():
        return (), "not sealed (the sweep is still running, or its driver was killed): finish it with 'genrun sweep resume' first"
    commands = tuple(shlex.join(["genrun", "signoff", str(sweep), "--decision", d]) for d in ("accept", "reject"))
    return commands, ("sealed: accept and reject bind the sweep's manifest, which records every item's snapshot digest; "
                      "add --key PATH to sign with SSH")
