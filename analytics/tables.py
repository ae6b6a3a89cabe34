"""The report's tables, as Spark DataFrames built from batch headers and offset commits.

Every join between commits and batches is an "as of" lookup (the log end offset at a
time, the first batch at or after an offset). They are done as a union of both sides
sorted per partition with a running aggregate over the sort, which costs one sort of the
partition's rows instead of the commits x batches of a range join.

Definitions (all per topic partition):

- log end offset at time T: one past the last offset of every batch whose maxTimestamp
  is <= T (the broker's time index answers the same question the same way).
- `lag_offsets` = log end offset at T - committed offset (what Burrow and
  kafka-consumer-groups call lag); `lag_records` counts the records actually stored in
  between, which differs on compacted topics (gaps) and transactional ones (markers).
- last stable offset (LSO) at time T: the first offset of the earliest transaction still
  open at T (its first data batch in the log, its COMMIT/ABORT marker not yet, by
  maxTimestamp), else the log end offset at T: how far a read_committed consumer can read.
- `lag_committed` = LSO at T - committed offset: the lag of a group that reads committed
  (the log does not say which groups do; for the others `lag_offsets` is theirs).
- report time: the earlier of the window's end and the present. A window that contains
  the present (today's report) measures lag now, not at a midnight hours ahead.
- `lag_seconds` = T - timestamp of the first record not yet consumed, from the header of
  the batch holding it: its baseTimestamp (or maxTimestamp for LogAppendTime). It is exact
  when the committed offset is a batch boundary, which is where consumers commit; inside a
  CreateTime batch it is an upper bound. Zero when there is no lag.
- `status` follows Burrow's evaluator over the last `intervals` commits: OK, WARN, STALL,
  STOP, REWIND.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

__all__ = [
    "BURROW_INTERVALS",
    "ReportWindow",
    "batches_table",
    "group_lag_series",
    "group_partition_lag",
    "group_summary",
    "partition_state",
    "topic_throughput",
    "transactions",
]

BURROW_INTERVALS = 10  # Burrow's default `intervals`: commits kept per partition
_TP = ["topic", "partition"]
_GTP = ["group", "topic", "partition"]


class ReportWindow:
    """The report's time range [since_ms, until_ms), bucket width, and report time.

    `report_ms`, when lag is measured, is the earlier of the window's end and `now_ms` (the
    present; None: the window's end): lag at a time still to come would count the hours
    until then as lag and call every consumer stopped."""

    def __init__(
        self, since_ms: int, until_ms: int, bucket_ms: int = 60_000, *, now_ms: int | None = None
    ) -> None:
        if until_ms <= since_ms:
            raise ValueError("until must be after since")
        if bucket_ms <= 0:
            raise ValueError("bucket must be positive")
        self.since_ms = since_ms
        self.until_ms = until_ms
        self.bucket_ms = bucket_ms
        self.report_ms = until_ms if now_ms is None else max(since_ms, min(until_ms, now_ms))

    def contains(self, ts: Column) -> Column:
        return (ts >= F.lit(self.since_ms)) & (ts < F.lit(self.until_ms))

    @property
    def report_date(self) -> Column:
        return F.to_date(F.timestamp_millis(F.lit(self.until_ms - 1)))


def _date_of(ms: Column) -> Column:
    return F.to_date(F.timestamp_millis(ms))


def _is_data() -> Column:
    """A batch of records a read_committed consumer gets: not a transaction marker (a
    control batch), not part of an aborted transaction."""
    return ~(F.col("is_control") | F.col("is_aborted"))


def transactions(batches: DataFrame) -> DataFrame:
    """One row per transaction of a producer on a partition: `first_offset` (of its first
    data batch) and `end_ms` (its marker's maxTimestamp; null while the transaction is
    open). A producer's transactions on a partition follow one another, each ended by its
    marker, so a transaction is the run of its batches up to and including a marker; a
    marker with no data before it (one written again after a coordinator's restart) is
    not a transaction."""
    before = (
        Window.partitionBy(*_TP, "producer_id")
        .orderBy("base_offset")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    control = F.col("is_control")
    return (
        batches.filter(F.col("is_transactional"))
        .withColumn("_seq", F.coalesce(F.sum(control.cast("int")).over(before), F.lit(0)))
        .groupBy(*_TP, "producer_id", "_seq")
        .agg(
            F.min(F.when(~control, F.col("base_offset"))).alias("first_offset"),
            F.max(F.when(control, F.col("max_timestamp"))).alias("end_ms"),
        )
        .filter(F.col("first_offset").isNotNull())
        .select(*_TP, "producer_id", "first_offset", "end_ms")
    )


def batches_table(batches: DataFrame, window: ReportWindow) -> DataFrame:
    """The batches appended in the window, with their date (by maxTimestamp)."""
    return batches.filter(window.contains(F.col("max_timestamp"))).withColumn(
        "date", _date_of(F.col("max_timestamp"))
    )


def partition_state(batches: DataFrame, segments: DataFrame, window: ReportWindow) -> DataFrame:
    """One row per partition: offsets, bytes, segments and timestamps, as scanned.

    `segments` has topic, partition, base_offset, size and start_checkpoint (the log dir's
    log-start-offset checkpoint, or null) for every segment file, empty ones included, so
    an empty partition still has a row.
    """
    seg = segments.groupBy(*_TP).agg(
        F.count("*").alias("segments"),
        F.sum("size").alias("bytes"),
        F.min("base_offset").alias("first_segment_offset"),
        F.max("base_offset").alias("last_segment_offset"),
        F.max("start_checkpoint").alias("start_checkpoint"),
    )
    data = batches.groupBy(*_TP).agg(
        F.max(F.col("last_offset") + 1).alias("next_offset"),
        F.count("*").alias("batches"),
        F.sum(F.when(_is_data(), F.col("record_count")).otherwise(0)).alias("records"),
        F.min(F.when(F.col("base_timestamp") >= 0, F.col("base_timestamp"))).alias("first_ts"),
        F.max(F.when(F.col("max_timestamp") >= 0, F.col("max_timestamp"))).alias("last_ts"),
    )
    open_txns = (
        transactions(batches)
        .filter(F.col("end_ms").isNull())
        .groupBy(*_TP)
        .agg(F.min("first_offset").alias("open_first"))
    )
    leo = F.greatest("last_segment_offset", F.coalesce("next_offset", F.lit(0)))
    return (
        seg.join(data, _TP, "left")
        .join(open_txns, _TP, "left")
        .select(
            *_TP,
            F.greatest("first_segment_offset", F.coalesce("start_checkpoint", F.lit(0))).alias(
                "log_start_offset"
            ),
            leo.alias("log_end_offset"),
            F.least(leo, F.coalesce("open_first", leo)).alias("last_stable_offset"),
            F.coalesce("records", F.lit(0)).alias("records"),
            F.coalesce("batches", F.lit(0)).alias("batches"),
            "bytes",
            "segments",
            F.timestamp_millis("first_ts").alias("first_timestamp"),
            F.timestamp_millis("last_ts").alias("last_timestamp"),
        )
        .withColumn("date", window.report_date)
    )


def topic_throughput(batches: DataFrame, window: ReportWindow) -> DataFrame:
    """Per topic and time bucket: batches, records and bytes, their rates, batch percentiles.

    Control batches (transaction markers) and aborted transactions are left out. Percentiles are
    Spark's percentile_approx, which returns a member of the data (nearest rank).
    """
    seconds = window.bucket_ms / 1000.0
    bucket = F.floor(F.col("max_timestamp") / window.bucket_ms) * window.bucket_ms
    data = batches.filter(window.contains(F.col("max_timestamp")) & _is_data())
    return (
        data.withColumn("bucket_ms", bucket.cast("long"))
        .groupBy("topic", "bucket_ms")
        .agg(
            F.count("*").alias("batches"),
            F.sum("record_count").cast("long").alias("records"),
            F.sum("batch_bytes").cast("long").alias("bytes"),
            F.percentile_approx("batch_bytes", [0.5, 0.99], 10000).alias("_pb"),
            F.percentile_approx("record_count", [0.5, 0.99], 10000).alias("_pr"),
        )
        .select(
            "topic",
            F.timestamp_millis("bucket_ms").alias("bucket_start"),
            "batches",
            "records",
            "bytes",
            (F.col("records") / seconds).alias("records_per_sec"),
            (F.col("bytes") / seconds).alias("bytes_per_sec"),
            F.col("_pb")[0].alias("p50_batch_bytes"),
            F.col("_pb")[1].alias("p99_batch_bytes"),
            F.col("_pr")[0].alias("p50_batch_records"),
            F.col("_pr")[1].alias("p99_batch_records"),
            _date_of(F.col("bucket_ms")).alias("date"),
        )
    )


def _batch_positions(batches: DataFrame) -> DataFrame:
    """Batches with the number of data records stored before each (running sum by offset)."""
    records = F.when(_is_data(), F.col("record_count")).otherwise(0)
    before = (
        Window.partitionBy(*_TP).orderBy("base_offset").rowsBetween(Window.unboundedPreceding, -1)
    )
    return batches.select(
        *_TP,
        "base_offset",
        "last_offset",
        "base_timestamp",
        "max_timestamp",
        "log_append_time",
        records.alias("records"),
    ).withColumn("records_before", F.coalesce(F.sum("records").over(before), F.lit(0)))


def _commit_events(commits: DataFrame, window: ReportWindow) -> DataFrame:
    """Each commit before `until`, plus one 'report' event per partition at report time."""
    commits = commits.filter(F.col("commit_timestamp") < window.until_ms)
    events = commits.select(
        *_GTP,
        F.lit("commit").alias("kind"),
        F.col("commit_timestamp").alias("t"),
        "committed_offset",
        "record_offset",
    )
    latest = Window.partitionBy(*_GTP).orderBy(
        F.col("commit_timestamp").desc(), F.col("record_offset").desc()
    )
    report = (
        commits.withColumn("_n", F.row_number().over(latest))
        .filter(F.col("_n") == 1)
        .select(
            *_GTP,
            F.lit("report").alias("kind"),
            F.lit(window.report_ms).cast("long").alias("t"),
            "committed_offset",
            F.lit(2**62).cast("long").alias("record_offset"),  # sorts after every commit
        )
    )
    return events.unionByName(report)


def _with_log_end_at(events: DataFrame, positions: DataFrame) -> DataFrame:
    """Add `log_end_offset` and `records_through` as of each event's time `t`."""
    side = positions.select(
        *_TP,
        F.col("max_timestamp").alias("t"),
        F.lit(0).alias("_side"),  # a batch stamped exactly at t is part of the log at t
        (F.col("last_offset") + 1).alias("_next"),
        (F.col("records_before") + F.col("records")).alias("_through"),
    )
    ev = events.withColumn("_side", F.lit(1))
    w = Window.partitionBy(*_TP).orderBy("t", "_side").rowsBetween(Window.unboundedPreceding, 0)
    return (
        ev.unionByName(side, allowMissingColumns=True)
        .withColumn("log_end_offset", F.max("_next").over(w))
        .withColumn("records_through", F.max("_through").over(w))
        .filter(F.col("_side") == 1)
        .drop("_side", "_next", "_through")
    )


def _with_open_transaction_at(events: DataFrame, txns: DataFrame) -> DataFrame:
    """Add `_open_first`: the least first offset of the transactions not ended at each
    event's time `t` (null when none). A transaction whose first batch came after `t`
    starts at or after the log end offset at `t`, which bounds the LSO anyway, so only the
    end needs comparing: walking time downwards, the transactions seen before an event are
    those ended after it (or never), and a running minimum is the answer."""
    side = txns.select(
        *_TP,
        F.coalesce("end_ms", F.lit(2**62)).cast("long").alias("t"),
        F.lit(0).alias("_side"),  # ended exactly at t: no longer open at t
        F.col("first_offset").alias("_first"),
    )
    ev = events.withColumn("_side", F.lit(1))
    w = (
        Window.partitionBy(*_TP)
        .orderBy(F.col("t").desc(), F.col("_side").desc())
        .rowsBetween(Window.unboundedPreceding, 0)
    )
    return (
        ev.unionByName(side, allowMissingColumns=True)
        .withColumn("_open_first", F.min("_first").over(w))
        .filter(F.col("_side") == 1)
        .drop("_side", "_first")
    )


def _with_first_unconsumed(events: DataFrame, positions: DataFrame) -> DataFrame:
    """Add `_b`: the first batch whose last offset is >= the committed offset."""
    side = positions.select(
        *_TP,
        F.col("last_offset").alias("_key"),
        F.lit(0).alias("_side"),
        F.struct(
            "base_offset",
            "last_offset",
            "base_timestamp",
            "max_timestamp",
            "log_append_time",
            "records",
            "records_before",
        ).alias("_batch"),
    )
    ev = events.withColumn("_key", F.col("committed_offset")).withColumn("_side", F.lit(1))
    # Walking offsets downwards, the last batch seen before an event is the closest one
    # at or above its committed offset; a growing frame keeps this one pass.
    w = (
        Window.partitionBy(*_TP)
        .orderBy(F.col("_key").desc(), F.col("_side"))
        .rowsBetween(Window.unboundedPreceding, 0)
    )
    return (
        ev.unionByName(side, allowMissingColumns=True)
        .withColumn("_b", F.last("_batch", ignorenulls=True).over(w))
        .filter(F.col("_side") == 1)
        .drop("_key", "_side", "_batch")
    )


def _burrow_status(w: str, current_lag: str, now: str) -> Column:
    """Burrow's partition status from a window array of struct(t, offset, lag)."""
    pairs = f"filter(sequence(1, size({w})), i -> i > 1)"
    at = f"element_at({w}, i)"
    prev = f"element_at({w}, i - 1)"
    first = f"element_at({w}, 1)"
    last = f"element_at({w}, -1)"
    return F.expr(
        f"""CASE WHEN {current_lag} > 0 AND forall({w}, x -> x.lag > 0) THEN CASE
              WHEN exists({pairs}, i -> {at}.offset < {prev}.offset) THEN 'REWIND'
              WHEN ({now} - {last}.t) > ({last}.t - {first}.t) THEN 'STOP'
              WHEN forall({pairs}, i -> {at}.offset = {prev}.offset) THEN 'STALL'
              WHEN forall({pairs}, i -> {at}.lag >= {prev}.lag) THEN 'WARN'
              ELSE 'OK' END
            ELSE 'OK' END"""
    )


def group_partition_lag(
    batches: DataFrame,
    commits: DataFrame,
    state: DataFrame,
    window: ReportWindow,
    *,
    intervals: int = BURROW_INTERVALS,
) -> DataFrame:
    """Lag of each group on each partition at each commit in the window and at report time."""
    positions = _batch_positions(batches)
    events = _commit_events(commits, window)
    events = _with_log_end_at(events, positions)
    events = _with_first_unconsumed(events, positions)
    events = _with_open_transaction_at(events, transactions(batches))
    starts = F.broadcast(state.select(*_TP, "log_start_offset"))
    events = events.join(starts, _TP, "left")

    leo = F.greatest(F.coalesce("log_end_offset", "log_start_offset", F.lit(0)), F.lit(0)).cast(
        "long"
    )
    lag = F.greatest(leo - F.col("committed_offset"), F.lit(0))
    b = F.col("_b")
    c = F.col("committed_offset")
    gapless = b.last_offset - b.base_offset + 1 == b.records
    records_before_c = (
        F.when(c <= b.base_offset, b.records_before)
        .when(gapless, b.records_before + (c - b.base_offset))
        # Compacted batch cut by the commit: assume the offsets left are all present.
        .otherwise(b.records_before + F.greatest(b.records - (b.last_offset - c + 1), F.lit(0)))
    )
    first_ts = F.when(b.log_append_time, b.max_timestamp).otherwise(b.base_timestamp)
    lso = F.least(leo, F.coalesce("_open_first", leo))
    events = (
        events.withColumn("log_end_offset", leo)
        .withColumn("last_stable_offset", lso)
        .withColumn("lag_offsets", lag)
        .withColumn("lag_committed", F.greatest(lso - F.col("committed_offset"), F.lit(0)))
        .withColumn(
            "lag_records",
            F.when(F.col("lag_offsets") == 0, F.lit(0).cast("long")).otherwise(
                F.greatest(
                    F.coalesce("records_through", F.lit(0))
                    - F.coalesce(records_before_c, F.lit(0)),
                    F.lit(0),
                )
            ),
        )
        .withColumn(
            "lag_seconds",
            F.when((F.col("lag_offsets") == 0) | b.isNull(), F.lit(0.0)).otherwise(
                F.greatest(F.col("t") - first_ts, F.lit(0)) / 1000.0
            ),
        )
    )

    # Rates and Burrow windows run over commits only; a report row borrows the window of
    # the commit before it and is judged at report time with the lag at report time.
    by_time = Window.partitionBy(*_GTP).orderBy("t", "record_offset")
    span = by_time.rowsBetween(-(intervals - 1), 0)
    commit_rows = events.filter(F.col("kind") == "commit")
    entry = F.struct(
        F.col("t").alias("t"),
        F.col("committed_offset").alias("offset"),
        F.col("lag_offsets").alias("lag"),
    )
    dt = (F.col("t") - F.lag("t").over(by_time)) / 1000.0
    commit_rows = (
        commit_rows.withColumn("_w", F.collect_list(entry).over(span))
        .withColumn(
            "consume_rate",
            F.when(dt > 0, (c - F.lag("committed_offset").over(by_time)) / dt),
        )
        .withColumn(
            "produce_rate",
            F.when(dt > 0, (F.col("log_end_offset") - F.lag("log_end_offset").over(by_time)) / dt),
        )
    )
    last_commit = Window.partitionBy(*_GTP).orderBy(
        F.col("t").desc(), F.col("record_offset").desc()
    )
    tails = (
        commit_rows.withColumn("_n", F.row_number().over(last_commit))
        .filter(F.col("_n") == 1)
        .select(*_GTP, "_w", "consume_rate", "produce_rate")
    )
    report_rows = events.filter(F.col("kind") == "report").join(tails, _GTP, "inner")
    rows = commit_rows.unionByName(report_rows).withColumn(
        "status", _burrow_status("_w", "lag_offsets", "t")
    )
    in_window = (F.col("kind") == "report") | window.contains(F.col("t"))
    return rows.filter(in_window).select(
        "group",
        "topic",
        "partition",
        "kind",
        F.timestamp_millis("t").alias("timestamp"),
        "committed_offset",
        "log_end_offset",
        "last_stable_offset",
        "lag_offsets",
        "lag_committed",
        "lag_records",
        "lag_seconds",
        "consume_rate",
        "produce_rate",
        "status",
        F.when(F.col("kind") == "report", window.report_date)
        .otherwise(_date_of(F.col("t")))
        .alias("date"),
    )


_ERROR_STATUSES = ("STOP", "STALL", "REWIND")


def group_summary(lag: DataFrame) -> DataFrame:
    """One row per group at report time; the status is Burrow's group rule (worst of
    OK < WARN < ERR, where STOP, STALL and REWIND partitions count as ERR)."""
    now = lag.filter(F.col("kind") == "report")
    s = F.col("status")
    worst = F.max(F.when(s.isin(*_ERROR_STATUSES), 2).when(s == "WARN", 1).otherwise(0))
    return (
        now.groupBy("group")
        .agg(
            worst.alias("_worst"),
            F.count("*").alias("partitions"),
            F.sum("lag_offsets").alias("total_lag_offsets"),
            F.sum("lag_committed").alias("total_lag_committed"),
            F.sum("lag_records").alias("total_lag_records"),
            F.max("lag_records").alias("max_lag_records"),
            F.max("lag_seconds").alias("max_lag_seconds"),
            F.sum((s == "WARN").cast("int")).alias("warn_partitions"),
            F.sum((s == "STALL").cast("int")).alias("stalled_partitions"),
            F.sum((s == "STOP").cast("int")).alias("stopped_partitions"),
            F.sum((s == "REWIND").cast("int")).alias("rewind_partitions"),
            F.first("date").alias("date"),
        )
        .select(
            "group",
            F.element_at(
                F.array(F.lit("OK"), F.lit("WARN"), F.lit("ERR")), F.col("_worst") + 1
            ).alias("status"),
            "partitions",
            "total_lag_offsets",
            "total_lag_committed",
            "total_lag_records",
            "max_lag_records",
            "max_lag_seconds",
            "warn_partitions",
            "stalled_partitions",
            "stopped_partitions",
            "rewind_partitions",
            "date",
        )
    )


def group_lag_series(
    lag: DataFrame, window: ReportWindow, *, bucket_ms: int | None = None
) -> DataFrame:
    """Per group and bucket (`bucket_ms`, default the window's): `lag_records`, the records
    the group is behind, and `lag_seconds`, the worst lag of the bucket's commits.

    A group's lag in a bucket is the sum over its partitions of each one's lag at its last
    commit at or before the bucket's end: a partition that did not commit in the bucket
    still counts with the lag of its previous commit, so a group whose partitions commit
    at different moments is not drawn with dips where some did not."""
    bucket = bucket_ms or window.bucket_ms
    ms = F.unix_millis("timestamp")
    latest = (
        lag.filter(F.col("kind") == "commit")
        .withColumn("bucket_ms", (F.floor(ms / bucket) * bucket).cast("long"))
        .groupBy(*_GTP, "bucket_ms")
        .agg(
            F.max_by("lag_records", F.struct("timestamp", "lag_records")).alias("lag_records"),
            F.max("lag_seconds").alias("lag_seconds"),
        )
    )
    grid = (
        latest.select("group", "bucket_ms")
        .distinct()
        .join(latest.select(*_GTP).distinct(), "group")
    )
    upto = Window.partitionBy(*_GTP).orderBy("bucket_ms").rowsBetween(Window.unboundedPreceding, 0)
    filled = grid.join(latest, [*_GTP, "bucket_ms"], "left").withColumn(
        "lag_records", F.last("lag_records", ignorenulls=True).over(upto)
    )
    return (
        filled.groupBy("group", "bucket_ms")
        .agg(F.sum("lag_records").alias("lag_records"), F.max("lag_seconds").alias("lag_seconds"))
        .orderBy("group", "bucket_ms")
    )
