"""Record batches, magic 2: Kafka's on-disk and on-wire unit of data.

A batch is a 61-byte header followed by its records (compressed as one blob when the
codec is not NONE). Layout, all big-endian::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8
    | crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64
    | maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32
    | recordCount int32 | records...

`batchLength` counts from partitionLeaderEpoch to the end, so a batch occupies
``12 + batchLength`` bytes. The CRC is CRC-32C of everything from attributes to the end,
which leaves baseOffset and partitionLeaderEpoch outside it: the broker assigns both by
rewriting the header in place, without touching the CRC.

This module reads and rewrites batches as whole units; the records inside them are
encoded and decoded by `trio_broker.protocol.record_codec`.
"""

from __future__ import annotations

import enum
import functools
import struct
from collections.abc import Iterator
from typing import NamedTuple

from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol import crc

__all__ = [
    "ATTR_COMPRESSION_MASK",
    "ATTR_CONTROL",
    "ATTR_TIMESTAMP_TYPE",
    "ATTR_TRANSACTIONAL",
    "CRC_OFFSET",
    "CRC_START",
    "HEADER",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC",
    "MIN_BATCH_LENGTH",
    "BatchHeader",
    "Compression",
    "InvalidRecords",
    "TimestampType",
    "compute_crc",
    "iter_batches",
    "read_header",
    "scan_valid_prefix",
    "set_base_offset",
    "set_log_append_time",
    "set_max_timestamp",
    "set_offset_and_epoch",
    "set_partition_leader_epoch",
    "validate_batches",
]

MAGIC = 2
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61

# Offsets of the fields inside a batch, for in-place rewrites and CRC checks.
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
CRC_START = 21  # attributes: the CRC covers [CRC_START, end of batch)
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
RECORD_COUNT_OFFSET = 57
# Kafka reads a batch's length and magic before anything else; 17 bytes get that far.
_HEADER_SIZE_UP_TO_MAGIC = 17

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT64 = struct.Struct(">q")

# baseOffset + batchLength: the part of a batch that batchLength does not count.
LOG_OVERHEAD = 12
# The smallest legal batchLength: a header with no records.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1


class Compression(enum.IntEnum):
    """The codec in attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(enum.IntEnum):
    """Attribute bit 3: who set the timestamps (the producer, or the broker on append)."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class InvalidRecords(KafkaError):
    """Bad record data; `.code` is the Kafka error the produce path answers with."""


class BatchHeader(NamedTuple):
    """The 61-byte header of one magic-2 batch, as read (offsets are absolute).

    A named tuple rather than an attrs class: fetches and recovery read headers by the
    thousand, and a tuple is built in one step from `HEADER.unpack_from` (a quarter of a
    frozen attrs instance's cost).
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies on disk and on the wire."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        """The codec; raises InvalidRecords(UNSUPPORTED_COMPRESSION_TYPE) for codes 5-7."""
        return _codec_of(self.attributes)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & ATTR_TIMESTAMP_TYPE:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_TIMESTAMP_TYPE)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0


# By code, without Compression(code)'s enum lookup (a microsecond on every produce).
_CODECS = tuple(Compression(code) for code in range(Compression.ZSTD + 1))


def _codec_of(attributes: int) -> Compression:
    codec = attributes & ATTR_COMPRESSION_MASK
    if codec > Compression.ZSTD:
        raise InvalidRecords(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}"
        )
    return _CODECS[codec]


# BatchHeader._make without its Python frame (HEADER always gives the 13 fields).
_make_header = functools.partial(tuple.__new__, BatchHeader)


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the batch header at `pos` without copying the batch.

    Checks nothing but that 61 bytes are there (InvalidRecords(CORRUPT_MESSAGE) if not).
    """
    if len(buf) - pos < HEADER_SIZE:
        raise InvalidRecords(
            ErrorCode.CORRUPT_MESSAGE,
            f"batch header needs {HEADER_SIZE} bytes, {max(len(buf) - pos, 0)} available",
        )
    return _make_header(HEADER.unpack_from(buf, pos))


def _crc_of(mv: memoryview, pos: int, size: int) -> int:
    # A memoryview slice shares the buffer: crc32c reads it in place, no copy.
    return crc.crc32c(mv[pos + CRC_START : pos + size])


