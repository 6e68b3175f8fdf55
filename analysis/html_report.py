"""`genrun report --html`: one self-contained review page per snapshot, and an index page per store.

The page is what an owner reads before `genrun signoff`: the report (request, limits and their
sources, stop reason per row with evidence and last tokens), input coverage, verify's findings,
throughput and memory charts, timings, budget vs actual, sign-offs with their validity, the
digests, and the exact sign-off command. Inline CSS and SVG only: no script, no network.

Built from analysis' public results (`build_report`, `verify_loaded`, `evaluate_signoffs`), so the
page never disagrees with `genrun report` / `genrun verify`. Every value is escaped by jinja2's
autoescape (`_html_template`); charts are built by `_svg`. Torch-free like the rest of analysis.
"""

import os
import shlex
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, SkipValidation

from genrun.schemas import layout

from ._load import Snapshot, read_snapshot
from ._svg import Chart, Series
from ._rows import decoded_id_lists
from ._tokenizer import DecoderUnavailable, load_decoder
from .report import Report, build_report
from .signoffs import DIGEST_KIND_OF, SignoffStatus, evaluate_signoffs
from .sweep import is_sweep_dir, verify_sweep
from .verify import Verification, verify_loaded

OUTPUT_TEXT_SHOWN = 4000  # characters of each outputs/*.txt shown on the page
MiB = 2**20


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class CoverageLine(_Model):
    """How much of one input the run covered, and on what basis."""

    input: str
    """What was given (a prompt, `input_seconds`, a requested duration)."""
    covered: str
    """What came out for it."""
    fraction: float | None
    """covered / expected when both are numbers (0.449 for a transcription cut by a hidden cap)."""
    basis: str
    """How `expected` was obtained."""


class ReviewPage(_Model):
    """Everything the review page shows for one snapshot (also usable as JSON)."""

    report: Report
    verification: Verification
    signoffs: tuple[SignoffStatus, ...]
    plan_digest: str | None
    """sha256 of frozen-sha256.txt (what `approve` binds)."""
    snapshot_digest: str | None
    """sha256 of manifest-sha256.txt (what `accept`/`reject` bind); None until sealed."""
    signoff_commands: tuple[str, ...]
    """The exact `genrun signoff` command lines that apply to this snapshot now."""
    signoff_note: str
    """Why those commands (or why none applies yet)."""
    rows: int | None
    """Rows decoded in parallel (from the start record), for per-row vs summed rates."""
    inputs: tuple[str, ...]
    """Every prompt or message in full (the report keeps a short form)."""
    coverage: tuple[CoverageLine, ...]
    output_texts: tuple[tuple[str, str], ...]
    """(file, first characters) of each outputs/*.txt."""


class IndexLine(NamedTuple):
    """One snapshot of a store on the index page. A named tuple, not a model: a store's page builds 100,000 of them from
    listing rows genrun made, and validating each cost a second of the page at 100,000 snapshots."""

    id: str
    state: str
    """planned, incomplete, succeeded, failed, interrupted."""
    sealed: bool
    stop_reasons: tuple[str, ...]
    warnings: int | None
    """WARN findings of verify; None when the page was made without verifying (without --pages)."""
    failed: int | None
    signoffs: str
    """`summarize_signoffs` of the records, or `no sign-offs`."""
    href: str | None = None
    """Link to the snapshot's review page, or to its directory when no review page was written; relative to the index page."""
    sweep: str | None = None
    """The sweep this item belongs to (listed right under it)."""
    sweep_items: str | None = None
    """For a sweep: its items per status (`6 items: 5 succeeded, 1 failed`); None for a run snapshot."""
    page_error: str | None = None
    """Why this snapshot's review page could not be made, with the fix; None when it was (or none was asked for)."""


class StoreIndex(_Model):
    """One page of the index of a store (a store of any size is split into pages of at most `PAGE_SIZE` lines)."""

    store: str
    snapshots: SkipValidation[tuple[IndexLine, ...]]
    """The page's lines (not validated again: see `IndexLine`)."""
    total: int | None = None
    """Snapshots in the store (all pages); None: this page holds them all."""
    first: int = 1
    """Position in the store of this page's first line (1-based)."""
    pages: tuple[tuple[str, str], ...] = ()
    """(label, file name) of every page, for the page links; empty for a single page."""
    page: int = 1
    note: str | None = None
    """What the page leaves out (e.g. verify counts) and how to get it."""


class HtmlReportError(ValueError):
    """The page cannot be written where asked."""


