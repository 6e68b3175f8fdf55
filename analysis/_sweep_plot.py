"""`report SWEEP --plot FILE.png`: units per item and items per stop reason (the optional `plot` extra)."""

from pathlib import Path

from ._plot import PLOT_EXTRA, PlotError, PlotExtraMissing
from .sweep import SweepVerification


def write_sweep_plot(v: SweepVerification, target: Path) -> Path:
    """Two panels: a bar per item (units generated, coloured by status) and items per stop reason; never inside the sweep."""
    target = Path(target)
    sweep = Path(v.sweep).resolve()
    if target.resolve() == sweep or sweep in target.resolve().parents:
        raise PlotError(f"--plot {target} is inside the sweep snapshot {sweep}; snapshots are never written to: choose a path outside it")
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed; must precede pyplot
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotExtraMissing(f"--plot needs matplotlib, which is not installed: {PLOT_EXTRA}") from None
    colours = {"succeeded": "tab:green", "failed": "tab:red", "lost": "black", "interrupted": "tab:orange", "not_run": "tab:gray"}
    fig, (units_ax, reasons_ax) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 1]})
    units_ax.bar([i.index for i in v.items], [i.generated or 0 for i in v.items], color=[colours.get(i.status, "tab:blue") for i in v.items])
    unit = next((i.unit for i in v.items if i.unit), "unit")
    units_ax.set_xlabel("item")
    units_ax.set_ylabel(f"{unit}s generated")
    units_ax.set_title(f"{v.sweep_id}: units per item (colour: status)", fontsize=9)
    from matplotlib.patches import Patch

    statuses = sorted({i.status for i in v.items})
    units_ax.legend(handles=[Patch(color=colours.get(s, "tab:blue"), label=s) for s in statuses], title="status", fontsize=8)
    reasons = sorted(v.distribution.stop_reasons.items(), key=lambda kv: -kv[1])
    reasons_ax.bar([r for r, _ in reasons], [n for _, n in reasons])
    reasons_ax.set_title("items per stop reason", fontsize=9)
    reasons_ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=100)
    plt.close(fig)
    return target
