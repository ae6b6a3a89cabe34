"""Records inside a magic-2 batch: the zigzag varints, `Record`, decoding and building.

`records.py` owns the batch envelope (header, CRC, validation, in-place rewrites); this
module owns what the envelope carries. Each record is a length-prefixed run of varints::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    | keyLength varint | key | valueLength varint | value | headerCount varint | headers...

Decoding a compressed batch decompresses its records blob once; nothing here recompresses
what the broker stores.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

import attrs

from trio_broker.errors import ErrorCode
from trio_broker.protocol import compression as _codecs
from trio_broker.protocol import crc
from trio_broker.protocol.records import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    CRC_OFFSET,
    CRC_START,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    Compression,
    InvalidRecords,
    TimestampType,
    read_header,
)

__all__ = [
    "Record",
    "build_batch",
    "decode_varint",
    "decode_varlong",
    "encode_varint",
    "encode_varlong",
    "iter_records",
    "records_payload",
]

_UINT32 = struct.Struct(">I")


# ---------------------------------------------------------------------------
# Varints (zigzag, as in protobuf): the record-level integers
# ---------------------------------------------------------------------------


def encode_varint(value: int) -> bytes:
    """Zigzag varint of a signed 32-bit value."""
    return _encode_unsigned((value << 1) ^ (value >> 31))


def encode_varlong(value: int) -> bytes:
    """Zigzag varint of a signed 64-bit value."""
    return _encode_unsigned((value << 1) ^ (value >> 63))


def _encode_unsigned(n: int) -> bytes:
    if n < 0x80:
        return _SMALL_VARINTS[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL_VARINTS = [bytes((n,)) for n in range(0x80)]


def decode_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode a zigzag varint (at most 5 bytes) at `pos`; returns (value, next position)."""
    return _decode(buf, pos, 5)


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode a zigzag varlong (at most 10 bytes) at `pos`; returns (value, next position)."""
    return _decode(buf, pos, 10)


def _decode(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int) -> tuple[int, int]:
    # Records are mostly small numbers, so the one-byte case goes first and alone.
    try:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        n = b & 0x7F
        shift = 7
        for i in range(1, max_bytes):
            b = buf[pos + i]
            n |= (b & 0x7F) << shift
            if b < 0x80:
                return (n >> 1) ^ -(n & 1), pos + i + 1
            shift += 7
    except IndexError:
        raise InvalidRecords(
            ErrorCode.INVALID_RECORD, "incorrect declared batch size, premature EOF reached"
        ) from None
    raise InvalidRecords(ErrorCode.INVALID_RECORD, f"varint is longer than {max_bytes} bytes")


# ---------------------------------------------------------------------------
# Records: decoding and building
# ---------------------------------------------------------------------------

Header = tuple[str, bytes | None]


@attrs.frozen(kw_only=True)
class Record:
    """One record with its absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


def records_payload(batch: bytes | bytearray | memoryview) -> bytes | memoryview:
    """The records of `batch`, decompressed when the batch is compressed."""
    mv = batch if isinstance(batch, memoryview) else memoryview(batch)
    header = read_header(mv)
    end = header.size
    if end > len(mv) or header.batch_length < MIN_BATCH_LENGTH:
        raise InvalidRecords(ErrorCode.CORRUPT_MESSAGE, "record batch is cut short")
    codec = header.compression
    body = mv[HEADER_SIZE:end]
    if codec == Compression.NONE:
        return body
    return _codecs.decompress(codec, body)


def iter_records(batch: bytes | bytearray | memoryview) -> Iterator[Record]:
    """Decode the records of one batch (the batch starts at byte 0 of `batch`).

    Offsets are base offset + delta; timestamps are base timestamp + delta, or the batch's
    maxTimestamp for every record of a LogAppendTime batch. Malformed records raise
    InvalidRecords(INVALID_RECORD) as Kafka's record iterator does; a compressed payload
    that does not decompress raises CORRUPT_MESSAGE. Header and decompression errors raise
    at the call, record errors while iterating. The CRC is not checked here.
    """
    header = read_header(batch)
    if header.magic != MAGIC:
        raise InvalidRecords(ErrorCode.CORRUPT_MESSAGE, f"cannot read magic {header.magic}")
    data = records_payload(batch)
    if isinstance(data, memoryview) and header.record_count > 0:
        # Indexing bytes is faster than indexing a memoryview, and every key and value
        # is copied out anyway; one copy of the body is the cheaper path.
        data = data.tobytes()
    return _iter_decoded(header, data)


