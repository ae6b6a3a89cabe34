"""The nightly report job: scan the log dirs, write the Parquet tables and the report.

Run it through `trio-broker report ...`, or hand this file to spark-submit:

    spark-submit --master yarn analytics/job.py --log-dirs /data/kafka --out /data/reports

Everything heavy runs in Spark; the driver collects only the final small tables the
HTML and Markdown report is drawn from.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import attrs

__all__ = [
    "TABLES",
    "ReportOptions",
    "ReportResult",
    "add_arguments",
    "build_session",
    "main",
    "options_from_args",
    "parse_bucket",
    "parse_time",
    "run_report",
]

logger = logging.getLogger(__name__)

TABLES = ("batches", "partition_state", "topic_throughput", "group_partition_lag", "group_summary")
DAY_MS = 86_400_000
# One shuffle partition per this many bytes of segments: a batch header becomes a row of
# ~100 bytes, so even 1 KiB batches shuffle ~100 MiB per partition at this ratio.
_SEGMENT_BYTES_PER_SHUFFLE_PARTITION = 1024**3
_MAX_SHUFFLE_PARTITIONS = 2000


@attrs.frozen(kw_only=True)
class ReportOptions:
    log_dirs: tuple[str, ...]
    out: str
    since_ms: int
    until_ms: int
    bucket_ms: int = 60_000
    master: str | None = None
    intervals: int = 10
    html: bool = True
    # The present, in epoch ms (None: the clock when the report runs). Lag is measured at
    # the earlier of this and until_ms.
    now_ms: int | None = None


@attrs.frozen(kw_only=True)
class ReportResult:
    out: Path
    html_path: Path | None
    markdown_path: Path | None
    scan_seconds: float
    segments: int
    segment_bytes: int
    summary: list[dict]


def parse_time(text: str) -> int:
    """Epoch milliseconds from an ISO 8601 time (UTC unless it says otherwise) or an int."""
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def parse_bucket(text: str) -> int:
    """`30s`, `1m`, `5m`, `1h` -> milliseconds."""
    match = re.fullmatch(r"(\d+)\s*(ms|s|m|h)", text.strip())
    if not match or int(match.group(1)) == 0:
        raise argparse.ArgumentTypeError(f"bucket must look like 30s, 1m or 1h, not {text!r}")
    scale = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}[match.group(2)]
    return int(match.group(1)) * scale


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-dirs", required=True, help="comma-separated broker log dirs")
    parser.add_argument("--out", required=True, help="directory for the tables and the report")
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--date", help="the UTC day to report, YYYY-MM-DD (default: yesterday)")
    when.add_argument("--since", help="start of the window: ISO 8601 time or epoch ms")
    parser.add_argument("--until", help="end of the window (with --since; default: now)")
    parser.add_argument("--master", help="Spark master: local[*], spark://host:7077, yarn")
    parser.add_argument("--bucket", default="1m", type=parse_bucket, help="throughput bucket")
    parser.add_argument(
        "--intervals",
        type=int,
        default=10,
        help="commits per partition Burrow's rules look at (default 10)",
    )
    parser.add_argument("--no-html", action="store_true", help="write the tables only")


def options_from_args(args: argparse.Namespace, *, now_ms: int | None = None) -> ReportOptions:
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if args.until and not args.since:
        raise ValueError("--until needs --since")
    if args.since:
        since = parse_time(args.since)
        until = parse_time(args.until) if args.until else now_ms
    else:
        if args.date:
            day = dt.date.fromisoformat(args.date)
        else:
            day = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC).date() - dt.timedelta(days=1)
        since = int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp() * 1000)
        until = since + DAY_MS
    if until <= since:
        raise ValueError("the window is empty: --until must be after --since")
    return ReportOptions(
        log_dirs=tuple(d for d in args.log_dirs.split(",") if d),
        out=args.out,
        since_ms=since,
        until_ms=until,
        bucket_ms=args.bucket,
        master=args.master,
        intervals=args.intervals,
        html=not args.no_html,
        now_ms=now_ms,
    )


def build_session(
    master: str | None = None,
    app_name: str = "trio-broker-report",
    conf: dict[str, str] | None = None,
):
    """A SparkSession set up for the report (UTC, adaptive shuffles, dynamic overwrite);
    `conf`: more Spark settings (`spark.executor.memory`, ...)."""
    from pyspark.sql import SparkSession

    # Python workers must import trio_broker: run them with this interpreter unless the
    # deployment says otherwise (a cluster sets PYSPARK_PYTHON to its own environment).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return (
        builder.config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.sql.adaptive.coalescePartitions.enabled", "true")
        .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )


def run_report(spark, options: ReportOptions) -> ReportResult:
    """Build and write every table for the window, then the HTML and Markdown report."""
    from pyspark import StorageLevel

    from trio_broker.analytics import datasource, tables
    from trio_broker.analytics.segments import (
        CONSUMER_OFFSETS_TOPIC,
        list_segments,
        read_log_start_offsets,
    )

    started = time.monotonic()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    datasource.register(spark)
    segments = list_segments(options.log_dirs)
    data_segments = [s for s in segments if s.topic != CONSUMER_OFFSETS_TOPIC]
    total_bytes = sum(s.size for s in segments)
    parallelism = spark.sparkContext.defaultParallelism
    shuffle = max(
        parallelism,
        min(_MAX_SHUFFLE_PARTITIONS, math.ceil(total_bytes / _SEGMENT_BYTES_PER_SHUFFLE_PARTITION)),
    )
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle))
    logger.info(
        "%d segments, %d bytes in %s; %d shuffle partitions",
        len(segments),
        total_bytes,
        options.log_dirs,
        shuffle,
    )

    paths = ",".join(str(Path(d).resolve()) for d in options.log_dirs)
    reader_opts = {"paths": paths, "parallelism": str(parallelism)}
    batches = (
        spark.read.format("trio_batches")
        .options(**reader_opts)
        .load()
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    commits = (
        spark.read.format("trio_commits")
        .options(**reader_opts)
        .load()
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    starts = read_log_start_offsets(options.log_dirs)
    segment_rows = [
        (s.topic, s.partition, s.base_offset, s.size, starts.get((s.topic, s.partition)))
        for s in data_segments
    ]
    segments_df = spark.createDataFrame(
        segment_rows,
        "topic string, partition int, base_offset long, size long, start_checkpoint long",
    )

    now_ms = int(time.time() * 1000) if options.now_ms is None else options.now_ms
    window = tables.ReportWindow(
        options.since_ms, options.until_ms, options.bucket_ms, now_ms=now_ms
    )
    state = tables.partition_state(batches, segments_df, window).persist()
    lag = tables.group_partition_lag(
        batches, commits, state, window, intervals=options.intervals
    ).persist()
    frames = {
        "batches": tables.batches_table(batches, window),
        "partition_state": state,
        "topic_throughput": tables.topic_throughput(batches, window).persist(),
        "group_partition_lag": lag,
        "group_summary": tables.group_summary(lag).persist(),
    }
    out = Path(options.out)
    for name in TABLES:
        # Named in the Spark UI (and its REST API's stages) by the table being written.
        spark.sparkContext.setJobDescription(f"trio-broker report: write {name}")
        frames[name].write.mode("overwrite").partitionBy("date").parquet(str(out / name))
    spark.sparkContext.setJobDescription("trio-broker report: collect the report's data")
    scan_seconds = time.monotonic() - started

    html_path = md_path = None
    if options.html:
        from trio_broker.analytics import report

        data = report.collect_report_data(frames, window, out=out)
        html_path, md_path = report.write_report(out, data, window)
        # The report collected group_summary already: one Spark job less.
        summary = sorted(data.groups, key=lambda g: g["group"])
    else:
        summary = [row.asDict() for row in frames["group_summary"].orderBy("group").collect()]
    spark.sparkContext.setJobDescription(None)
    for df in (batches, commits, state, lag, frames["topic_throughput"], frames["group_summary"]):
        df.unpersist()
    return ReportResult(
        out=out,
        html_path=html_path,
        markdown_path=md_path,
        scan_seconds=scan_seconds,
        segments=len(segments),
        segment_bytes=total_bytes,
        summary=summary,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for spark-submit (and `python -m trio_broker.analytics.job`)."""
    parser = argparse.ArgumentParser(prog="trio-broker-report", description=__doc__.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        options = options_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    spark = build_session(options.master)
    try:
        result = run_report(spark, options)
    finally:
        spark.stop()
    print(f"report written to {result.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
