"""`genrun report SNAPSHOT --html FILE` and `genrun report --store DIR --html FILE`: the review page and the store index.

Kept apart from `report.py` (the terminal report) so each stays small; `report` delegates here
whenever `--html` or `--store` is given.
"""

import argparse
from pathlib import Path

from ._options import add_allowed_signers, add_store
from ._output import stderr_console


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--html`, `--store` and `--allowed-signers` on `genrun report`."""
    parser.add_argument("--html", type=Path, metavar="FILE",
                        help="write one self-contained HTML page (inline CSS and SVG, no scripts, no network) for review before signoff")
    add_store(parser, "the store a snapshot id is looked up in; with --html and no SNAPSHOT: an index page of every snapshot in it")
    add_allowed_signers(parser, "allowed-signers file for judging signed sign-offs")
    parser.add_argument("--pages", action="store_true",
                        help="with --store: also write every snapshot's review page (verifying each: slow on a big store) "
                             "into FILE's <stem>.pages/ and show WARN/FAIL counts on the index")


def handle(args: argparse.Namespace) -> int:
    from genrun.runner.errors import UsageError

    from ._target import resolve_target

    if args.json or args.plot is not None:
        raise UsageError("--html cannot be combined with --json or --plot; run 'genrun report' once per output")
    if args.snapshot is not None:
        path, is_sweep = resolve_target(args.snapshot, args.store)
        if is_sweep:
            return _sweep_page(path, args.html, args.allowed_signers)
        return _review_page(str(path), args.html, args.allowed_signers)
    return _index_page(args.store, args.html, args.allowed_signers, args.pages)


def _review_page(snapshot: str, html: Path, allowed_signers: Path | None) -> int:
    from genrun.analysis import SnapshotNotFound
    from genrun.analysis import render_review_html
    from genrun.analysis.html_report import HtmlReportError, review_snapshot, write_html
    from genrun.runner.errors import GenrunError, SnapshotError

    try:
        page = review_snapshot(snapshot, allowed_signers)
        written = write_html(render_review_html(page), html, forbidden_roots=[Path(snapshot)])
    except SnapshotNotFound as exc:
        raise SnapshotError(str(exc)) from None
    except HtmlReportError as exc:
        raise GenrunError(str(exc)) from None
    summary = page.verification.summary
    stderr_console.print(f"wrote {written} ({page.report.headline}; {summary.checks} checks: {summary.failed} failed, "
                         f"{summary.warnings} warnings)", markup=False, highlight=False, soft_wrap=True)
    return 0


def _sweep_page(sweep: Path, html: Path, allowed_signers: Path | None) -> int:
    from genrun.analysis._sweep_html import render_sweep_html
    from genrun.analysis.html_report import HtmlReportError, write_html
    from genrun.analysis.sweep import sweep_summary_line, verify_sweep
    from genrun.runner.errors import GenrunError

    verification = verify_sweep(sweep, allowed_signers)
    try:
        written = write_html(render_sweep_html(verification, allowed_signers), html, forbidden_roots=[sweep])
    except HtmlReportError as exc:
        raise GenrunError(str(exc)) from None
    stderr_console.print(f"wrote {written} (sweep {verification.status}: {sweep_summary_line(verification)})",
                         markup=False, highlight=False, soft_wrap=True)
    return 0


def _index_page(store: str | None, html: Path, allowed_signers: Path | None, reviews: bool) -> int:
    from genrun.analysis.html_report import HtmlReportError
    from genrun.runner.errors import GenrunError
    from genrun.runner.store import existing_store

    from ._store_page import write_store_pages

    root = existing_store(store)
    try:
        written = write_store_pages(root, html, allowed_signers, reviews=reviews)
    except HtmlReportError as exc:
        raise GenrunError(str(exc)) from None
    pages = f"{len(written.index_pages)} index pages: {written.index_pages[0]} …" if len(written.index_pages) > 1 else str(written.index_pages[0])
    reviewed = f", {written.review_pages} review pages" if reviews else ""
    if written.page_errors:
        reviewed += f", {written.page_errors} could not be made (marked on the index; 'genrun verify ID' says why)"
    stderr_console.print(f"wrote {pages} ({written.snapshots} snapshots{reviewed})", markup=False, highlight=False, soft_wrap=True)
    return 0
