"""Training curves as inline SVG, drawn in Python: the page needs no chart library and no internet access."""

from __future__ import annotations

import math
from html import escape

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
WIDTH, HEIGHT = 360, 190
LEFT, RIGHT, TOP, BOTTOM = 52, 12, 26, 30


def _ticks(lo: float, hi: float, count: int = 4) -> list[float]:
    if hi <= lo:
        return [lo]
    step = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(step))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= step)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def line_chart(title: str, series: dict[str, list[tuple[float, float]]], *, x_label: str = "epoch") -> str:
    """An SVG line chart of ``{name: [(x, y), ...]}``; one colour and one legend entry per series."""
    points = [p for values in series.values() for p in values if math.isfinite(p[1])]
    if not points:
        return ""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    pad = (y1 - y0) * 0.08 or abs(y1) * 0.1 or 1.0
    y0, y1 = y0 - pad, y1 + pad
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return TOP + (1 - (y - y0) / (y1 - y0)) * plot_h

    out = [f'<svg class="chart" role="img" aria-label="{escape(title)}" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
           f"<title>{escape(title)}</title>",
           f'<text x="{LEFT}" y="15" class="chart-title">{escape(title)}</text>',
           f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" class="plot"/>']
    for tick in _ticks(y0, y1):
        y = sy(tick)
        out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                   f'<text x="{LEFT - 4}" y="{y + 3:.1f}" class="tick" text-anchor="end">{_fmt(tick)}</text>')
    for tick in _ticks(x0, x1, min(6, max(1, int(x1 - x0)))):
        if abs(tick - round(tick)) > 1e-9:
            continue
        x = sx(tick)
        out.append(f'<text x="{x:.1f}" y="{TOP + plot_h + 13}" class="tick" text-anchor="middle">{tick:.0f}</text>')
    out.append(f'<text x="{LEFT + plot_w / 2:.0f}" y="{HEIGHT - 3}" class="tick" text-anchor="middle">'
               f'{escape(x_label)}</text>')
    legend_x = WIDTH - RIGHT
    for i, (name, values) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        good = [(sx(x), sy(y)) for x, y in values if math.isfinite(y)]
        if not good:
            continue
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in good)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2" class="series" '
                   f'data-series="{escape(name)}"/>')
        out.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}"/>' for x, y in good)
        out.append(f'<text x="{legend_x}" y="{15 + 0 * i}" dx="{-70 * i}" class="legend" fill="{color}" '
                   f'text-anchor="end">{escape(name)}</text>')
    out.append("</svg>")
    return "".join(out)
