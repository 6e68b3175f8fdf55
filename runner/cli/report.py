"""`genrun report SNAPSHOT`: a one-minute post-mortem (why it stopped, limits, timings, budget, last tokens, charts)."""

import argparse
from pathlib import Path

from . import html_report
from ._output import print_json, stderr_console, stdout_console


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="post-mortem summary of a snapshot",
        description="Summarise SNAPSHOT read-only: request, effective limits and their sources, stop reason per sequence "
                    "with evidence, timings, budget vs actual, last tokens decoded, throughput and memory over time.",
        epilog=(
            "example: genrun report snapshots/20261129T101500Z-tiny-3fa2c1 --plot /tmp/tiny.png\n"
            "  succeeded: 13 tokens in 0.41 s; stopped by eos\n"
            "  ...\n"
            "  wrote /tmp/tiny.png\n\n"
            "example: genrun report snapshots/20261129T101500Z-tiny-3fa2c1 --html /tmp/review.html\n"
            "  wrote /tmp/review.html (succeeded: 13 tokens in 0.41 s; stopped by eos; N checks: 0 failed, 1 warnings)\n"
            "example: genrun report --html /tmp/index.html        (the store: --store DIR, else $GENRUN_STORE, else ./snapshots)\n"
            "  wrote /tmp/index.html (12 snapshots)"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("snapshot", metavar="SNAPSHOT", nargs="?",
                        help="snapshot directory, id, or unique id prefix in the store; a sweep (by path or id) is reported as a sweep "
                             "(omit it with --html FILE: an index page of the store)")
    parser.add_argument("--plot", type=Path, metavar="FILE.png",
                        help="also write throughput and memory over time as a PNG (needs matplotlib: pip install 'genrun[plot]', or pip install -e '.[plot]' in a checkout)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON document on stdout")
    html_report.add_arguments(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if args.html is not None:
        return html_report.handle(args)
    from genrun.analysis import PlotError, SnapshotNotFound, render_report, report_snapshot, write_plot
    from genrun.analysis.signoffs import evaluate_signoffs, summarize_signoffs
    from genrun.runner.errors import SnapshotError, UsageError

    if args.snapshot is None:
        raise UsageError("report needs SNAPSHOT (a path, an id or a unique id prefix); "
                         "for an index page of the store use --html FILE (with --store DIR for another store)")

    from ._target import resolve_target
    from .sweep_verify import handle_sweep_report

    path, is_sweep = resolve_target(args.snapshot, args.store)
    if is_sweep:
        return handle_sweep_report(args, path)
    try:
        report = report_snapshot(path)
    except SnapshotNotFound as exc:
        raise SnapshotError(str(exc)) from None
    if args.plot is not None:
        try:
            written = write_plot(report, args.plot)
        except PlotError as exc:
            raise plot_refusal(exc) from None
    if args.json:
        document = report.model_dump(mode="json")
        if args.plot is not None:
            document["plot"] = str(written)
        print_json(document)
    else:
        render_report(report, stdout_console, signoffs=summarize_signoffs(evaluate_signoffs(path, args.allowed_signers)))
    if args.plot is not None:
        stderr_console.print(f"wrote {written}", markup=False, highlight=False, soft_wrap=True)
    return 0


def plot_refusal(exc: Exception) -> Exception:
    """The error `--plot` ends with: a missing matplotlib is a missing extra, exit 2 as a backend's is (the README's
    exit codes); any other plot failure (a target inside the snapshot, a failed write) exit 1."""
    from genrun.analysis._plot import PlotExtraMissing
    from genrun.runner.errors import GenrunError, UsageError

    return UsageError(str(exc)) if isinstance(exc, PlotExtraMissing) else GenrunError(str(exc))
