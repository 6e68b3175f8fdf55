"""Plain-text columns for `genrun ls`: fast at 100,000 lines, readable at 80 and 120 columns and when piped.

Free-text cells (stop reasons, sign-offs) are capped when the table does not fit (or piped, with no width), so one long
sign-off never widens every line; `--json` has them whole. With a width (a terminal, or `COLUMNS` even when piped) a
table that fits is shown whole; else the capped columns shrink first, then columns are left out from the right; ids
are never cut.
"""

import os
import shutil
import sys
from collections.abc import Sequence
from typing import NamedTuple

CAPS = {"stop reasons": 32, "sign-offs": 40}
"""Widest a free-text column gets (characters); longer cells end in `…`."""
SHRUNK = 12  # narrowest a capped column shrinks to before the column is left out
GAP = "  "


class Layout(NamedTuple):
    shown: list[int]
    """Indexes of the columns shown, left to right."""
    widths: list[int]
    dropped: list[str]


def output_width() -> int | None:
    """`COLUMNS` when set (piped too), else the terminal's width, else None (piped: no limit but the caps)."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def fit(headers: tuple[str, ...], columns: Sequence[Sequence[str]], width: int | None) -> Layout:
    """Column widths: natural where they fit `width`; else capped, then capped columns shrunk, then columns left out from
    the right, to fit it."""
    natural = [max(len(h), max(map(len, column), default=0)) for h, column in zip(headers, columns, strict=True)]
    shown = list(range(len(headers)))
    if width is not None and sum(natural) + len(GAP) * (len(natural) - 1) <= width:
        return Layout(shown, natural, [])
    widths = [min(w, CAPS.get(h, w)) for w, h in zip(natural, headers, strict=True)]
    if width is None:
        return Layout(shown, [widths[i] for i in shown], [])

    def total() -> int:
        return sum(widths[i] for i in shown) + len(GAP) * (len(shown) - 1)

    for i in reversed(shown):  # the rightmost capped column gives way first
        if headers[i] in CAPS and total() > width:
            widths[i] = max(SHRUNK, len(headers[i]), widths[i] - (total() - width))
    while len(shown) > 1 and total() > width:
        shown.pop()
    return Layout(shown, [widths[i] for i in shown], [headers[i] for i in range(len(headers)) if i not in shown])


def render(headers: tuple[str, ...], columns: Sequence[Sequence[str]], layout: Layout) -> str:
    """The header line and one line per row (cells given column by column); the last column is not padded (no trailing spaces)."""
    # one format string for every line, `map`ped over the columns: 100,000 lines in a fraction of a second
    template = GAP.join([*(f"{{:<{w}}}" for w in layout.widths[:-1]), "{}"])
    shown: list[Sequence[str]] = []
    for i, w in zip(layout.shown, layout.widths, strict=True):
        column = columns[i]
        if headers[i] in CAPS and max(map(len, column), default=0) > w:
            column = [_cut(text, w) for text in column]
        shown.append(column)
    header = template.format(*(headers[i] for i in layout.shown))
    return "\n".join([header, *map(template.format, *shown)])


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
