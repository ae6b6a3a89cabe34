"""The report a person reads: one self-contained HTML file and a short Markdown summary.

This module pulls the small tables the report is drawn from to the driver
(`collect_report_data`) and writes the files; `trio_broker.analytics.page` lays out the
HTML and `trio_broker.analytics.charts` draws its SVG. Every number shown comes from the
tables the job writes: totals are sums of `topic_throughput`, group figures are
`group_summary`'s, lag points are `group_partition_lag`'s; chart buckets are re-counted
from the window's batches with the same filter `topic_throughput` uses.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import attrs

from trio_broker.analytics.charts import (
    ChartPoint,
    Series,
    bucket_for_span,
    throughput_range,
)
from trio_broker.analytics.units import fmt_count, fmt_duration, fmt_time

__all__ = [
    "PreviousReport",
    "ReportData",
    "STATUS_RANK",
    "collect_report_data",
    "render_html",
    "render_markdown",
    "write_report",
]

TOP_TOPICS = 8  # series in the throughput charts
LAG_CHARTS = 12  # small lag charts, for the worst groups in ERR or WARN
WORST_PARTITIONS = 20
STATUS_RANK = {"ERR": 2, "WARN": 1, "OK": 0}


@attrs.frozen(kw_only=True)
class PreviousReport:
    """The totals of the latest earlier day found in `--out`'s topic_throughput."""

    date: str
    records: int
    bytes: int


@attrs.frozen(kw_only=True)
class ReportData:
    since_ms: int
    until_ms: int
    report_ms: int  # when lag is measured: the window's end, or the present if earlier
    table_bucket_ms: int  # topic_throughput's bucket (--bucket)
    out: str
    topics: list[dict]  # per topic: records, bytes, batches, peak rates; most bytes first
    records: int
    bytes: int
    batches: int
    partitions_scanned: int
    topics_scanned: int
    previous: PreviousReport | None
    traffic: tuple[int, int] | None  # first and last batch maxTimestamp in the window
    throughput_bucket_ms: int
    throughput_range: tuple[int, int]
    throughput_zoomed: bool  # the range is the traffic's span, not the window
    throughput: Series  # topic -> records per bucket (y: records/s)
    byte_rate: Series  # topic -> bytes per bucket (y: bytes/s)
    groups: list[dict]  # group_summary rows, worst first
    lag_bucket_ms: int
    lag: Series  # group -> records behind per bucket, then at report time (ERR/WARN only)
    worst: list[dict]  # partitions behind at report time, longest lag first


def group_order(g: dict) -> tuple:
    """Worst first: ERR, WARN, OK; then the oldest unconsumed record, the most records."""
    return (
        -STATUS_RANK.get(g["status"], 0),
        -(g["max_lag_seconds"] or 0),
        -(g["total_lag_records"] or 0),
        g["group"],
    )