def _iter_decoded(header: BatchHeader, data: bytes | memoryview) -> Iterator[Record]:
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    append_time = header.max_timestamp if header.is_log_append_time else None
    limit = len(data)
    pos = 0
    decode = _decode
    for _ in range(header.record_count):
        if pos >= limit:
            raise InvalidRecords(
                ErrorCode.INVALID_RECORD, "incorrect declared batch size, premature EOF reached"
            )
        length, pos = decode(data, pos, 5)
        end = pos + length
        if length < 0 or end > limit:
            raise InvalidRecords(
                ErrorCode.INVALID_RECORD,
                f"invalid record size {length} with {limit - pos} bytes left",
            )
        pos += 1  # record attributes: unused in magic 2
        timestamp_delta, pos = decode(data, pos, 10)
        offset_delta, pos = decode(data, pos, 5)
        key_length, pos = decode(data, pos, 5)
        if key_length >= 0:
            key = data[pos : pos + key_length]
            pos += key_length
        else:
            key = None
        value_length, pos = decode(data, pos, 5)
        if value_length >= 0:
            value = data[pos : pos + value_length]
            pos += value_length
        else:
            value = None
        header_count, pos = decode(data, pos, 5)
        if header_count < 0:
            raise InvalidRecords(
                ErrorCode.INVALID_RECORD, f"invalid number of record headers {header_count}"
            )
        headers: list[Header] = []
        for _ in range(header_count):
            hkey_length, pos = decode(data, pos, 5)
            if hkey_length < 0:
                raise InvalidRecords(ErrorCode.INVALID_RECORD, "invalid negative header key size")
            hkey = bytes(data[pos : pos + hkey_length]).decode("utf-8", "surrogateescape")
            pos += hkey_length
            hvalue_length, pos = decode(data, pos, 5)
            if hvalue_length >= 0:
                hvalue: bytes | None = bytes(data[pos : pos + hvalue_length])
                pos += hvalue_length
            else:
                hvalue = None
            headers.append((hkey, hvalue))
        if pos != end:
            raise InvalidRecords(
                ErrorCode.INVALID_RECORD,
                f"invalid record size: expected to read {length} bytes in record payload, "
                f"but instead read {length + pos - end}",
            )
        yield Record(
            offset=base_offset + offset_delta,
            timestamp=base_timestamp + timestamp_delta if append_time is None else append_time,
            key=key if key is None or type(key) is bytes else bytes(key),
            value=value if value is None or type(value) is bytes else bytes(value),
            headers=tuple(headers),
        )
    if pos != limit:
        raise InvalidRecords(
            ErrorCode.INVALID_RECORD, "incorrect declared batch size, records still remaining"
        )


RecordLike = Record | tuple[bytes | None, bytes | None, Sequence[Header], int]


def build_batch(
    records: Sequence[RecordLike],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    last_offset_delta: int | None = None,
) -> bytes:
    """Encode one magic-2 batch, with its CRC, ready to append or send.

    `records` holds either `(key, value, headers, timestamp)` tuples, which take
    consecutive offsets from `base_offset`, or `Record`s, whose absolute `offset` is kept
    (delta = offset - base_offset; compaction leaves gaps). Headers are `(str, bytes|None)`.

    baseTimestamp is the first record's timestamp and maxTimestamp the largest, or
    `log_append_time` for a LOG_APPEND_TIME batch. `last_offset_delta` overrides the
    computed one: compaction keeps a batch's last offset when it drops its last records,
    and an empty batch (no records) must say which offsets it stands for.
    """
    body = bytearray()
    timestamps: list[int] = []
    delta = -1
    for index, item in enumerate(records):
        if isinstance(item, Record):
            delta = item.offset - base_offset
            key, value, headers, timestamp = item.key, item.value, item.headers, item.timestamp
        else:
            key, value, headers, timestamp = item
            delta = index
        if not timestamps:
            first_timestamp = timestamp
        timestamps.append(timestamp)
        _append_record(body, delta, timestamp - first_timestamp, key, value, headers)
    count = len(timestamps)
    if last_offset_delta is None:
        last_offset_delta = max(delta, 0)
    if count:
        base_timestamp = timestamps[0]
        max_timestamp = max(timestamps)
    else:
        base_timestamp = max_timestamp = NO_TIMESTAMP
    attributes = int(compression)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= ATTR_TIMESTAMP_TYPE
        if log_append_time is not None:
            max_timestamp = log_append_time
    if is_transactional:
        attributes |= ATTR_TRANSACTIONAL
    if is_control:
        attributes |= ATTR_CONTROL
    payload = bytes(body) if compression == Compression.NONE else _compress(compression, body)
    out = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(
        out,
        0,
        base_offset,
        HEADER_SIZE - LOG_OVERHEAD + len(payload),
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    out[HEADER_SIZE:] = payload
    _UINT32.pack_into(out, CRC_OFFSET, crc.crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def _compress(codec: Compression, body: bytearray) -> bytes:
    return _codecs.compress(codec, bytes(body))


def _append_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
) -> None:
    rec = bytearray(b"\x00")  # attributes
    rec += encode_varlong(timestamp_delta)
    rec += encode_varint(offset_delta)
    _append_bytes(rec, key)
    _append_bytes(rec, value)
    rec += encode_varint(len(headers))
    for hkey, hvalue in headers:
        raw_key = hkey.encode("utf-8", "surrogateescape") if isinstance(hkey, str) else hkey
        _append_bytes(rec, raw_key)
        _append_bytes(rec, hvalue)
    out += encode_varint(len(rec))
    out += rec


def _append_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += _MINUS_ONE
    else:
        out += encode_varint(len(data))
        out += data


_MINUS_ONE = encode_varint(-1)