def compute_crc(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """CRC-32C of the batch at `pos` (attributes to the end), as it should be stored."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    (batch_length,) = _INT32.unpack_from(mv, pos + LENGTH_OFFSET)
    return _crc_of(mv, pos, LOG_OVERHEAD + batch_length)


# ---------------------------------------------------------------------------
# Validation of a client's records (produce path) and scanning of stored logs
# ---------------------------------------------------------------------------


def validate_batches(
    buf: bytes | bytearray | memoryview,
    *,
    max_batch_size: int | None = None,
    from_client: bool = True,
    single_batch: bool = False,
) -> list[BatchHeader]:
    """Check a records blob the way Kafka's produce path does, without copying or decompressing.

    Returns the headers in order; raises InvalidRecords with the code Kafka answers with:

    - empty blob: INVALID_RECORD (ProduceRequest: "must have at least one record batch")
    - a batch cut short, batchLength < 49, or magic outside 0-2: CORRUPT_MESSAGE
    - magic 0 or 1: INVALID_RECORD (ProduceRequest v3+: "only ... magic version 2")
    - more than one batch when `single_batch` (produce v3+ does that): INVALID_RECORD
    - a batch over `max_batch_size` (the topic's max.message.bytes): MESSAGE_TOO_LARGE
    - CRC mismatch: CORRUPT_MESSAGE
    - codec 5-7: UNSUPPORTED_COMPRESSION_TYPE
    - with `from_client` (LogValidator.validateBatch and UnifiedLog for AppendOrigin.CLIENT):
      baseOffset != 0, recordCount <= 0, recordCount != lastOffsetDelta + 1, a control
      batch, or a producer id without a base sequence: INVALID_RECORD.
      Without it (replication, compacted data) only recordCount >= 0 is required.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    total = len(mv)
    if total == 0:
        raise InvalidRecords(ErrorCode.INVALID_RECORD, "records contain no record batch")
    headers: list[BatchHeader] = []
    pos = 0
    while pos < total:
        if single_batch and pos > 0:
            raise InvalidRecords(
                ErrorCode.INVALID_RECORD, "produce records must contain exactly one record batch"
            )
        remaining = total - pos
        if remaining >= HEADER_SIZE:
            # Every whole header (all but broken data): one unpack gives length and magic
            # too; the checks below still run in Kafka's order.
            header = _make_header(HEADER.unpack_from(mv, pos))
            batch_length = header.batch_length
            magic = header.magic
        else:
            if remaining < _HEADER_SIZE_UP_TO_MAGIC:
                raise InvalidRecords(
                    ErrorCode.CORRUPT_MESSAGE, f"{remaining} trailing bytes are not a record batch"
                )
            (batch_length,) = _INT32.unpack_from(mv, pos + LENGTH_OFFSET)
            magic = mv[pos + MAGIC_OFFSET]
            if magic > 127:
                magic -= 256
            header = None
        if batch_length < MIN_BATCH_LENGTH:
            raise InvalidRecords(
                ErrorCode.CORRUPT_MESSAGE,
                f"batch length {batch_length} is less than the minimum {MIN_BATCH_LENGTH}",
            )
        if magic != MAGIC:
            if magic in (0, 1):
                raise InvalidRecords(
                    ErrorCode.INVALID_RECORD,
                    f"record batches must have magic 2, this one has magic {magic}",
                )
            raise InvalidRecords(ErrorCode.CORRUPT_MESSAGE, f"invalid magic {magic}")
        size = LOG_OVERHEAD + batch_length
        if size > remaining:
            raise InvalidRecords(
                ErrorCode.CORRUPT_MESSAGE,
                f"batch of {size} bytes at position {pos} has only {remaining} bytes",
            )
        # A batch that fits here is at least a header long: read above.
        assert header is not None
        if from_client and header.base_offset != 0:
            raise InvalidRecords(
                ErrorCode.INVALID_RECORD,
                f"the base offset of a produced batch must be 0, not {header.base_offset}",
            )
        if max_batch_size is not None and size > max_batch_size:
            raise InvalidRecords(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"batch of {size} bytes is larger than the maximum {max_batch_size}",
            )
        crc = _crc_of(mv, pos, size)
        if crc != header.crc:
            raise InvalidRecords(
                ErrorCode.CORRUPT_MESSAGE,
                f"batch at position {pos} has CRC {header.crc:#010x}, computed {crc:#010x}",
            )
        _codec_of(header.attributes)
        if from_client:
            _validate_client_batch(header)
        elif header.record_count < 0:
            raise InvalidRecords(
                ErrorCode.CORRUPT_MESSAGE, f"negative record count {header.record_count}"
            )
        headers.append(header)
        pos += size
    return headers


def _validate_client_batch(header: BatchHeader) -> None:
    count_from_offsets = header.last_offset_delta + 1
    if count_from_offsets <= 0:
        raise InvalidRecords(
            ErrorCode.INVALID_RECORD,
            f"batch has an invalid offset range: last offset delta {header.last_offset_delta}",
        )
    if header.record_count <= 0:
        raise InvalidRecords(
            ErrorCode.INVALID_RECORD, f"invalid reported record count {header.record_count}"
        )
    if count_from_offsets != header.record_count:
        raise InvalidRecords(
            ErrorCode.INVALID_RECORD,
            f"inconsistent batch offset range [0, {header.last_offset_delta}] "
            f"and count of records {header.record_count}",
        )
    if header.is_control:
        raise InvalidRecords(
            ErrorCode.INVALID_RECORD, "clients are not allowed to write control records"
        )
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecords(
            ErrorCode.INVALID_RECORD,
            f"invalid sequence number {header.base_sequence} in a batch with producer id "
            f"{header.producer_id}",
        )


def iter_batches(
    buf: bytes | bytearray | memoryview, pos: int = 0
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each complete batch from `pos`; no CRC check.

    Stops quietly where the data stops being whole batches: an incomplete header, a body
    cut short, or a batchLength below the minimum (zeros past a torn write). Callers that
    must trust the bytes (log recovery) use `scan_valid_prefix` instead.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    total = len(mv)
    while total - pos >= HEADER_SIZE:
        header = read_header(mv, pos)
        if header.batch_length < MIN_BATCH_LENGTH or header.size > total - pos:
            return
        yield pos, header
        pos += header.size


def scan_valid_prefix(buf: bytes | bytearray | memoryview) -> tuple[int, list[BatchHeader]]:
    """How many leading bytes of a stored log are whole, valid batches, and their headers.

    A batch counts when it is complete, has magic 2, a known codec, a non-negative record
    count and a matching CRC; the scan stops at the first that is not. Recovery truncates
    the segment to the returned byte count.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    headers: list[BatchHeader] = []
    valid = 0
    for pos, header in iter_batches(mv):
        if (
            header.magic != MAGIC
            or header.attributes & ATTR_COMPRESSION_MASK > Compression.ZSTD
            or header.record_count < 0
            or _crc_of(mv, pos, header.size) != header.crc
        ):
            break
        headers.append(header)
        valid = pos + header.size
    return valid, headers


# ---------------------------------------------------------------------------
# In-place rewrites the broker makes when it appends a batch
# ---------------------------------------------------------------------------


def set_base_offset(buf: bytearray | memoryview, pos: int, offset: int) -> None:
    """Assign the batch's offsets (base offset is outside the CRC)."""
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, offset)


_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")


def set_offset_and_epoch(
    buf: bytearray | memoryview, pos: int, offset: int, batch_length: int, epoch: int
) -> None:
    """set_base_offset and set_partition_leader_epoch in one write (`batch_length`, the
    batch's own, is written back unchanged between them)."""
    _OFFSET_LENGTH_EPOCH.pack_into(buf, pos, offset, batch_length, epoch)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Stamp the leader epoch the batch was appended under (outside the CRC)."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_max_timestamp(
    buf: bytearray | memoryview, pos: int, timestamp_type: TimestampType, timestamp: int
) -> None:
    """Set the timestamp-type bit and maxTimestamp, then recompute the CRC (both are inside it).

    Like Kafka's `DefaultRecordBatch.setMaxTimestamp`, it leaves the batch alone when both
    already hold those values, so the common case costs no CRC pass.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    (attributes,) = _INT16.unpack_from(mv, pos + ATTRIBUTES_OFFSET)
    (current,) = _INT64.unpack_from(mv, pos + MAX_TIMESTAMP_OFFSET)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        new_attributes = attributes | ATTR_TIMESTAMP_TYPE
    else:
        new_attributes = attributes & ~ATTR_TIMESTAMP_TYPE
    if new_attributes == attributes and current == timestamp:
        return
    _INT16.pack_into(mv, pos + ATTRIBUTES_OFFSET, new_attributes)
    _INT64.pack_into(mv, pos + MAX_TIMESTAMP_OFFSET, timestamp)
    (batch_length,) = _INT32.unpack_from(mv, pos + LENGTH_OFFSET)
    _UINT32.pack_into(mv, pos + CRC_OFFSET, _crc_of(mv, pos, LOG_OVERHEAD + batch_length))


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp: int) -> None:
    """Mark the batch LogAppendTime with `timestamp` (what Kafka does for such topics)."""
    set_max_timestamp(buf, pos, TimestampType.LOG_APPEND_TIME, timestamp)