def review_snapshot(path: str | Path, allowed_signers: Path | None = None) -> ReviewPage:
    """Load the snapshot once (hashing files, as verify does) and gather everything the page shows."""
    snap = read_snapshot(path, hash_files=True)
    has_ids = snap.token_ids is not None or snap.progress is not None
    decoder = load_decoder(snap.model, decoded_id_lists(snap)) if has_ids and snap.declares("token_ids") else DecoderUnavailable("no ids")
    report = build_report(snap, decoder)
    verification = verify_loaded(snap, allowed_signers)
    statuses = evaluate_signoffs(snap.path, allowed_signers)
    commands, note = signoff_commands(snap)
    start = next((e for e in snap.progress.events if e.event == "start"), None) if snap.progress else None
    return ReviewPage(
        report=report, verification=verification, signoffs=tuple(statuses), plan_digest=snap.plan_digest,
        snapshot_digest=snap.snapshot_digest, signoff_commands=commands, signoff_note=note,
        rows=getattr(start, "rows", None), inputs=_inputs(snap), coverage=tuple(input_coverage(snap, report)),
        output_texts=tuple((name, data.decode("utf-8", errors="replace")[:OUTPUT_TEXT_SHOWN]) for name, data in snap.outputs.items()),
    )


def signoff_commands(snap: Snapshot) -> tuple[tuple[str, ...], str]:
    """The sign-off commands that apply now: `approve` before a run, `accept`/`reject` once sealed."""
    def command(decision: str) -> str:
        return shlex.join(["genrun", "signoff", str(snap.path), "--decision", decision])

    if snap.is_sealed:
        return (command("accept"), command("reject")), (
            f"sealed: accept and reject bind the {DIGEST_KIND_OF['accept']} digest shown above; add --key PATH to sign with SSH")
    if snap.result is None and snap.progress is None:
        return (command("approve"),), "planned, not executed: approve binds the plan digest; add --key PATH to sign with SSH"
    return (), "not sealed (the run is still going, or its writer was killed): nothing can be accepted until it is sealed"


def input_coverage(snap: Snapshot, report: Report) -> list[CoverageLine]:
    """Per input, what came out: rows per prompt, produced vs requested duration, output vs the input-seconds estimate."""
    lines: list[CoverageLine] = []
    request = snap.request
    if request is None:
        return lines
    stops = {s.index: s for s in report.sequences}
    texts = request.input.texts() or (("(conversation)",) if request.input.messages else ())
    for i, text in enumerate(texts):
        stop = stops.get(i)
        covered = f"row {i}: {stop.generated} {report.unit}s, stopped by {stop.reason}" if stop else f"row {i}: no stop record"
        lines.append(CoverageLine(input=_cut(text, 120), covered=covered, fraction=None, basis="one row per prompt"))
    generated = report.budget.generated_max
    domain = snap.budget.domain if snap.budget is not None else None
    if domain is not None and domain.input_seconds is not None and domain.observed_units and generated is not None:
        lines.append(CoverageLine(
            input=f"{domain.input_seconds:g} s of input media", covered=f"{generated:,} {report.unit}s",
            fraction=generated / domain.observed_units,
            basis=f"expected {domain.observed_units:,} {report.unit}s = input_seconds × units_per_input_second ([budget])"))
    if snap.result is not None and snap.result.requested_seconds and snap.result.produced_seconds is not None:
        lines.append(CoverageLine(
            input=f"{snap.result.requested_seconds:g} s requested", covered=f"{snap.result.produced_seconds:g} s produced",
            fraction=snap.result.produced_seconds / snap.result.requested_seconds, basis="result.json produced_seconds / requested_seconds"))
    return lines


def charts(page: ReviewPage) -> list[Chart]:
    """Throughput (per row and summed over rows) and memory over time, from the progress records."""
    samples = page.report.samples
    unit = page.report.unit
    rows = page.rows or 1
    window = [(s.t, s.window_units_per_s) for s in samples if s.window_units_per_s is not None]
    cumulative = [(s.t, s.units_per_s) for s in samples if s.units_per_s is not None]
    rate = [Series(f"{unit}s/s per row, window since previous record", window),
            Series(f"{unit}s/s per row, cumulative since first {unit}", cumulative, dashed=True)]
    if rows > 1:  # rows decode in lockstep, so the summed rate is the per-row rate times the rows
        rate.append(Series(f"{unit}s/s summed over {rows} rows, window", [(t, r * rows) for t, r in window]))
        rate.append(Series(f"{unit}s/s summed over {rows} rows, cumulative", [(t, r * rows) for t, r in cumulative], dashed=True))
    memory = [Series("RSS (process resident memory)", [(s.t, s.rss_bytes / MiB) for s in samples if s.rss_bytes is not None]),
              Series("CUDA allocated", [(s.t, s.cuda_allocated_bytes / MiB) for s in samples if s.cuda_allocated_bytes is not None]),
              Series("CUDA reserved", [(s.t, s.cuda_reserved_bytes / MiB) for s in samples if s.cuda_reserved_bytes is not None],
                     dashed=True)]
    generated = [Series(f"{unit}s generated (furthest row)", [(s.t, float(s.generated)) for s in samples])]
    seconds = "time since the run started (s)"
    span = recorded_span(page)
    return [Chart(f"Throughput ({unit}s per second)", seconds, f"{unit}s/s", rate, span),
            Chart("Memory", seconds, "MiB", memory, span),
            Chart(f"Progress ({unit}s)", seconds, f"{unit}s", generated, span)]


