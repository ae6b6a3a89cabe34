"""The report a person reads: one self-contained HTML file and a short Markdown summary.

Charts are inline SVG drawn here from the small final tables (no charting library, no
scripts, nothing fetched): throughput per topic, lag per group, the worst partitions and
the group statuses. Only those small tables are collected to the driver.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Sequence
from pathlib import Path

import attrs

__all__ = [
    "ReportData",
    "collect_report_data",
    "line_chart",
    "render_html",
    "render_markdown",
    "write_report",
]

_TOP_SERIES = 8
_WORST_PARTITIONS = 20
_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
_STATUS_COLOURS = {
    "OK": "#2ca02c",
    "WARN": "#ff9f0e",
    "ERR": "#d62728",
    "STOP": "#d62728",
    "STALL": "#d62728",
    "REWIND": "#9467bd",
}

Series = dict[str, list[tuple[int, float]]]


@attrs.frozen(kw_only=True)
class ReportData:
    since_ms: int
    until_ms: int
    report_ms: int  # when lag is measured: the window's end, or the present if earlier
    throughput: Series  # topic -> [(bucket ms, records/s)]
    byte_rate: Series  # topic -> [(bucket ms, bytes/s)]
    lag: Series  # group -> [(bucket ms, lag records)]
    groups: list[dict]
    worst: list[dict]
    topics: list[dict]


def collect_report_data(frames: dict, window) -> ReportData:
    """Pull the small tables the report is drawn from (top series only) to the driver."""
    from pyspark.sql import functions as F

    from trio_broker.analytics.tables import group_lag_series

    tp = frames["topic_throughput"]
    topics = [
        r.asDict()
        for r in tp.groupBy("topic")
        .agg(
            F.sum("records").alias("records"),
            F.sum("bytes").alias("bytes"),
            F.sum("batches").alias("batches"),
        )
        .orderBy(F.col("bytes").desc())
        .collect()
    ]
    top_topics = [t["topic"] for t in topics[:_TOP_SERIES]]
    throughput: Series = {t: [] for t in top_topics}
    byte_rate: Series = {t: [] for t in top_topics}
    for r in (
        tp.filter(F.col("topic").isin(top_topics) if top_topics else F.lit(False))
        .select(
            "topic", F.unix_millis("bucket_start").alias("ms"), "records_per_sec", "bytes_per_sec"
        )
        .orderBy("topic", "ms")
        .collect()
    ):
        throughput[r.topic].append((r.ms, float(r.records_per_sec)))
        byte_rate[r.topic].append((r.ms, float(r.bytes_per_sec)))

    lag = frames["group_partition_lag"]
    groups = [r.asDict() for r in frames["group_summary"].orderBy("group").collect()]
    ranked = sorted(groups, key=lambda g: (-(g["max_lag_seconds"] or 0), g["group"]))
    top_groups = [g["group"] for g in ranked[:_TOP_SERIES]]
    lag_series: Series = {g: [] for g in top_groups}
    series = group_lag_series(lag, window)
    for r in series.filter(
        F.col("group").isin(top_groups) if top_groups else F.lit(False)
    ).collect():
        lag_series[r.group].append((r.bucket_ms, float(r.lag_records)))
    worst = [
        r.asDict()
        for r in lag.filter(F.col("kind") == "report")
        .orderBy(
            F.col("lag_seconds").desc(), F.col("lag_records").desc(), "group", "topic", "partition"
        )
        .limit(_WORST_PARTITIONS)
        .collect()
    ]
    return ReportData(
        since_ms=window.since_ms,
        until_ms=window.until_ms,
        report_ms=window.report_ms,
        throughput=throughput,
        byte_rate=byte_rate,
        lag=lag_series,
        groups=groups,
        worst=worst,
        topics=topics,
    )


def _fmt_time(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M")


def _fmt_num(value: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def line_chart(
    series: Series,
    *,
    title: str,
    x_range: tuple[int, int],
    unit: str,
    width: int = 760,
    height: int = 260,
) -> str:
    """An inline SVG line chart of time series (x in epoch ms)."""
    left, right, top, bottom = 60, 150, 28, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    x0, x1 = x_range
    y_max = max((y for points in series.values() for _, y in points), default=0.0) or 1.0
    esc = html.escape
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="{esc(title)}" font-family="sans-serif" font-size="11">',
        f'<text x="{left}" y="16" font-size="13" font-weight="bold">{esc(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#ccc"/>',
    ]
    for i in range(5):
        y_val = y_max * i / 4
        y = top + plot_h - plot_h * i / 4
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
        )
        parts.append(
            f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{_fmt_num(y_val)}</text>'
        )
    for i in range(5):
        ms = x0 + (x1 - x0) * i // 4
        x = left + plot_w * i / 4
        parts.append(
            f'<text x="{x:.1f}" y="{height - 10}" text-anchor="middle">{_fmt_time(ms)[11:]}</text>'
        )
    parts.append(f'<text x="{left}" y="{top - 4}" fill="#666">{esc(unit)}</text>')
    for n, (name, points) in enumerate(series.items()):
        colour = _COLOURS[n % len(_COLOURS)]
        coords = [
            (left + plot_w * (x - x0) / max(x1 - x0, 1), top + plot_h - plot_h * y / y_max)
            for x, y in points
        ]
        if len(coords) == 1:
            cx, cy = coords[0]
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="2.5" fill="{colour}"/>')
        elif coords:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            parts.append(
                f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5"/>'
            )
        ly = top + 12 + 16 * n
        parts.append(
            f'<rect x="{left + plot_w + 10}" y="{ly - 8}" width="10" height="10" fill="{colour}"/>'
        )
        parts.append(f'<text x="{left + plot_w + 24}" y="{ly + 1}">{esc(name[:20])}</text>')
    if not series:
        parts.append(
            f'<text x="{left + plot_w / 2}" y="{top + plot_h / 2}" '
            'text-anchor="middle" fill="#999">no data</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for c in columns:
            value = row.get(c)
            text = (
                f"{value:.1f}"
                if isinstance(value, float)
                else ("" if value is None else str(value))
            )
            style = ""
            if c == "status" and text in _STATUS_COLOURS:
                style = f' style="color:{_STATUS_COLOURS[text]};font-weight:bold"'
            cells.append(f"<td{style}>{esc(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


_GROUP_COLUMNS = (
    "group",
    "status",
    "partitions",
    "total_lag_records",
    "total_lag_committed",
    "max_lag_records",
    "max_lag_seconds",
    "warn_partitions",
    "stalled_partitions",
    "stopped_partitions",
    "rewind_partitions",
)
_WORST_COLUMNS = (
    "group",
    "topic",
    "partition",
    "status",
    "committed_offset",
    "log_end_offset",
    "lag_records",
    "lag_seconds",
)


def render_html(data: ReportData) -> str:
    span = (data.since_ms, data.until_ms)
    title = f"trio-broker report {_fmt_time(data.since_ms)} to {_fmt_time(data.until_ms)} UTC"
    charts = [
        line_chart(data.throughput, title="Throughput per topic", x_range=span, unit="records/s"),
        line_chart(data.byte_rate, title="Bytes per topic", x_range=span, unit="bytes/s"),
        line_chart(data.lag, title="Lag per group", x_range=span, unit="records behind"),
    ]
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse;
margin:1em 0}}td,th{{border:1px solid #ddd;padding:3px 8px;text-align:right}}
th{{background:#f4f4f4}}td:first-child{{text-align:left}}</style></head><body>
<h1>{html.escape(title)}</h1>
<h2>Consumer groups</h2>{_table(data.groups, _GROUP_COLUMNS)}
<h2>Throughput</h2>{charts[0]}{charts[1]}
{_table(data.topics, ("topic", "batches", "records", "bytes"))}
<h2>Lag</h2>{charts[2]}
<h2>Worst partitions at {_fmt_time(data.report_ms)} UTC</h2>{_table(data.worst, _WORST_COLUMNS)}
</body></html>
"""


