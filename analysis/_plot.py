"""`report --plot FILE.png`: throughput and memory over time with matplotlib (the optional `plot` extra)."""

from pathlib import Path

from .install_hint import install_hint
from .report import Report

PLOT_EXTRA = install_hint("plot")


class PlotError(RuntimeError):
    """The plot cannot be written (matplotlib missing, or the target is inside the snapshot)."""


class PlotExtraMissing(PlotError):
    """matplotlib (the `plot` extra) is not installed: a missing extra, refused like a backend's (exit 2)."""


def write_plot(report: Report, target: Path) -> Path:
    """Write a two-panel PNG (units/s; memory) to `target`, never inside the snapshot directory."""
    target = Path(target)
    snapshot = Path(report.snapshot).resolve()
    where = target.resolve()
    if where == snapshot or snapshot in where.parents:
        raise PlotError(f"--plot {target} is inside the snapshot {snapshot}; snapshots are never written to: choose a path outside it")
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed; must precede pyplot
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotExtraMissing(f"--plot needs matplotlib, which is not installed: {PLOT_EXTRA} (or omit --plot for the terminal chart)") from None
    samples = report.samples
    fig, (rate_ax, mem_ax) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    rated = [s for s in samples if s.window_units_per_s is not None]
    rate_ax.plot([s.t for s in rated], [s.window_units_per_s for s in rated], label="per row, window")
    cumulative = [s for s in samples if s.units_per_s is not None]
    rate_ax.plot([s.t for s in cumulative], [s.units_per_s for s in cumulative], label="per row, cumulative")
    rate_ax.set_ylabel(f"{report.unit}s/s per row")
    rate_ax.legend(loc="best")
    rate_ax.set_title(f"{report.snapshot_id}: {report.headline}", fontsize=9)
    for label, attr in (("RSS", "rss_bytes"), ("CUDA allocated", "cuda_allocated_bytes"), ("CUDA reserved", "cuda_reserved_bytes")):
        points = [(s.t, getattr(s, attr) / 2**20) for s in samples if getattr(s, attr) is not None]
        if points:
            mem_ax.plot(*zip(*points), label=label)
    mem_ax.set_ylabel("MiB")
    mem_ax.set_xlabel("t (s since start)")
    if mem_ax.get_legend_handles_labels()[0]:
        mem_ax.legend(loc="best")
    fig.tight_layout()
    try:
        fig.savefig(target, format="png", dpi=100)
    except OSError as exc:
        raise PlotError(f"cannot write --plot {target}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return target