def recorded_span(page: ReviewPage) -> tuple[float, float] | None:
    """The charts' x axis: first to last progress record, seconds since execution began. A single record (a rate known
    at one instant only) spans from the start of execution to it, so the axis never runs past the run's end."""
    times = [s.t for s in page.report.samples]
    if not times:
        return None
    first, last = min(times), max(times)
    return (first, last) if first < last else (0.0, last) if last > 0 else None


def store_index(store: Path, snapshots: Sequence[Path], allowed_signers: Path | None = None) -> StoreIndex:
    """One line per snapshot: state, stop reasons, WARN/FAIL counts from verify, sign-off state (a sweep: items that warned / failed)."""
    from .signoffs import summarize_signoffs

    lines = []
    for path in snapshots:
        if is_sweep_dir(path):
            lines.append(_sweep_line(path, allowed_signers))
            continue
        snap = read_snapshot(path, hash_files=True)
        verification = verify_loaded(snap, allowed_signers)
        state = layout.shown_status(snap.state, snap.result.status if snap.result else None)
        reasons = tuple(sorted({s.reason for s in snap.stop.sequences})) if snap.stop else ()
        lines.append(IndexLine(id=snap.id, state=state, sealed=snap.is_sealed, stop_reasons=reasons,
                               warnings=verification.summary.warnings, failed=verification.summary.failed,
                               signoffs=summarize_signoffs(evaluate_signoffs(snap.path, allowed_signers))))
    return StoreIndex(store=str(store), snapshots=tuple(lines))


def _sweep_line(path: Path, allowed_signers: Path | None) -> IndexLine:
    """A sweep as a sweep: its own status, its items' stop reasons, how many items warned or failed."""
    from .signoffs import summarize_signoffs

    v = verify_sweep(path, allowed_signers, jobs=1)
    d = v.distribution
    failed = sum(f.status == "FAIL" for f in v.findings) + sum(1 for i in v.items if i.failures)
    warned = sum(f.status == "WARN" for f in v.findings) + sum(1 for i in v.items if i.warnings)
    return IndexLine(id=v.sweep_id, state=v.status, sealed=(Path(path) / layout.MANIFEST).is_file(), stop_reasons=tuple(sorted(d.stop_reasons)),
                     warnings=warned, failed=failed, signoffs=summarize_signoffs(evaluate_signoffs(Path(path), allowed_signers)),
                     sweep_items=f"{d.items} items: " + ", ".join(f"{n} {s}" for s, n in sorted(d.statuses.items())))


def write_html(html: str, target: Path, forbidden_roots: Sequence[Path] = ()) -> Path:
    """Write atomically (temporary sibling + rename); refuse a target inside a snapshot (analysis never writes there)."""
    target = Path(target)
    check_target(target, forbidden_roots)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(html)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def check_target(target: Path, snapshots: Sequence[Path] = ()) -> None:
    """`HtmlReportError` when a page cannot be written at `target`: inside one of `snapshots` (analysis never writes into a
    snapshot), a directory, or in a directory that does not exist."""
    resolved = Path(target).resolve()
    for root in snapshots:
        if resolved.is_relative_to(Path(root).resolve()):
            raise HtmlReportError(f"--html {target} is inside the snapshot {root}; analysis never writes into a snapshot: choose a path outside it")
    if target.is_dir():
        raise HtmlReportError(f"--html {target} is a directory; give a file name such as {target / 'report.html'}")
    if not target.parent.is_dir():
        raise HtmlReportError(f"--html {target}: directory {target.parent} does not exist; create it first")


def _inputs(snap: Snapshot) -> tuple[str, ...]:
    request = snap.request
    if request is None:
        return ()
    if request.input.messages:
        return tuple(f"{m.role}: {m.content}" for m in request.input.messages)
    return request.input.texts() or ()


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = ["CoverageLine", "HtmlReportError", "IndexLine", "ReviewPage", "StoreIndex", "charts", "input_coverage", "check_target",
           "review_snapshot", "signoff_commands", "store_index", "write_html"]
