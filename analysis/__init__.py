"""Read-only post-mortem analysis of genrun snapshots: verify, report and diff.

Never writes inside a snapshot and never imports torch, transformers or diffusers (nor numpy),
so it runs on a laptop weeks later. Token ids are decoded with the `tokenizers` library when the
model's `tokenizer.json` is still where `model.json` says and still has the frozen sha256.

Names are imported on first use (PEP 562), so `genrun verify` does not pay for report and diff.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._finding import Examined, Finding, Status
    from ._diff_render import render_diff, render_verdict
    from ._html_template import render_index_html, render_review_html
    from .memory_estimate import describe_memory
    from ._load import Snapshot, SnapshotNotFound, read_snapshot
    from ._plot import PlotError, write_plot
    from genrun._safe_read import MAX_JSON_BYTES, UnsafeFile, read_regular, walk_entries
    from ._report_render import render_report
    from .diff import SnapshotDiff, diff_snapshots
    from .report import Report, report_snapshot
    from .signoffs import evaluate_signoffs, summarize_signoffs
    from .verify import Verification, summary_line, verify_snapshot

_HOME = {
    "Examined": "._finding", "Finding": "._finding", "Status": "._finding",
    "Snapshot": "._load", "SnapshotNotFound": "._load", "read_snapshot": "._load",
    "SnapshotDiff": ".diff", "diff_snapshots": ".diff", "render_diff": "._diff_render",
    "Report": ".report", "report_snapshot": ".report", "render_report": "._report_render",
    "PlotError": "._plot", "write_plot": "._plot",
    "evaluate_signoffs": ".signoffs", "summarize_signoffs": ".signoffs",
    "Verification": ".verify", "summary_line": ".verify", "verify_snapshot": ".verify",
    "render_review_html": "._html_template", "render_index_html": "._html_template",
    "render_verdict": "._diff_render",
    "describe_memory": ".memory_estimate",
    "read_regular": "genrun._safe_read", "UnsafeFile": "genrun._safe_read", "MAX_JSON_BYTES": "genrun._safe_read",
    "walk_entries": "genrun._safe_read",
}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'analysis' has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
