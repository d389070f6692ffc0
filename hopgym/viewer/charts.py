"""Small inline SVG charts for the report: :func:`bar_chart` and :func:`signed_bar_chart`.

Plain SVG text, no library and no script: every label is escaped, so a category or series name
read from a dataset cannot inject markup.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

__all__ = ["bar_chart", "signed_bar_chart", "SERIES_COLORS"]

# Two runs side by side: blue for the first, orange for the second (colour-blind safe pair).
SERIES_COLORS = ("#3b6ea8", "#e07b28")
_FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def _fmt_default(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))


def _legend(names: Sequence[str], x: float, y: float) -> str:
    if len(names) < 2:
        return ""
    parts = []
    for i, name in enumerate(names):
        cx = x + i * 150
        parts.append(
            f'<rect x="{cx:.1f}" y="{y - 9:.1f}" width="10" height="10" '
            f'fill="{SERIES_COLORS[i % len(SERIES_COLORS)]}"/>'
            f'<text x="{cx + 14:.1f}" y="{y:.1f}" {_FONT}>{escape(_short(name, 22))}</text>'
        )
    return "".join(parts)


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def bar_chart(
    title: str,
    categories: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
    *,
    y_max: float | None = None,
    fmt: Callable[[float], str] = _fmt_default,
    x_label: str = "",
    width: int = 420,
    height: int = 210,
) -> str:
    """A grouped vertical bar chart as an ``<svg>`` string.

    Args:
        title: shown above the plot (and as the accessible name).
        categories: the x-axis labels.
        series: ``(name, values)`` per run; ``None`` draws no bar (no episode in that category).
        y_max: top of the axis (default: the largest value).
        fmt: formats the value printed above each bar.
        x_label: the x-axis title.
        width, height: the view box; the chart scales to its container.

    Example:
        >>> svg = bar_chart("EM by hops", ["2", "3"], [("run", [0.5, 0.25])], y_max=1)
        >>> svg.startswith("<svg") and svg.count("<rect") == 2
        True
    """
    left, right, top, bottom = 34, 8, 44 if len(series) > 1 else 30, 34
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [v for _, vals in series for v in vals if v is not None]
    top_value = y_max if y_max is not None else max(values, default=0.0)
    top_value = top_value or 1.0
    out = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="{left}" y="14" {_FONT} font-weight="600">{escape(title)}</text>',
        _legend([name for name, _ in series], left, 30),
    ]
    for frac in (0.0, 0.5, 1.0):
        y = top + plot_h * (1 - frac)
        out.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="#ddd"/><text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" '
            f'{_FONT} fill="#666">{escape(fmt(top_value * frac))}</text>'
        )
    n_cat = max(len(categories), 1)
    group_w = plot_w / n_cat
    bar_w = min(36.0, group_w * 0.8 / max(len(series), 1))
    for c, cat in enumerate(categories):
        gx = left + c * group_w + (group_w - bar_w * len(series)) / 2
        for s, (_, vals) in enumerate(series):
            v = vals[c] if c < len(vals) else None
            if v is None:
                continue
            bh = plot_h * max(min(v / top_value, 1.0), 0.0)
            x, y = gx + s * bar_w, top + plot_h - bh
            out.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w - 2:.1f}" height="{bh:.1f}" '
                f'fill="{SERIES_COLORS[s % len(SERIES_COLORS)]}"><title>'
                f"{escape(str(cat))}: {escape(fmt(v))}</title></rect>"
            )
            out.append(
                f'<text x="{x + (bar_w - 2) / 2:.1f}" y="{y - 3:.1f}" text-anchor="middle" '
                f'{_FONT} fill="#333">{escape(fmt(v))}</text>'
            )
        out.append(
            f'<text x="{left + (c + 0.5) * group_w:.1f}" y="{top + plot_h + 14:.1f}" '
            f'text-anchor="middle" {_FONT}>{escape(_short(str(cat), 14))}</text>'
        )
    if x_label:
        out.append(
            f'<text x="{left + plot_w / 2:.1f}" y="{height - 4}" text-anchor="middle" '
            f'{_FONT} fill="#666">{escape(x_label)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def signed_bar_chart(
    title: str,
    labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
    *,
    fmt: Callable[[float], str] = lambda v: f"{v:+.3f}",
    width: int = 420,
) -> str:
    """Horizontal bars left (negative) or right (positive) of a zero line, one row per label.

    Example:
        >>> svg = signed_bar_chart("terms", ["outcome", "format"], [("run", [0.6, -0.1])])
        >>> svg.count("<rect")
        2
    """
    row_h, top, label_w = 18, 44 if len(series) > 1 else 30, 120
    n_series = max(len(series), 1)
    height = top + max(len(labels), 1) * row_h * n_series + 10 * len(labels) + 8
    plot_x0, plot_x1 = label_w + 6, width - 56
    if any(v is not None and v < 0 for _, vals in series for v in vals):
        plot_x0 += 50  # room for the value printed left of a negative bar
    values = [abs(v) for _, vals in series for v in vals if v is not None]
    scale = max(values, default=1.0) or 1.0
    has_neg = any(v is not None and v < 0 for _, vals in series for v in vals)
    zero = (plot_x0 + plot_x1) / 2 if has_neg else plot_x0
    half = (plot_x1 - plot_x0) / 2 if has_neg else plot_x1 - plot_x0
    out = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="4" y="14" {_FONT} font-weight="600">{escape(title)}</text>',
        _legend([name for name, _ in series], 4, 30),
    ]
    if not labels:
        out.append(f'<text x="4" y="{top + 12}" {_FONT} fill="#666">no reward terms</text>')
    y = top
    for r, label in enumerate(labels):
        out.append(
            f'<text x="{label_w}" y="{y + row_h * n_series / 2 + 4:.1f}" text-anchor="end" '
            f"{_FONT}>{escape(_short(label, 20))}</text>"
        )
        for s, (_, vals) in enumerate(series):
            v = vals[r] if r < len(vals) else None
            if v is not None:
                w = half * abs(v) / scale
                x = zero - w if v < 0 else zero
                out.append(
                    f'<rect x="{x:.1f}" y="{y + 2:.1f}" width="{max(w, 0.5):.1f}" '
                    f'height="{row_h - 4}" fill="{SERIES_COLORS[s % len(SERIES_COLORS)]}">'
                    f"<title>{escape(label)}: {escape(fmt(v))}</title></rect>"
                )
                tx = (x - 3) if v < 0 else (x + w + 3)
                out.append(
                    f'<text x="{tx:.1f}" y="{y + row_h - 5:.1f}" '
                    f'text-anchor="{"end" if v < 0 else "start"}" {_FONT} fill="#333">'
                    f"{escape(fmt(v))}</text>"
                )
            y += row_h
        y += 10
    out.append(f'<line x1="{zero:.1f}" x2="{zero:.1f}" y1="{top - 4}" y2="{y - 6}" stroke="#888"/>')
    out.append("</svg>")
    return "".join(out)