def render_markdown(data: ReportData) -> str:
    lines = [
        f"# trio-broker report {_fmt_time(data.since_ms)} to {_fmt_time(data.until_ms)} UTC",
        "",
        f"- topics with traffic: {len(data.topics)}, records: "
        f"{sum(t['records'] or 0 for t in data.topics)}, bytes: "
        f"{sum(t['bytes'] or 0 for t in data.topics)}",
        f"- lag measured at {_fmt_time(data.report_ms)} UTC",
        f"- groups: {len(data.groups)}, not OK: "
        f"{sum(1 for g in data.groups if g['status'] != 'OK')}",
        "",
        "| group | status | total lag (records) | max lag (s) | stalled | stopped |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for g in data.groups:
        lines.append(
            f"| {g['group']} | {g['status']} | {g['total_lag_records']} | "
            f"{(g['max_lag_seconds'] or 0):.1f} | {g['stalled_partitions']} | "
            f"{g['stopped_partitions']} |"
        )
    if data.worst:
        w = data.worst[0]
        lines += [
            "",
            f"Worst partition: {w['group']} on {w['topic']}-{w['partition']}, "
            f"{w['lag_records']} records / {w['lag_seconds']:.1f} s behind ({w['status']}).",
        ]
    return "\n".join(lines) + "\n"


def write_report(out: Path, data: ReportData, window) -> tuple[Path, Path]:
    """Write report-<date>.html and report-<date>.md under `out`; return their paths."""
    stamp = dt.datetime.fromtimestamp((window.until_ms - 1) / 1000, dt.UTC).strftime("%Y-%m-%d")
    out.mkdir(parents=True, exist_ok=True)
    html_path = out / f"report-{stamp}.html"
    md_path = out / f"report-{stamp}.md"
    html_path.write_text(render_html(data), encoding="utf-8")
    md_path.write_text(render_markdown(data), encoding="utf-8")
    return html_path, md_path
