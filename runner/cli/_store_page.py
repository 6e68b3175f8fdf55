"""`genrun report --store DIR --html FILE`: the store's index pages, from the same listing as `genrun ls`.

A store of 100,000 snapshots is split into pages of `PAGE_SIZE` lines (FILE, then `<stem>-2.html`, ... beside it),
each linking to every page. Every snapshot links to its review page in `<stem>.pages/` when one is there (written by
`--pages`), else to its directory. The index itself never verifies (that reads and hashes every file of every
snapshot); `--pages` writes each snapshot's review page, which verifies it, and the index then shows its WARN/FAIL counts.
Every row is checked against its seal (the listing of `genrun ls --limit 0`); the page lists, `verify` proves.
"""

import os
import shutil
import tempfile
from pathlib import Path
from typing import NamedTuple

from genrun.runner.listing import REASON_SEPARATOR, SWEEP_STATE, SnapshotRow, list_store

from ._output import print_note

PAGE_SIZE = 1000
"""Lines per index page: a page stays a few hundred kB whatever the store holds."""


class Written(NamedTuple):
    index_pages: list[Path]
    review_pages: int
    snapshots: int
    page_errors: int
    """Snapshots whose review page could not be made (each an entry on the index saying why)."""


class _Reviews(NamedTuple):
    counts: dict[str, tuple[int, int]]
    """(warnings, failed) of each snapshot whose review page was written, by id."""
    errors: dict[str, str]
    """Why a snapshot's review page could not be made, and the fix, by id."""


def page_file(html: Path, number: int) -> Path:
    """Page 1 is FILE itself; page n is `<stem>-n<suffix>` beside it."""
    return html if number == 1 else html.with_name(f"{html.stem}-{number}{html.suffix or '.html'}")


def review_dir(html: Path) -> Path:
    return html.with_name(f"{html.stem}.pages")


def write_store_pages(store: Path, html: Path, allowed_signers: Path | None, *, reviews: bool) -> Written:
    """Write the index pages (and with `reviews`, every snapshot's review page first); `HtmlReportError` where it cannot.

    The review pages are written into a temporary folder beside FILE and renamed to `<stem>.pages/` only once every one
    is written, and the index pages are rendered before any is written: an interrupted or failed run leaves the previous
    site (or none), never a half-written one. A snapshot whose page fails is an entry saying why, never the end of the site.
    """
    from genrun.analysis.html_report import check_target

    check_target(html)  # before listing 100,000 snapshots, not after
    pages_dir = review_dir(html)
    listing = list_store(store, allowed_signers, progress=print_note)
    for note in listing.notes:
        print_note(note)
    snapshot_dirs = _snapshot_holding(html, store, {row.id for row in listing.rows})
    check_target(html, snapshot_dirs)  # before the review pages are written beside FILE
    if not reviews:  # the review pages an earlier --pages left (one listing, not 100,000 stats)
        reviewed = set(os.listdir(pages_dir)) if pages_dir.is_dir() else set()
        return Written(_write_index(html, _index_pages(store, html, listing.rows, reviewed, None), snapshot_dirs), 0, len(listing.rows), 0)
    staged = Path(tempfile.mkdtemp(prefix=f".{pages_dir.name}.", dir=html.parent))
    try:
        outcome = _write_reviews(listing.rows, store, staged, allowed_signers)
        rendered = _index_pages(store, html, listing.rows, {f"{i}.html" for i in outcome.counts}, outcome)  # the pages just written
        _publish(staged, pages_dir)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    written = _write_index(html, rendered, snapshot_dirs)
    for ident, error in outcome.errors.items():
        print_note(f"{ident}: {error}")
    return Written(written, len(outcome.counts), len(listing.rows), len(outcome.errors))


def _write_index(html: Path, rendered: list[str], snapshot_dirs: list[Path]) -> list[Path]:
    from genrun.analysis.html_report import write_html

    return [write_html(text, page_file(html, number), forbidden_roots=snapshot_dirs) for number, text in enumerate(rendered, start=1)]


_UNVERIFIED = "WARN/FAIL: not verified here (that reads every file); 'genrun verify ID', or add --pages to verify each and write its review page"


