"""Inline SVG charts for the report: no charting library, no scripts, nothing fetched.

A chart is an `<svg>` with a `viewBox` and `width="100%"`, so it takes the width of the
box it is put in (the page's column, or one cell of a grid of small charts) and its text
keeps the size it was drawn at when that box is about as wide as the chart. The title,
the unit and the legend are HTML around the chart, not SVG text, so no axis label can
sit on a title. Every data point is a `<circle class="pt">` with the exact count behind
it (`data-count`), its time (`data-x`, epoch ms) and series (`data-series`), and a
`<title>` the browser shows on hover.
"""

from __future__ import annotations

import html
import math

import attrs

from trio_broker.analytics.units import fmt_axis, fmt_time

__all__ = [
    "COLOURS",
    "TIME_STEPS_MS",
    "ChartPoint",
    "Series",
    "bucket_for_span",
    "legend",
    "line_chart",
    "nice_axis",
    "throughput_range",
    "time_ticks",
]

SECOND = 1000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR
# Bucket widths and tick steps; each divides a day, so buckets line up with the day's
# midnight whatever the width.
TIME_STEPS_MS = (
    SECOND,
    2 * SECOND,
    5 * SECOND,
    10 * SECOND,
    15 * SECOND,
    30 * SECOND,
    MINUTE,
    2 * MINUTE,
    5 * MINUTE,
    10 * MINUTE,
    15 * MINUTE,
    30 * MINUTE,
    HOUR,
    2 * HOUR,
    3 * HOUR,
    6 * HOUR,
    12 * HOUR,
    DAY,
)
MAX_BUCKETS = 120
# A zoomed chart shows at least this much time, so traffic within one second is still a
# rise and a fall of a line, not one dot.
_MIN_ZOOM_MS = MINUTE
COLOURS = ("#1f77b4", "#e8710a", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")


@attrs.frozen(kw_only=True)
class ChartPoint:
    """One point: `x_ms` where it is drawn, `y` its height, `count` the exact number
    behind it (records or bytes in the bucket, records behind), `note` its tooltip.
    `measured_between` False: nothing was measured between the point before and this one
    (the lag at report time after a group's last commit), so a dashed line joins them and
    the point is drawn hollow."""

    x_ms: int
    y: float
    count: int | None = None
    note: str = ""
    measured_between: bool = True


Series = dict[str, list[ChartPoint]]


def bucket_for_span(span_ms: int, *, max_buckets: int = MAX_BUCKETS) -> int:
    """The narrowest of TIME_STEPS_MS that cuts `span_ms` into at most `max_buckets`."""
    for step in TIME_STEPS_MS:
        if math.ceil(max(span_ms, 1) / step) <= max_buckets:
            return step
    return math.ceil(span_ms / max_buckets / DAY) * DAY


def throughput_range(
    first_ms: int | None, last_ms: int | None, since_ms: int, end_ms: int
) -> tuple[int, int, int]:
    """(bucket ms, x0, x1) for a throughput chart of traffic stamped first_ms..last_ms in
    the window [since_ms, end_ms).

    Traffic that spans a quarter of the window or more is drawn over the whole window.
    Traffic packed into less (a day whose records all came in one minute) is drawn over
    its own span plus a bucket either side, at least a minute, with buckets sized for that
    span: 60 one-second buckets rather than one dot at 12:00 on a day-wide axis.
    """
    window = max(end_ms - since_ms, 1)
    if first_ms is None or last_ms is None or (last_ms - first_ms + 1) * 4 >= window:
        return bucket_for_span(window), since_ms, end_ms
    span = max(last_ms - first_ms + 1, _MIN_ZOOM_MS)
    bucket = bucket_for_span(span)
    lo = (first_ms // bucket - 1) * bucket
    hi = (last_ms // bucket + 2) * bucket
    if hi - lo < _MIN_ZOOM_MS:
        lo -= (_MIN_ZOOM_MS - (hi - lo)) // 2 // bucket * bucket
        hi = lo + -(-_MIN_ZOOM_MS // bucket) * bucket
    return bucket, max(lo, since_ms), min(hi, end_ms)


def nice_axis(y_max: float, ticks: int = 4) -> tuple[float, float]:
    """(top, step): a round step (1, 2, 2.5 or 5 x 10^k) and the first multiple of it at
    or above `y_max`, for about `ticks` gridlines."""
    if y_max <= 0:
        return 1.0, 0.25
    raw = y_max / ticks
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    return math.ceil(y_max / step - 1e-9) * step, step


def time_ticks(
    x0: int, x1: int, plot_width: float, *, min_gap: float = 90
) -> tuple[int, list[int]]:
    """(step ms, tick times): round times at least `min_gap` user units apart."""
    span = max(x1 - x0, 1)
    step = next(
        (s for s in TIME_STEPS_MS if plot_width * s / span >= min_gap),
        math.ceil(span * min_gap / plot_width / DAY) * DAY,
    )
    first = -(-x0 // step) * step
    return step, list(range(first, x1 + 1, step))


def _tick_label(ms: int, step: int, span: int) -> str:
    if span > DAY:
        return fmt_time(ms)[5:] if step < DAY else fmt_time(ms)[5:10]
    return fmt_time(ms, seconds=step < MINUTE, date=False)


def line_chart(
    series: Series,
    *,
    x_range: tuple[int, int],
    y_kind: str,
    label: str,
    width: int = 1160,
    height: int = 240,
    zero_fill_bucket_ms: int | None = None,
    colours: tuple[str, ...] = COLOURS,
) -> str:
    """An SVG line chart of time series (x in epoch ms) with round axes.

    With `zero_fill_bucket_ms`, each series is a count per bucket and a bucket of the
    range without a point is drawn as zero (no traffic); without it, the line joins the
    points it has (a level, such as lag, between two measurements)."""
    left, right, top, bottom = 78, 18, 10, 26
    plot_w, plot_h = width - left - right, height - top - bottom
    x0, x1 = x_range
    x_span = max(x1 - x0, 1)
    y_max = max((p.y for points in series.values() for p in points), default=0.0)
    y_top, y_step = nice_axis(y_max)
    esc = html.escape

    def sx(ms: float) -> float:
        return left + plot_w * (min(max(ms, x0), x1) - x0) / x_span

    def sy(y: float) -> float:
        return top + plot_h - plot_h * y / y_top

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="100%" role="img" aria-label="{esc(label)}" '
        'font-family="system-ui, sans-serif" font-size="11" fill="#333">',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" '
        'fill="#fff" stroke="#cfd4da"/>',
    ]
    n_ticks = round(y_top / y_step)
    values = [i * y_step for i in range(n_ticks + 1)]
    for i, (value, text) in enumerate(zip(values, fmt_axis(values, y_kind), strict=True)):
        y = sy(value)
        if 0 < i < n_ticks:
            parts.append(
                f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eceef1"/>'
            )
        parts.append(
            f'<text class="axis" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{esc(text)}</text>'
        )
    step, ticks = time_ticks(x0, x1, plot_w)
    for ms in ticks:
        x = sx(ms)
        anchor = "start" if x - left < 30 else "end" if left + plot_w - x < 30 else "middle"
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + plot_h}" y2="{top + plot_h + 4}" '
            'stroke="#9aa1a9"/>'
            f'<text class="axis" x="{x:.1f}" y="{height - 8}" text-anchor="{anchor}">'
            f"{esc(_tick_label(ms, step, x_span))}</text>"
        )
    for n, (name, points) in enumerate(series.items()):
        colour = colours[n % len(colours)]
        drawn = sorted(points, key=lambda p: p.x_ms)
        if zero_fill_bucket_ms:
            drawn = _zero_filled(drawn, x0, x1, zero_fill_bucket_ms)
        run: list[ChartPoint] = []
        for p in drawn:  # solid runs of measured points; a dashed line across a gap
            if run and not p.measured_between:
                parts.append(_polyline(run, sx, sy, colour))
                a = run[-1]
                parts.append(
                    f'<line x1="{sx(a.x_ms):.1f}" y1="{sy(a.y):.1f}" x2="{sx(p.x_ms):.1f}" '
                    f'y2="{sy(p.y):.1f}" stroke="{colour}" stroke-width="1.4" '
                    'stroke-dasharray="4 3"/>'
                )
                run = []
            run.append(p)
        parts.append(_polyline(run, sx, sy, colour))
        marked = [p for p in points if not zero_fill_bucket_ms or p.count]
        radius = 3 if len(marked) <= 60 else 1.8
        for p in marked:
            count = "" if p.count is None else f' data-count="{p.count}"'
            fill = colour if p.measured_between else "#fff"
            parts.append(
                f'<circle class="pt" cx="{sx(p.x_ms):.1f}" cy="{sy(p.y):.1f}" r="{radius}" '
                f'fill="{fill}" stroke="{colour}" stroke-width="1.2" data-series="{esc(name)}" '
                f'data-x="{p.x_ms}"{count}><title>{esc(p.note or name)}</title></circle>'
            )
    parts.append("</svg>")
    return "".join(parts)


def _polyline(points: list[ChartPoint], sx, sy, colour: str) -> str:
    if len(points) < 2:
        return ""
    path = " ".join(f"{sx(p.x_ms):.1f},{sy(p.y):.1f}" for p in points)
    return (
        f'<polyline points="{path}" fill="none" stroke="{colour}" '
        'stroke-width="1.6" stroke-linejoin="round"/>'
    )


def _zero_filled(points: list[ChartPoint], x0: int, x1: int, bucket: int) -> list[ChartPoint]:
    """The points, plus a zero at the middle of every bucket of [x0, x1) without one."""
    have = {p.x_ms for p in points}
    filled = list(points)
    start = x0 // bucket * bucket
    for b in range(start, x1, bucket):
        mid = b + bucket // 2
        if mid not in have:
            filled.append(ChartPoint(x_ms=mid, y=0.0, count=0))
    return sorted(filled, key=lambda p: p.x_ms)


def legend(names: list[str], colours: tuple[str, ...] = COLOURS) -> str:
    """The series' names and colours, as an HTML list that wraps with the page."""
    esc = html.escape
    items = "".join(
        f'<li><span class="swatch" style="background:{colours[n % len(colours)]}"></span>'
        f"{esc(name)}</li>"
        for n, name in enumerate(names)
    )
    return f'<ul class="legend">{items}</ul>'
