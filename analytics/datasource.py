"""Spark data sources over a broker's segment files (Spark 4's Python data source API).

    spark.dataSource.register(SegmentBatchesDataSource)
    spark.read.format("trio_batches").option("paths", "/var/lib/broker,/mnt/b2").load()

`trio_batches` gives one row per record batch (headers only), `trio_commits` one row per
offset commit found in `__consumer_offsets`. Planning (listing and packing the segments)
runs on the driver; reading runs on executors, which must see the same paths (a local
disk for `local[*]`, shared storage on a cluster). Rows leave the reader as Arrow record
batches, so a scan costs Python only for the header parsing itself.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from trio_broker.analytics.segments import (
    BATCH_FIELDS,
    COMMIT_FIELDS,
    CONSUMER_OFFSETS_TOPIC,
    SegmentFile,
    iter_commits,
    list_segments,
    pack_segments,
    scan_batch_headers,
)

__all__ = [
    "BATCHES_SCHEMA",
    "COMMITS_SCHEMA",
    "ConsumerOffsetsDataSource",
    "SegmentBatchesDataSource",
    "register",
]

BATCHES_SCHEMA = (
    "topic string, partition int, segment long, position long, base_offset long, "
    "last_offset long, record_count int, batch_bytes int, base_timestamp long, "
    "max_timestamp long, log_append_time boolean, codec string, is_transactional boolean, "
    "is_control boolean, producer_id long, leader_epoch int, is_aborted boolean"
)
COMMITS_SCHEMA = (
    "group string, topic string, partition int, committed_offset long, leader_epoch int, "
    "metadata string, commit_timestamp long, record_offset long"
)
_BATCH_TYPES = (
    pa.string(),
    pa.int32(),
    pa.int64(),
    pa.int64(),
    pa.int64(),
    pa.int64(),
    pa.int32(),
    pa.int32(),
    pa.int64(),
    pa.int64(),
    pa.bool_(),
    pa.string(),
    pa.bool_(),
    pa.bool_(),
    pa.int64(),
    pa.int32(),
    pa.bool_(),
)
_COMMIT_TYPES = (
    pa.string(),
    pa.string(),
    pa.int32(),
    pa.int64(),
    pa.int32(),
    pa.string(),
    pa.int64(),
    pa.int64(),
)
_ROWS_PER_ARROW_BATCH = 65536


class SegmentPack(InputPartition):
    """The segments one task reads."""

    def __init__(self, segments: list[SegmentFile]) -> None:
        super().__init__(None)
        self.segments = segments


def _paths(options: dict[str, str]) -> list[str]:
    paths = [p for p in options.get("paths", "").split(",") if p]
    if not paths:
        raise ValueError("option 'paths' (comma-separated log dirs) is required")
    return paths


def _to_arrow(rows: Iterator[tuple], names: tuple[str, ...], types: tuple) -> Iterator:
    columns: list[list] = [[] for _ in names]
    count = 0
    for row in rows:
        for column, value in zip(columns, row, strict=True):
            column.append(value)
        count += 1
        if count == _ROWS_PER_ARROW_BATCH:
            yield _record_batch(columns, names, types)
            columns = [[] for _ in names]
            count = 0
    if count:
        yield _record_batch(columns, names, types)


def _record_batch(columns: list[list], names: tuple[str, ...], types: tuple) -> pa.RecordBatch:
    arrays = [pa.array(col, type=t) for col, t in zip(columns, types, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, names=list(names))


class _SegmentReader(DataSourceReader):
    def __init__(self, options: dict[str, str], *, commits: bool) -> None:
        self.paths = _paths(options)
        self.commits = commits
        self.max_partition_bytes = int(options.get("maxPartitionBytes", 128 * 1024 * 1024))
        self.parallelism = int(options.get("parallelism", 2))

    def partitions(self) -> list[InputPartition]:
        segments = [
            s
            for s in list_segments(self.paths)
            if (s.topic == CONSUMER_OFFSETS_TOPIC) == self.commits and s.size > 0
        ]
        packs = pack_segments(
            segments,
            max_partition_bytes=self.max_partition_bytes,
            parallelism=self.parallelism,
        )
        # Spark wants at least one partition, even over an empty broker.
        return [SegmentPack(pack) for pack in packs] or [SegmentPack([])]

    def read(self, partition: InputPartition) -> Iterator:
        assert isinstance(partition, SegmentPack)
        if self.commits:
            rows = (row for seg in partition.segments for row in iter_commits(seg))
            return _to_arrow(rows, COMMIT_FIELDS, _COMMIT_TYPES)
        rows = (row for seg in partition.segments for row in scan_batch_headers(seg))
        return _to_arrow(rows, BATCH_FIELDS, _BATCH_TYPES)


class SegmentBatchesDataSource(DataSource):
    """`trio_batches`: one row per record batch of every topic but `__consumer_offsets`."""

    @classmethod
    def name(cls) -> str:
        return "trio_batches"

    def schema(self) -> StructType | str:
        return BATCHES_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _SegmentReader(self.options, commits=False)


class ConsumerOffsetsDataSource(DataSource):
    """`trio_commits`: one row per offset commit kept in `__consumer_offsets`."""

    @classmethod
    def name(cls) -> str:
        return "trio_commits"

    def schema(self) -> StructType | str:
        return COMMITS_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _SegmentReader(self.options, commits=True)


def register(spark) -> None:
    """Make `trio_batches` and `trio_commits` known to `spark.read.format`."""
    spark.dataSource.register(SegmentBatchesDataSource)
    spark.dataSource.register(ConsumerOffsetsDataSource)
