"""Segment files on disk, read for reporting: listing, packing, header scans, commits.

Plain Python, no Spark: the data source (`trio_broker.analytics.datasource`) calls these on
the driver (listing, packing) and on executors (scans). A batch scan reads the 61-byte
headers only, a window of bytes at a time, and never decompresses or checks a CRC: the
report wants offsets, timestamps and sizes, and a header is all of that. The scan stops
at the first header that cannot be a whole batch (a torn tail after a crash), as the
broker's own recovery would before truncating it.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import attrs

from trio_broker.protocol.record_codec import iter_records
from trio_broker.protocol.records import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    InvalidRecords,
)

__all__ = [
    "CONSUMER_OFFSETS_TOPIC",
    "COMMIT_FIELDS",
    "BATCH_FIELDS",
    "SegmentFile",
    "iter_commits",
    "list_segments",
    "pack_segments",
    "read_log_start_offsets",
    "scan_batch_headers",
]

logger = logging.getLogger(__name__)

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
_CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
# Reading headers through a small window keeps small batches to one syscall per window
# while a big batch costs one read of a page or so, never its body.
_WINDOW_BYTES = 64 * 1024
_INT16 = struct.Struct(">h")
_CONTROL_KEY = struct.Struct(">hh")
# A `.txnindex` entry (Kafka's AbortedTxn): version, producer id, first offset, last offset
# (the ABORT marker's), last stable offset.
_TXN_ENTRY = struct.Struct(">hqqqq")
TXN_INDEX_SUFFIX = ".txnindex"

# Column order of a `scan_batch_headers` row (the data source's schema follows it).
BATCH_FIELDS = (
    "topic",
    "partition",
    "segment",
    "position",
    "base_offset",
    "last_offset",
    "record_count",
    "batch_bytes",
    "base_timestamp",
    "max_timestamp",
    "log_append_time",
    "codec",
    "is_transactional",
    "is_control",
    "producer_id",
    "leader_epoch",
    "is_aborted",
)
# Column order of an `iter_commits` row.
COMMIT_FIELDS = (
    "group",
    "topic",
    "partition",
    "committed_offset",
    "leader_epoch",
    "metadata",
    "commit_timestamp",
    "record_offset",
)


@attrs.frozen(kw_only=True)
class SegmentFile:
    """One `<log.dir>/<topic>-<partition>/<base offset>.log` file."""

    path: str
    topic: str
    partition: int
    base_offset: int
    size: int


def _parse_partition_dir(name: str) -> tuple[str, int] | None:
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


def list_segments(log_dirs: Sequence[str | os.PathLike[str]]) -> list[SegmentFile]:
    """Every segment of every partition in `log_dirs`, in (topic, partition, offset) order.

    Directories pending deletion (`-delete`, or `.`-suffixed future/stray dirs) and
    `.deleted`/`.cleaned`/`.swap` files are not part of the log and are skipped. When the
    same partition is found in several dirs (log dirs of several brokers holding replicas),
    the replica that reaches furthest is kept so nothing is counted twice.
    """
    by_partition: dict[tuple[str, int], list[SegmentFile]] = {}
    for log_dir in log_dirs:
        root = Path(log_dir)
        if not root.is_dir():
            raise FileNotFoundError(f"log dir {root} does not exist")
        for entry in sorted(root.iterdir()):
            tp = _parse_partition_dir(entry.name) if entry.is_dir() else None
            if tp is None:
                continue
            segments = []
            for file in entry.iterdir():
                match = _SEGMENT_NAME.match(file.name)
                if match:
                    segments.append(
                        SegmentFile(
                            path=str(file),
                            topic=tp[0],
                            partition=tp[1],
                            base_offset=int(match.group(1)),
                            size=file.stat().st_size,
                        )
                    )
            segments.sort(key=lambda s: s.base_offset)
            previous = by_partition.get(tp)
            if previous is not None:
                logger.warning("partition %s-%s found in several log dirs", *tp)
                if _reach(previous) >= _reach(segments):
                    continue
            by_partition[tp] = segments
    return [seg for tp in sorted(by_partition) for seg in by_partition[tp]]


def _reach(segments: list[SegmentFile]) -> tuple[int, int]:
    if not segments:
        return (-1, -1)
    return (segments[-1].base_offset, segments[-1].size)


def read_log_start_offsets(
    log_dirs: Sequence[str | os.PathLike[str]],
) -> dict[tuple[str, int], int]:
    """`log-start-offset-checkpoint` of each log dir (version 0 text format), merged."""
    starts: dict[tuple[str, int], int] = {}
    for log_dir in log_dirs:
        path = Path(log_dir) / "log-start-offset-checkpoint"
        try:
            lines = path.read_text().splitlines()
        except FileNotFoundError:
            continue
        # version, count, then "topic partition offset" lines; a bad file is ignored
        # because the first batch's offset is a good enough lower bound.
        for line in lines[2:]:
            parts = line.split()
            if len(parts) == 3 and parts[1].isdigit():
                tp = (parts[0], int(parts[1]))
                starts[tp] = max(starts.get(tp, 0), int(parts[2]))
    return starts


def pack_segments(
    segments: Sequence[SegmentFile],
    *,
    max_partition_bytes: int = 128 * 1024 * 1024,
    open_cost_bytes: int = 4 * 1024 * 1024,
    parallelism: int = 2,
) -> list[list[SegmentFile]]:
    """Group segments into input partitions the way Spark splits files.

    A segment is never split (its batches are found by walking it from the start). A
    segment as big as the target gets a partition of its own; smaller ones are packed
    together, each costing its size plus `open_cost_bytes`, so a partition with a
    thousand empty segments is not free. The target shrinks when there is little data so
    every core still gets work.
    """
    if not segments:
        return []
    total = sum(s.size + open_cost_bytes for s in segments)
    target = min(max_partition_bytes, max(open_cost_bytes, total // max(parallelism, 1)))
    packs: list[list[SegmentFile]] = []
    current: list[SegmentFile] = []
    current_bytes = 0
    for seg in sorted(segments, key=lambda s: s.size, reverse=True):
        cost = seg.size + open_cost_bytes
        if current and current_bytes + cost > target:
            packs.append(current)
            current, current_bytes = [], 0
        current.append(seg)
        current_bytes += cost
    if current:
        packs.append(current)
    return packs


def aborted_ranges(segment: SegmentFile) -> dict[int, list[tuple[int, int]]]:
    """producer id -> [(first offset, marker offset)] of the aborted transactions whose data
    may lie in `segment`: the `.txnindex` entries (Kafka's format, written beside each
    segment whose ABORT markers they record) of this segment and the later ones."""
    ranges: dict[int, list[tuple[int, int]]] = {}
    directory = Path(segment.path).parent
    for index in directory.glob("*" + TXN_INDEX_SUFFIX):
        stem = index.name[: -len(TXN_INDEX_SUFFIX)]
        if not stem.isdigit() or int(stem) < segment.base_offset:
            continue  # markers before this segment close transactions before it too
        try:
            data = index.read_bytes()
        except FileNotFoundError:
            continue
        for version, pid, first, last, _lso in _TXN_ENTRY.iter_unpack(
            data[: len(data) - len(data) % _TXN_ENTRY.size]
        ):
            if version == 0 and last >= segment.base_offset:
                ranges.setdefault(pid, []).append((first, last))
    return ranges


def scan_batch_headers(segment: SegmentFile) -> Iterator[tuple]:
    """Yield one row (see BATCH_FIELDS) per whole batch of `segment`, headers only.

    `is_aborted`: a transactional data batch of a transaction that was aborted (from the
    `.txnindex` files), which read_committed consumers never see and the report does not
    count as records."""
    aborted = aborted_ranges(segment)
    try:
        fd = os.open(segment.path, os.O_RDONLY)
    except FileNotFoundError:
        # Retention or compaction removed it between listing and reading.
        logger.info("segment %s is gone", segment.path)
        return
    try:
        size = os.fstat(fd).st_size
        pos = 0
        window = b""
        window_start = 0
        while size - pos >= HEADER_SIZE:
            rel = pos - window_start
            if rel < 0 or rel + HEADER_SIZE > len(window):
                window = os.pread(fd, _WINDOW_BYTES, pos)
                window_start, rel = pos, 0
                if len(window) < HEADER_SIZE:
                    break
            (
                base_offset,
                batch_length,
                leader_epoch,
                magic,
                _crc,
                attributes,
                last_offset_delta,
                base_timestamp,
                max_timestamp,
                producer_id,
                _producer_epoch,
                _base_sequence,
                record_count,
            ) = HEADER.unpack_from(window, rel)
            batch_size = LOG_OVERHEAD + batch_length
            if batch_length < MIN_BATCH_LENGTH or batch_size > size - pos or magic != MAGIC:
                if size - pos > 0:
                    logger.warning(
                        "%s: %d bytes at position %d are not a whole batch (torn tail?)",
                        segment.path,
                        size - pos,
                        pos,
                    )
                break
            codec = attributes & ATTR_COMPRESSION_MASK
            yield (
                segment.topic,
                segment.partition,
                segment.base_offset,
                pos,
                base_offset,
                base_offset + last_offset_delta,
                record_count,
                batch_size,
                base_timestamp,
                max_timestamp,
                bool(attributes & ATTR_TIMESTAMP_TYPE),
                _CODEC_NAMES[codec] if codec < len(_CODEC_NAMES) else f"unknown-{codec}",
                bool(attributes & ATTR_TRANSACTIONAL),
                bool(attributes & ATTR_CONTROL),
                producer_id,
                leader_epoch,
                bool(
                    aborted
                    and attributes & ATTR_TRANSACTIONAL
                    and not attributes & ATTR_CONTROL
                    and any(f <= base_offset <= last for f, last in aborted.get(producer_id, ()))
                ),
            )
            pos += batch_size
    finally:
        os.close(fd)


def _iter_whole_batches(segment: SegmentFile) -> Iterator[bytes]:
    """The bytes of each whole batch, read one at a time (commit logs need the records)."""
    try:
        f = open(segment.path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return
    with f:
        size = os.fstat(f.fileno()).st_size
        pos = 0
        while size - pos >= HEADER_SIZE:
            head = f.read(HEADER_SIZE)
            base_offset, batch_length, _, magic, *_rest = HEADER.unpack_from(head)
            batch_size = LOG_OVERHEAD + batch_length
            if batch_length < MIN_BATCH_LENGTH or batch_size > size - pos or magic != MAGIC:
                break
            yield head + f.read(batch_size - HEADER_SIZE)
            pos += batch_size


def iter_commits(segment: SegmentFile) -> Iterator[tuple]:
    """Offset commits stored in a `__consumer_offsets` segment, one row per commit.

    Keys of version 0 and 1 are offset commits (`OffsetCommitKey`), version 2 is group
    metadata and is skipped, as are tombstones (an expired or deleted offset). Commits
    written inside a transaction (TxnOffsetCommit) count only once their COMMIT marker is
    read, as Kafka's GroupMetadataManager replays them.
    """
    from trio_broker.protocol._generated.offset_commit_key import OffsetCommitKey
    from trio_broker.protocol._generated.offset_commit_value import OffsetCommitValue

    pending: dict[int, list[tuple]] = {}
    for batch in _iter_whole_batches(segment):
        (_, _, _, _, _, attributes, _, _, _, producer_id, *_rest) = HEADER.unpack_from(batch)
        transactional = bool(attributes & ATTR_TRANSACTIONAL)
        try:
            records = list(iter_records(batch))
        except InvalidRecords as exc:
            logger.warning("%s: unreadable batch skipped: %s", segment.path, exc)
            continue
        if attributes & ATTR_CONTROL:
            for record in records:
                if record.key is None or len(record.key) < _CONTROL_KEY.size:
                    continue
                _, marker = _CONTROL_KEY.unpack_from(record.key)
                done = pending.pop(producer_id, [])
                if marker == 1:  # COMMIT; 0 is ABORT
                    yield from done
            continue
        for record in records:
            row = _decode_commit(
                record.key, record.value, record.offset, OffsetCommitKey, OffsetCommitValue
            )
            if row is None:
                continue
            if transactional:
                pending.setdefault(producer_id, []).append(row)
            else:
                yield row


def _decode_commit(key, value, offset, key_cls, value_cls) -> tuple | None:
    if key is None or value is None or len(key) < 2 or len(value) < 2:
        return None
    (key_version,) = _INT16.unpack_from(key)
    if key_version not in (0, 1):
        return None
    (value_version,) = _INT16.unpack_from(value)
    try:
        k, _ = key_cls.decode(key, key_version, 2)
        v, _ = value_cls.decode(value, value_version, 2)
    except Exception as exc:  # a record from a newer Kafka; one bad record is not a failure
        logger.warning("undecodable offset commit at offset %d: %s", offset, exc)
        return None
    return (
        k.group,
        k.topic,
        k.partition,
        v.offset,
        v.leader_epoch,
        v.metadata,
        v.commit_timestamp,
        offset,
    )


def commit_segments(segments: Iterable[SegmentFile]) -> list[SegmentFile]:
    """The `__consumer_offsets` segments among `segments`."""
    return [s for s in segments if s.topic == CONSUMER_OFFSETS_TOPIC]
