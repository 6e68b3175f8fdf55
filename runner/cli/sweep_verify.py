"""`genrun verify SWEEP` and `genrun report SWEEP`: the distribution over every item, then the totals line."""

import argparse
from pathlib import Path

from rich.table import Table

from ._findings import print_findings
from ._output import print_json, stderr_console, stdout_console


def handle_sweep(args: argparse.Namespace, sweep: Path) -> int:
    """verify: sweep checks (its own sign-offs among them), distribution, the summary line; exit 1 on any FAIL (or WARN with --strict)."""
    from genrun.analysis.sweep import sweep_summary_line, verify_sweep

    verification = verify_sweep(sweep, allowed_signers=getattr(args, "allowed_signers", None))
    strict = getattr(args, "strict", False)
    if args.json:
        document = verification.model_dump(mode="json")
        document["summary_line"] = sweep_summary_line(verification)
        document["exit_code"] = verification.exit_code(strict)
        print_json(document)
    else:
        render_sweep(verification, "verify")
    return verification.exit_code(strict)


def handle_sweep_report(args: argparse.Namespace, sweep: Path) -> int:
    """report: the same distribution, plus a plot (units per item, items per stop reason) with --plot."""
    from genrun.analysis.sweep import sweep_summary_line, verify_sweep

    verification = verify_sweep(sweep, allowed_signers=getattr(args, "allowed_signers", None))
    if args.plot is not None:
        from genrun.analysis._sweep_plot import write_sweep_plot
        from genrun.analysis._plot import PlotError

        from .report import plot_refusal

        try:
            written = write_sweep_plot(verification, args.plot)
        except PlotError as exc:
            raise plot_refusal(exc) from None
    if args.json:
        document = verification.model_dump(mode="json")
        document["summary_line"] = sweep_summary_line(verification)
        if args.plot is not None:
            document["plot"] = str(written)
        print_json(document)
    else:
        render_sweep(verification, "report")
    if args.plot is not None:  # as a run's report says it: on stderr, stdout stays the report (or the JSON)
        stderr_console.print(f"wrote {written}", markup=False, highlight=False, soft_wrap=True)
    return 0


def render_sweep(v, command: str) -> None:  # noqa: ANN001 (analysis.sweep.SweepVerification, imported lazily)
    """Sweep checks, the distribution tables, items needing attention, the summary line; the first table is titled
    after the command that shows it (`verify sweep ...`, `report sweep ...`)."""
    from genrun.analysis.sweep import sweep_summary_line

    d = v.distribution
    print_findings(f"{command} sweep {v.sweep_id} ({v.status})", v.findings)
    counts = Table(title="items", title_justify="left")
    counts.add_column("by")
    counts.add_column("value")
    counts.add_column("items", justify="right")
    for label, mapping in (("status", d.statuses), ("stop reason", d.stop_reasons), ("WARN check", d.warn_checks), ("FAIL check", d.fail_checks)):
        for key, n in sorted(mapping.items(), key=lambda kv: (-kv[1], kv[0])):
            counts.add_row(label, key, str(n))
    stdout_console.print(counts)
    if d.units_min is not None:
        stdout_console.print(f"units per item: min {d.units_min}, median {d.units_median:g}, max {d.units_max}", markup=False, highlight=False, soft_wrap=True)
    stdout_console.print(f"lost attempts (kept as incomplete snapshots): {d.lost_attempts}; failed items: {_indices(d.failed_items)}; "
                         f"lost items: {_indices(d.lost_items)}", markup=False, highlight=False, soft_wrap=True)
    attention = [i for i in v.items if i.failures or i.warnings or i.status != "succeeded"]
    if attention:
        columns = ("item", "status", "stop", "units", "WARN", "FAIL", "snapshot")
        rows = [(str(i.index), i.status, ",".join(i.stop_reasons) or "-", "-" if i.generated is None else str(i.generated),
                 ",".join(i.warnings) or "-", ",".join(i.failures) or "-", i.snapshot_id or "-") for i in attention]
        widths = [max(len(column), *(len(row[n]) for row in rows)) for n, column in enumerate(columns)]
        if sum(widths) + 3 * len(columns) + 1 <= stdout_console.width:  # the table, when every cell fits whole
            table = Table(title="items needing attention", title_justify="left")
            for column in columns:
                table.add_column(column, no_wrap=True)
            for row in rows:
                table.add_row(*row)
            stdout_console.print(table)
        else:  # narrower: one item per line, nothing folded (a table this narrow cut ids and words in half)
            stdout_console.print("items needing attention:", markup=False, highlight=False, soft_wrap=True)
            for index, status, stop, units, warns, fails, snapshot in rows:
                stdout_console.print(f"  item {index}: {status}, stop {stop}, {units} units, WARN {warns}, FAIL {fails}\n    {snapshot}",
                                     markup=False, highlight=False, soft_wrap=True)
    stdout_console.print(sweep_summary_line(v), markup=False, highlight=False, soft_wrap=True)



def _indices(items: tuple[int, ...]) -> str:
    """Item indices as a reader writes them: `2, 5`, or `none`."""
    return ", ".join(map(str, items)) or "none"
