"""The report's HTML page: summary first, then the groups, lag, partitions and traffic.

One self-contained file: inline CSS and SVG, no scripts, nothing fetched, so it mails and
archives as one page. The page is laid out for a laptop's 1,280 px: a centred column of
at most 1,200 px, tables that wrap their long names and scroll inside their own box if
they still do not fit, charts as wide as the column. Every section says so when it has
nothing to show. Formatted numbers (`1.03 GB`) carry the exact value of the Parquet
tables in `title` (a tooltip) and `data-value`.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from trio_broker.analytics.charts import legend, line_chart
from trio_broker.analytics.report import ReportData
from trio_broker.analytics.units import (
    fmt_byte_rate,
    fmt_bytes,
    fmt_change,
    fmt_count,
    fmt_duration,
    fmt_exact,
    fmt_rate,
    fmt_time,
)

__all__ = ["render_page"]

esc = html.escape
_ATTENTION = 5  # groups named in the summary
_TOPIC_ROWS = 30
_BUSIEST = 5
# Counts whose zeros are greyed out, so the non-zero ones stand out.
_GREY_ZEROS = {
    "total_lag_records",
    "total_lag_committed",
    "max_lag_records",
    "max_lag_seconds",
    "stopped_partitions",
    "stalled_partitions",
    "rewind_partitions",
    "warn_partitions",
}
# Partition statuses as group_summary counts them, worst first.
_PARTITION_STATUSES = (
    ("STOP", "stopped_partitions", "stopped"),
    ("STALL", "stalled_partitions", "stalled"),
    ("REWIND", "rewind_partitions", "rewound"),
    ("WARN", "warn_partitions", "with lag growing"),
)

_CSS = """
*{box-sizing:border-box}
body{margin:0;background:#f4f5f7;color:#1d2330;
 font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
main{max-width:1200px;margin:0 auto;padding:18px 24px 40px}
h1{font-size:21px;margin:0 0 2px}
h2{font-size:16px;margin:0 0 10px}
h3{font-size:12px;margin:0 0 6px;color:#555c66;text-transform:uppercase;letter-spacing:.04em}
.sub,.note{color:#59606b;margin:0 0 8px}
section{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:14px 18px;
 margin:14px 0}
.cards{display:grid;grid-template-columns:repeat(4,minmax(0,1fr));gap:12px;margin-top:12px}
.card{border:1px solid #e3e6ea;border-radius:6px;padding:10px 12px;min-width:0}
.big{font-size:26px;font-weight:650;font-variant-numeric:tabular-nums}
.exact{color:#59606b;font-variant-numeric:tabular-nums}
.up{color:#1b6e2f}.down{color:#a33a00}
.badge{display:inline-block;min-width:3.6em;text-align:center;padding:0 6px;border-radius:4px;
 font-weight:650;font-size:12px;line-height:20px;color:#fff;background:#6b7280}
.ERR,.STOP,.STALL{background:#c62828}.REWIND{background:#7b3fa8}
.WARN{background:#f0a202;color:#2b1d00}.OK{background:#2e7d32}
.counts{margin:0 0 8px;display:flex;gap:14px;flex-wrap:wrap;align-items:center}
.counts .badge{font-size:13px;padding:1px 8px}
ol.attention{margin:0;padding:0;list-style:none}
ol.attention li{display:flex;gap:10px;align-items:baseline;padding:4px 0;
 border-top:1px solid #eef0f2}
ol.attention .who{font-weight:650;overflow-wrap:anywhere;min-width:0}
ol.attention .why{color:#444b55}
ol.plain{margin:0;padding-left:1.3em}
ul.plain{margin:0;padding:0;list-style:none}
.plain li{overflow-wrap:anywhere}
.table-box{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;width:100%}
th,td{padding:5px 8px;border-bottom:1px solid #e7e9ec;vertical-align:top}
th{text-align:left;font-size:12.5px;font-weight:650;background:#f3f4f6;line-height:1.25}
th.num,td.num{text-align:right;font-variant-numeric:tabular-nums}
td.num{white-space:nowrap}
td.name{overflow-wrap:anywhere;min-width:7em}
td.zero{color:#a0a6ae}
tr.rest td{color:#59606b;font-style:italic}
.empty{margin:4px 0;padding:12px 14px;border:1px dashed #b9c0c8;border-radius:6px;
 background:#fafbfc;color:#3b424c;font-size:14.5px}
figure{margin:0 0 14px;min-width:0}
figcaption{margin:0 0 4px;font-weight:650}
figcaption .unit{font-weight:400;color:#59606b}
figcaption .badge{margin-left:4px}
svg{display:block;width:100%;height:auto}
.smalls{display:grid;grid-template-columns:repeat(3,minmax(0,1fr));gap:12px 16px}
.smalls figcaption{font-size:13px;overflow-wrap:anywhere}
ul.legend{list-style:none;margin:2px 0 10px;padding:0;display:flex;flex-wrap:wrap;gap:4px 16px}
ul.legend li{overflow-wrap:anywhere}
.swatch{display:inline-block;width:10px;height:10px;margin-right:5px;border-radius:2px}
footer{color:#6b7280;font-size:12.5px;margin-top:16px;overflow-wrap:anywhere}
"""


def render_page(data: ReportData) -> str:
    """The report as one HTML document."""
    title = f"trio-broker report {fmt_time(data.since_ms)} to {fmt_time(data.until_ms)} UTC"
    sub = (
        f"Lag measured at {fmt_time(data.report_ms)} UTC · "
        f"{data.topics_scanned} topics, {data.partitions_scanned} partitions scanned · "
        "all times UTC"
    )
    body = "\n".join(
        (
            _summary(data),
            _groups_section(data),
            _lag_section(data),
            _worst_section(data),
            _throughput_section(data),
        )
    )
    footer = (
        "Every number comes from the Parquet tables written beside this file"
        + (f" in {esc(data.out)}" if data.out else "")
        + "; hover a rounded number for its exact value."
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body><main>\n"
        f'<header><h1>{esc(title)}</h1><p class="sub">{esc(sub)}</p></header>\n'
        f"{body}\n<footer>{footer}</footer>\n</main></body></html>\n"
    )


# -- the summary -------------------------------------------------------------------------


def _summary(data: ReportData) -> str:
    return (
        '<section id="summary" aria-label="Summary">'
        f"{_attention(data)}"
        '<div class="cards">'
        f"{_total_card('records', 'Records', data.records, data)}"
        f"{_total_card('bytes', 'Bytes', data.bytes, data)}"
        f"{_partitions_card(data)}{_busiest_card(data)}</div></section>"
    )


def _attention(data: ReportData) -> str:
    groups = data.groups
    if not groups:
        inner = (
            '<div class="empty">No consumer groups: no group committed offsets to these '
            f"logs before {esc(fmt_time(data.report_ms))} UTC.</div>"
        )
        return f'<div id="attention"><h2>Consumer groups</h2>{inner}</div>'
    counts = "".join(
        f'<span id="groups-{s}" data-value="{n}"><span class="badge {s}">{s}</span> '
        f"{n} group{'s' if n != 1 else ''}</span>"
        for s in ("ERR", "WARN", "OK")
        for n in [sum(1 for g in groups if g["status"] == s)]
    )
    bad = [g for g in groups if g["status"] != "OK"]
    if bad:
        items = "".join(
            f'<li data-group="{esc(g["group"])}"><span class="badge {g["status"]}">'
            f'{g["status"]}</span><span class="who">{esc(g["group"])}</span>'
            f'<span class="why">{esc(_why(g))}</span></li>'
            for g in bad[:_ATTENTION]
        )
        more = len(bad) - _ATTENTION
        if more > 0:
            items += f'<li class="more">and {more} more, in the table below</li>'
        listing = f'<ol class="attention">{items}</ol>'
    else:
        listing = (
            f'<div class="empty">All {len(groups)} groups are OK: none stopped, stalled, '
            "rewound or falling behind.</div>"
        )
    return (
        '<div id="attention"><h2>Consumer groups needing attention</h2>'
        f'<p class="counts">{counts}</p>{listing}</div>'
    )


def _why(g: dict) -> str:
    """`1 stopped, 2 lag growing · 85 records, 8 m 59 s behind`."""
    parts = [f"{g[column]} {word}" for _status, column, word in _PARTITION_STATUSES if g[column]]
    behind = (
        f"{fmt_count(g['total_lag_records'], 'records')}, "
        f"{fmt_duration(g['max_lag_seconds'])} behind"
    )
    return " · ".join([", ".join(parts), behind] if parts else [behind])


def _total_card(key: str, label: str, value: int, data: ReportData) -> str:
    if key == "bytes":
        big, exact = fmt_bytes(value), f"{fmt_exact(value)} bytes"
    else:
        big, exact = fmt_count(value), f"{fmt_exact(value)} records"
    p = data.previous
    if p is None:
        change = f'<div class="note">No earlier report in {esc(data.out) or "--out"}.</div>'
    else:
        before = p.bytes if key == "bytes" else p.records
        shown = fmt_bytes(before) if key == "bytes" else fmt_count(before, "records")
        trend = "up" if value > before else "down" if value < before else ""
        change = (
            f'<div id="previous-{key}" class="{trend}" data-value="{before}" '
            f'data-date="{p.date}" title="{fmt_exact(before)}">'
            f"{esc(fmt_change(value, before))} against {p.date} ({esc(shown)})</div>"
        )
    empty = (
        '<div class="note">Nothing was appended in the window.</div>'
        if key == "records" and not value
        else ""
    )
    return (
        f'<div class="card"><h3>{label}</h3>'
        f'<div id="total-{key}" class="big" data-value="{value}" title="{exact}">{esc(big)}</div>'
        f'<div id="exact-{key}" class="exact" data-value="{value}">{exact}</div>'
        f"{change}{empty}</div>"
    )


def _partitions_card(data: ReportData) -> str:
    counts = [
        (status, word, sum(g[column] or 0 for g in data.groups))
        for status, column, word in _PARTITION_STATUSES
    ]
    if not data.groups:
        inner = '<div class="empty">No groups, so no partition is behind.</div>'
    elif not any(n for _s, _w, n in counts):
        inner = '<div class="empty">None stopped, stalled, rewound or with lag growing.</div>'
    else:
        inner = '<ul class="plain">' + "".join(
            f'<li id="partitions-{s}" data-value="{n}"><b>{n}</b> {w}</li>'
            for s, w, n in counts
            if n
        )
        inner += "</ul>"
    return f'<div class="card"><h3>Partitions of groups</h3>{inner}</div>'


def _busiest_card(data: ReportData) -> str:
    if not data.topics:
        inner = '<div class="empty">No topic had traffic in the window.</div>'
    else:
        inner = '<ol class="plain" id="busiest">' + "".join(
            f'<li data-topic="{esc(t["topic"])}" data-records="{t["records"]}" '
            f'data-bytes="{t["bytes"]}"><b>{esc(t["topic"])}</b> '
            f"{esc(fmt_bytes(t['bytes']))}, {esc(fmt_count(t['records'], 'records'))}</li>"
            for t in data.topics[:_BUSIEST]
        )
        inner += "</ol>"
    return f'<div class="card"><h3>Busiest topics</h3>{inner}</div>'


# -- tables --------------------------------------------------------------------------------


# key in the row, heading, the tooltip of the heading (the Parquet column), format (None: a name)
Column = tuple[str, str, str, Callable[[object], str] | None]


def _table(table_id: str, rows: Sequence[dict], columns: Sequence[Column], rest: str = "") -> str:
    """A table whose numeric cells (those with a format) are right-aligned and carry their
    exact value; in a box that scrolls sideways on its own if the table cannot fit."""
    head = "".join(
        f'<th{" class=num" if fmt else ""} title="{esc(col)}">{esc(heading)}</th>'
        for _key, heading, col, fmt in columns
    )
    body = []
    for row in rows:
        cells = []
        for key, _heading, _col, fmt in columns:
            value = row.get(key)
            if key == "status":
                cells.append(
                    f'<td><span class="badge {esc(str(value))}">{esc(str(value))}</span></td>'
                )
            elif fmt is None:
                cells.append(f'<td class="name">{esc("" if value is None else str(value))}</td>')
            else:
                zero = " zero" if value == 0 and key in _GREY_ZEROS else ""
                exact = fmt_exact(value) if isinstance(value, int | float) else ""
                cells.append(
                    f'<td class="num{zero}" data-value="{"" if value is None else value}" '
                    f'title="{exact}">{esc(fmt(value))}</td>'
                )
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<div class="table-box"><table id="{table_id}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}{rest}</tbody></table></div>"
    )


def _n(value) -> str:
    return fmt_count(value)


def _groups_section(data: ReportData) -> str:
    if not data.groups:
        inner = '<div class="empty">No consumer groups to list.</div>'
    else:
        inner = _table(
            "group-table",
            data.groups,
            (
                ("group", "Group", "group", None),
                ("status", "Status", "status", None),
                ("partitions", "Partitions", "partitions", _n),
                ("total_lag_records", "Records behind", "total_lag_records", _n),
                (
                    "total_lag_committed",
                    "Offsets behind the LSO (read_committed)",
                    "total_lag_committed",
                    _n,
                ),
                ("max_lag_records", "Most behind, one partition", "max_lag_records", _n),
                ("max_lag_seconds", "Time behind", "max_lag_seconds", fmt_duration),
                ("stopped_partitions", "Stopped", "stopped_partitions", _n),
                ("stalled_partitions", "Stalled", "stalled_partitions", _n),
                ("rewind_partitions", "Rewound", "rewind_partitions", _n),
                ("warn_partitions", "Lag growing", "warn_partitions", _n),
            ),
        )
        inner = (
            '<p class="note">Burrow\'s statuses: a group is ERR when a partition stopped '
            "(no commit for longer than its last commits span), stalled (commits without "
            "moving) or rewound, WARN when its lag only grew. Worst first.</p>" + inner
        )
    return (
        f'<section id="groups"><h2>Consumer groups at {esc(fmt_time(data.report_ms))} UTC</h2>'
        f"{inner}</section>"
    )


def _worst_section(data: ReportData) -> str:
    if not data.worst:
        inner = (
            '<div class="empty">No partition is behind: every group has read all it '
            "committed to read.</div>"
            if data.groups
            else '<div class="empty">No consumer groups, so no partition is behind.</div>'
        )
    else:
        inner = _table(
            "worst-table",
            data.worst,
            (
                ("group", "Group", "group", None),
                ("topic", "Topic", "topic", None),
                ("partition", "Partition", "partition", str),
                ("status", "Status", "status", None),
                ("committed_offset", "Committed offset", "committed_offset", fmt_exact),
                ("log_end_offset", "Log end offset", "log_end_offset", fmt_exact),
                ("lag_records", "Records behind", "lag_records", _n),
                ("lag_seconds", "Time behind", "lag_seconds", fmt_duration),
            ),
        )
    return (
        f'<section id="worst"><h2>Partitions behind at {esc(fmt_time(data.report_ms))} UTC'
        f"</h2>{inner}</section>"
    )


def _topics_table(data: ReportData) -> str:
    bucket = fmt_duration(data.table_bucket_ms / 1000)
    shown = data.topics[:_TOPIC_ROWS]
    rows = [dict(t, share=(t["bytes"] or 0) / data.bytes if data.bytes else 0.0) for t in shown]
    rest = ""
    others = data.topics[_TOPIC_ROWS:]
    if others:
        records = sum(t["records"] or 0 for t in others)
        size = sum(t["bytes"] or 0 for t in others)
        rest = (
            f'<tr class="rest"><td class="name">{len(others)} more topics</td>'
            f'<td class="num" data-value="{records}" title="{fmt_exact(records)}">'
            f'{fmt_count(records)}</td><td class="num" data-value="{size}" '
            f'title="{fmt_exact(size)}">{fmt_bytes(size)}</td><td></td><td></td><td></td>'
            "<td></td></tr>"
        )
    return _table(
        "topic-table",
        rows,
        (
            ("topic", "Topic", "topic", None),
            ("records", "Records", "records", _n),
            ("bytes", "Bytes", "bytes", fmt_bytes),
            ("batches", "Batches", "batches", _n),
            (
                "peak_records_per_sec",
                f"Peak records/s ({bucket} buckets)",
                "max(records_per_sec)",
                fmt_rate,
            ),
            (
                "peak_bytes_per_sec",
                f"Peak bytes/s ({bucket} buckets)",
                "max(bytes_per_sec)",
                fmt_byte_rate,
            ),
            ("share", "Share of bytes", "bytes / all bytes", lambda v: f"{v * 100:.1f} %"),
        ),
        rest,
    )


# -- charts --------------------------------------------------------------------------------


def _lag_section(data: ReportData) -> str:
    bad = [g for g in data.groups if g["status"] != "OK"]
    head = '<section id="lag"><h2>Lag over the window, groups in ERR or WARN</h2>'
    if not data.groups:
        return head + '<div class="empty">No consumer groups, so no lag to chart.</div></section>'
    if not bad:
        return (
            head + f'<div class="empty">No group is in ERR or WARN (all {len(data.groups)} '
            "are OK), so there is no lag to chart.</div></section>"
        )
    by_name = {g["group"]: g for g in data.groups}
    bucket = fmt_duration(data.lag_bucket_ms / 1000)
    figures = []
    for n, (name, points) in enumerate(data.lag.items()):
        g = by_name[name]
        svg = line_chart(
            {name: points},
            x_range=(data.since_ms, data.report_ms),
            y_kind="count",
            label=f"Records behind of group {name}",
            width=370,
            height=170,
        )
        figures.append(
            f'<figure class="chart" id="lag-{n}" data-kind="lag" data-group="{esc(name)}" '
            f'data-bucket-ms="{data.lag_bucket_ms}">'
            f'<figcaption>{esc(name)}<span class="badge {g["status"]}">{g["status"]}</span>'
            f'<br><span class="unit">{esc(_why(g))}</span></figcaption>{svg}</figure>'
        )
    more = len(bad) - len(data.lag)
    note = (
        f'<p class="note">Records behind, summed over each group\'s partitions (the last '
        f"commit of each {bucket} bucket); the hollow point at the right edge is the lag at "
        "report time, dashed from the last commit.</p>"
    )
    tail = (
        f'<p class="note">and {more} more groups in ERR or WARN (see the table).</p>'
        if more > 0
        else ""
    )
    return head + note + f'<div class="smalls">{"".join(figures)}</div>{tail}</section>'


def _throughput_section(data: ReportData) -> str:
    head = '<section id="throughput"><h2>Throughput</h2>'
    if not data.topics:
        return head + (
            f'<div class="empty">No records were appended between {esc(fmt_time(data.since_ms))} '
            f"and {esc(fmt_time(data.until_ms))} UTC.</div></section>"
        )
    bucket = data.throughput_bucket_ms
    x0, x1 = data.throughput_range
    seconds = bucket < 60_000
    width = fmt_duration(bucket / 1000)
    if data.throughput_zoomed and data.traffic:
        first, last = data.traffic
        note = (
            f"All the window's traffic came between {fmt_time(first, seconds=True)} and "
            f"{fmt_time(last, seconds=True, date=False)} UTC; the charts show "
            f"{fmt_time(x0, seconds=seconds, date=False)} to "
            f"{fmt_time(x1, seconds=seconds, date=False)} in {width} buckets."
        )
    else:
        note = f"In {width} buckets."
    count = len(data.throughput)
    if len(data.topics) > count:
        note += f" The {count} busiest of {len(data.topics)} topics."
    charts = []
    for kind, series, caption, unit, y_kind in (
        ("records", data.throughput, "Records per second", "records/s", "rate"),
        ("bytes", data.byte_rate, "Bytes per second", "bytes/s", "byte_rate"),
    ):
        svg = line_chart(
            series,
            x_range=(x0, x1),
            y_kind=y_kind,
            label=f"{caption} by topic",
            width=1110,
            height=230,
            zero_fill_bucket_ms=bucket,
        )
        charts.append(
            f'<figure class="chart" id="throughput-{kind}" data-kind="{kind}" '
            f'data-bucket-ms="{bucket}"><figcaption>{caption} <span class="unit">'
            f"({unit}, by topic)</span></figcaption>{svg}</figure>"
        )
    return (
        head
        + f'<p class="note">{esc(note)}</p>{legend(list(data.throughput))}'
        + "".join(charts)
        + f"<h2>Topics</h2>{_topics_table(data)}</section>"
    )
