"""Hand-built inline SVG line charts for the HTML review page: no JavaScript, no network, no plotting library.

Every piece of text that reaches the SVG (titles, axis labels, series names) goes through
`markupsafe.escape`; numbers are formatted here. The result is `Markup`, so the page template
inserts it as-is while escaping everything else.
"""

import math
import sys
from collections.abc import Sequence
from typing import NamedTuple

from markupsafe import Markup, escape

WIDTH, PLOT_HEIGHT = 720, 190  # px of the viewBox and of the plot area; the page scales the chart to the column width
LEFT, RIGHT, TOP, BOTTOM = 72, 16, 28, 48  # px margins: room for tick labels and axis titles
COLOURS = ("#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#57606a")
TICKS = 5
LEGEND_LINE = 16  # px per legend line


class Series(NamedTuple):
    """One line: its legend name and its (x, y) points, in chart units."""

    name: str
    points: Sequence[tuple[float, float]]
    dashed: bool = False


class Chart(NamedTuple):
    """A chart to draw: title, axis titles with their units, and the lines."""

    title: str
    x_label: str
    y_label: str
    series: Sequence[Series]
    x_span: tuple[float, float] | None = None
    """The x range the axis runs over exactly (ticks inside it only); `None`: the points' own range, rounded out to ticks."""


def nice_ticks(low: float, high: float, count: int = TICKS) -> list[float]:
    """Round tick values covering [low, high] (1, 2, 5 × 10^k steps); at most `3 * count` of them, whatever the values.

    A hostile progress log may hold values near the float limits (±1e308: their span overflows) or far beyond the float
    spacing of their step (1e16 and 1e16 + 2: adding the step would not advance), so the step is never below the
    spacing of the values and ticks are counted, never accumulated."""
    low, high = (min(max(v, -sys.float_info.max), sys.float_info.max) for v in (low, high))  # ±inf: the float limits
    if high <= low:
        high = low + (abs(low) or 1.0)
    if not math.isfinite(high - low):  # the span itself overflows: two ticks, the ends
        return [low, high]
    raw = (high - low) / max(count - 1, 1)
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    step = max(step, 2 * math.ulp(max(abs(low), abs(high))))
    start = math.floor(low / step) * step
    ticks: list[float] = []
    for i in range(3 * count):
        value = round(start + i * step, 10)
        if not ticks or value > ticks[-1]:
            ticks.append(value)
        if start + i * step >= high:
            break
    return ticks if len(ticks) > 1 else [low, high]


def render_chart(chart: Chart) -> Markup:
    """An `<svg>` element with axes, ticks, axis titles, the lines and a legend; a note when there are no points."""
    drawn = [s for s in chart.series if s.points]
    label = escape(chart.title)
    if not drawn:
        return Markup(f'<p class="empty">{label}: no data recorded.</p>')
    xs = [x for s in drawn for x, _ in s.points]
    ys = [y for s in drawn for _, y in s.points]
    x_ticks = nice_ticks(min(xs), max(xs))
    y_ticks = nice_ticks(min(0.0, min(ys)), max(ys))
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]
    if chart.x_span is not None and chart.x_span[0] < chart.x_span[1]:  # the axis is the span: never rounded out past it
        x0, x1 = chart.x_span
        x_ticks = [t for t in nice_ticks(x0, x1) if x0 <= t <= x1] or [x0, x1]
    top = TOP + LEGEND_LINE * len(drawn)  # the legend sits above the plot, one line per series, never over the data
    height = top + PLOT_HEIGHT + BOTTOM
    plot_w, plot_h = WIDTH - LEFT - RIGHT, PLOT_HEIGHT

    def px(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return top + plot_h - (y - y0) / (y1 - y0) * plot_h

    parts = [f'<svg class="chart" role="img" aria-label="{label}" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" '
             f'xmlns="http://www.w3.org/2000/svg"><title>{label}</title>',
             f'<text x="{LEFT}" y="16" class="chart-title">{label}</text>']
    for t in x_ticks:
        parts.append(f'<line x1="{px(t):.1f}" y1="{top}" x2="{px(t):.1f}" y2="{top + plot_h}" class="grid"/>'
                     f'<text x="{px(t):.1f}" y="{top + plot_h + 16}" text-anchor="middle" class="tick">{_number(t)}</text>')
    for t in y_ticks:
        parts.append(f'<line x1="{LEFT}" y1="{py(t):.1f}" x2="{LEFT + plot_w}" y2="{py(t):.1f}" class="grid"/>'
                     f'<text x="{LEFT - 6}" y="{py(t) + 4:.1f}" text-anchor="end" class="tick">{_number(t)}</text>')
    parts.append(f'<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{plot_h}" class="frame"/>')
    parts.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{height - 8}" text-anchor="middle" class="axis">{escape(chart.x_label)}</text>')
    parts.append(f'<text transform="translate(14 {top + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle" class="axis">'
                 f'{escape(chart.y_label)}</text>')
    for i, s in enumerate(drawn):
        colour = COLOURS[i % len(COLOURS)]
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        if len(s.points) == 1:  # a single record: a dot, since a one-point polyline has no length
            (x, y), = s.points
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>')
        else:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s.points)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        legend_x, legend_y = LEFT, TOP + 12 + i * LEGEND_LINE
        parts.append(f'<line x1="{legend_x}" y1="{legend_y - 4}" x2="{legend_x + 20}" y2="{legend_y - 4}" stroke="{colour}" '
                     f'stroke-width="2"{dash}/><text x="{legend_x + 26}" y="{legend_y}" class="legend">{escape(s.name)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _number(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 10_000:
        return f"{value:,.0f}"
    return f"{value:g}"