def _index_pages(store: Path, html: Path, rows: list[SnapshotRow], reviewed: set[str], outcome: _Reviews | None) -> list[str]:
    """Each index page (`PAGE_SIZE` rows; one empty page for an empty store), rendered only: the caller writes them once
    all are rendered. A row links to its review page where `reviewed` holds its `<id>.html`, else to its directory;
    `outcome`: the review pages written now (--pages), each one's WARN/FAIL counts or why it could not be made (None:
    not verified)."""
    from genrun.analysis import render_index_html
    from genrun.analysis.html_report import IndexLine, StoreIndex

    here = html.parent.resolve()
    to_store, to_pages = (os.path.relpath(path.resolve(), here) for path in (store, review_dir(html)))
    counts, errors = outcome or _Reviews({}, {})
    total = len(rows)
    starts = range(0, max(total, 1), PAGE_SIZE)
    labels = tuple((f"{start + 1}–{min(start + PAGE_SIZE, total)}", page_file(html, n).name) for n, start in enumerate(starts, start=1))
    pages = []
    for number, start in enumerate(starts, start=1):
        lines = []
        for row in rows[start:start + PAGE_SIZE]:
            warnings, failed = counts.get(row.id, (None, None))
            items = _sweep_items(row)
            lines.append(IndexLine(id=row.id, state=row.state.removeprefix(f"{SWEEP_STATE} ") if items else row.state, sealed=row.sealed,
                                   stop_reasons=() if items or row.stop_reasons == "-" else tuple(row.stop_reasons.split(REASON_SEPARATOR)),
                                   warnings=warnings, failed=failed,
                                   signoffs=row.signoffs if row.signoffs != "-" else "no sign-offs",
                                   href=f"{to_pages}/{row.id}.html" if f"{row.id}.html" in reviewed else f"{to_store}/{row.id}/",
                                   sweep=row.sweep, sweep_items=items, page_error=errors.get(row.id)))
        pages.append(render_index_html(StoreIndex(store=str(store), snapshots=tuple(lines), total=total if len(starts) > 1 else None,
                                                  first=start + 1, pages=labels if len(starts) > 1 else (), page=number,
                                                  note=None if outcome is not None else _UNVERIFIED)))
    return pages


def _snapshot_holding(html: Path, store: Path, ids: set[str]) -> list[Path]:
    """The snapshot `html` would be written into, if any (for write_html's refusal): one check, not one per snapshot."""
    try:
        inside = html.resolve().relative_to(store.resolve()).parts
    except ValueError:
        return []
    return [store / inside[0]] if inside and inside[0] in ids else []


def _sweep_items(row: SnapshotRow) -> str | None:
    """A sweep's row shows its items per status (`5 items: 1 failed, 4 succeeded`); `None` for a run's row."""
    if row.members is None:
        return None
    counts = [part.split(" ", 1) for part in row.stop_reasons.split(REASON_SEPARATOR)]
    if not all(len(c) == 2 and c[0].isdigit() for c in counts):
        return row.stop_reasons  # unsealed: the listing says how many items were planned
    return f"{sum(int(n) for n, _ in counts)} items: {row.stop_reasons}"


def _write_reviews(rows: list[SnapshotRow], store: Path, pages_dir: Path, allowed_signers: Path | None) -> _Reviews:
    """Each snapshot's review page (verifying it) into `pages_dir` (a fresh folder, never inside a snapshot)."""
    from genrun.analysis import SnapshotNotFound, render_review_html
    from genrun.analysis.html_report import review_snapshot, write_html

    outcome = _Reviews({}, {})
    for row in rows:
        if row.members is not None:  # a sweep: `genrun verify SWEEP` judges its items
            continue
        try:
            page = review_snapshot(store / row.id, allowed_signers)
            text = render_review_html(page)
        except SnapshotNotFound:  # removed while the pages were written
            continue
        except Exception as exc:  # noqa: BLE001 - one snapshot that cannot be shown costs its own page, never the others'
            outcome.errors[row.id] = (f"review page not written ({type(exc).__name__}: {exc}); "
                                      f"run 'genrun verify {row.id}' to see what is wrong with it")
            continue
        write_html(text, pages_dir / f"{row.id}.html")  # a failed write (disk full) stops the site: nothing is published
        outcome.counts[row.id] = (page.verification.summary.warnings, page.verification.summary.failed)
    return outcome


def _publish(staged: Path, pages_dir: Path) -> None:
    """Put the complete new review pages where the index links them, replacing the previous ones by renames."""
    staged.chmod(0o755)  # mkdtemp makes it private; the pages are for readers of the site
    if not pages_dir.exists():
        os.rename(staged, pages_dir)
        return
    retired = Path(tempfile.mkdtemp(prefix=f".{pages_dir.name}.old.", dir=pages_dir.parent))
    os.rename(pages_dir, retired / pages_dir.name)
    os.rename(staged, pages_dir)
    shutil.rmtree(retired, ignore_errors=True)