def collect_report_data(frames: dict, window, *, out: str | Path | None = None) -> ReportData:
    """Pull the small tables the report is drawn from to the driver.

    `out` is where the job writes its tables; the latest day before the window found there
    is the "previous report" the totals are compared with."""
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
            F.max("records_per_sec").alias("peak_records_per_sec"),
            F.max("bytes_per_sec").alias("peak_bytes_per_sec"),
        )
        .orderBy(F.col("bytes").desc(), "topic")
        .collect()
    ]
    scanned = (
        frames["partition_state"]
        .agg(F.count("*").alias("partitions"), F.countDistinct("topic").alias("topics"))
        .first()
    )

    # Throughput buckets sized for the traffic's span, counted from the same batches
    # topic_throughput counts (in the window by maxTimestamp, no markers, nothing aborted).
    data = frames["batches"].filter(~(F.col("is_control") | F.col("is_aborted")))
    first, last = data.agg(F.min("max_timestamp"), F.max("max_timestamp")).first()
    end = min(window.until_ms, max(window.report_ms, (last or 0) + 1))
    bucket, x0, x1 = throughput_range(first, last, window.since_ms, end)
    top_topics = [t["topic"] for t in topics[:TOP_TOPICS]]
    throughput: Series = {t: [] for t in top_topics}
    byte_rate: Series = {t: [] for t in top_topics}
    if top_topics:
        rows = (
            data.filter(F.col("topic").isin(top_topics))
            .groupBy("topic", (F.floor(F.col("max_timestamp") / bucket) * bucket).alias("b"))
            .agg(F.sum("record_count").alias("records"), F.sum("batch_bytes").alias("bytes"))
            .orderBy("topic", "b")
            .collect()
        )
        for r in rows:
            b = int(r.b)
            seconds = (min(b + bucket, window.until_ms) - max(b, window.since_ms)) / 1000
            when = f"{r.topic}, {fmt_time(b, seconds=bucket < 60_000)} UTC"
            throughput[r.topic].append(
                ChartPoint(
                    x_ms=b + bucket // 2,
                    y=r.records / seconds,
                    count=int(r.records),
                    note=f"{when}: {r.records:,} records",
                )
            )
            byte_rate[r.topic].append(
                ChartPoint(
                    x_ms=b + bucket // 2,
                    y=r.bytes / seconds,
                    count=int(r.bytes),
                    note=f"{when}: {r.bytes:,} bytes",
                )
            )

    groups = sorted(
        (r.asDict() for r in frames["group_summary"].collect()),
        key=group_order,
    )
    lag = frames["group_partition_lag"]
    lag_bucket = bucket_for_span(window.report_ms - window.since_ms)
    charted = [g for g in groups if g["status"] != "OK"][:LAG_CHARTS]
    lag_series: Series = {g["group"]: [] for g in charted}
    if charted:
        names = list(lag_series)
        for r in group_lag_series(
            lag.filter(F.col("group").isin(names)), window, bucket_ms=lag_bucket
        ).collect():
            lag_series[r.group].append(
                ChartPoint(
                    x_ms=r.bucket_ms + lag_bucket // 2,
                    y=float(r.lag_records),
                    count=int(r.lag_records),
                    note=f"{r.group}, {fmt_time(r.bucket_ms)} UTC: "
                    f"{fmt_count(r.lag_records, 'records')} behind",
                )
            )
        for g in charted:
            lag_series[g["group"]].append(
                ChartPoint(
                    x_ms=window.report_ms,
                    y=float(g["total_lag_records"] or 0),
                    count=int(g["total_lag_records"] or 0),
                    note=f"{g['group']} at report time: {g['total_lag_records']:,} records, "
                    f"{fmt_duration(g['max_lag_seconds'])} behind",
                    measured_between=False,
                )
            )
    worst = [
        r.asDict()
        for r in lag.filter(
            (F.col("kind") == "report") & ((F.col("lag_offsets") > 0) | (F.col("status") != "OK"))
        )
        .orderBy(
            F.col("lag_seconds").desc(), F.col("lag_records").desc(), "group", "topic", "partition"
        )
        .limit(WORST_PARTITIONS)
        .collect()
    ]
    return ReportData(
        since_ms=window.since_ms,
        until_ms=window.until_ms,
        report_ms=window.report_ms,
        table_bucket_ms=window.bucket_ms,
        out=str(out or ""),
        topics=topics,
        records=sum(int(t["records"] or 0) for t in topics),
        bytes=sum(int(t["bytes"] or 0) for t in topics),
        batches=sum(int(t["batches"] or 0) for t in topics),
        partitions_scanned=int(scanned["partitions"]),
        topics_scanned=int(scanned["topics"]),
        previous=_previous_report(tp.sparkSession, out, window) if out else None,
        traffic=None if first is None else (int(first), int(last)),
        throughput_bucket_ms=bucket,
        throughput_range=(x0, x1),
        throughput_zoomed=(x0, x1) != (window.since_ms, end),
        throughput=throughput,
        byte_rate=byte_rate,
        groups=groups,
        lag_bucket_ms=lag_bucket,
        lag=lag_series,
        worst=worst,
    )


def _previous_report(spark, out: str | Path, window) -> PreviousReport | None:
    """The totals of the latest `date` of `out`/topic_throughput before the window's first
    day (what the run of the day before wrote), or None when there is none."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    first_day = dt.datetime.fromtimestamp(window.since_ms / 1000, dt.UTC).date()
    try:
        table = spark.read.parquet(str(Path(out) / "topic_throughput"))
    except AnalysisException:  # nothing written there yet
        return None
    latest = (
        table.filter(F.col("date") < F.lit(first_day))
        .groupBy("date")
        .agg(F.sum("records").alias("records"), F.sum("bytes").alias("bytes"))
        .orderBy(F.col("date").desc())
        .limit(1)
        .collect()
    )
    if not latest:
        return None
    (row,) = latest
    return PreviousReport(
        date=str(row.date), records=int(row.records or 0), bytes=int(row.bytes or 0)
    )


def render_html(data: ReportData) -> str:
    from trio_broker.analytics.page import render_page

    return render_page(data)


def render_markdown(data: ReportData) -> str:
    from trio_broker.analytics.units import fmt_bytes, fmt_change

    by_status = {s: sum(1 for g in data.groups if g["status"] == s) for s in STATUS_RANK}
    change = ""
    if data.previous is not None:
        p = data.previous
        change = (
            f"; against {p.date}: {fmt_change(data.records, p.records)} records, "
            f"{fmt_change(data.bytes, p.bytes)} bytes"
        )
    lines = [
        f"# trio-broker report {fmt_time(data.since_ms)} to {fmt_time(data.until_ms)} UTC",
        "",
        f"- topics with traffic: {len(data.topics)}, records: {data.records}, "
        f"bytes: {data.bytes} ({fmt_bytes(data.bytes)}){change}",
        f"- lag measured at {fmt_time(data.report_ms)} UTC",
        f"- groups: {len(data.groups)}, not OK: {by_status['ERR'] + by_status['WARN']} "
        f"(ERR {by_status['ERR']}, WARN {by_status['WARN']}, OK {by_status['OK']})",
        "",
        "| group | status | total lag (records) | max lag (s) | stalled | stopped |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for g in sorted(data.groups, key=lambda g: g["group"]):
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
