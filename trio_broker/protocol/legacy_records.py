"""Message sets of formats 0 and 1 (Kafka before 0.11): read and written, never stored.

Produce v0-v2 carries them and Fetch v0-v3 answers with them; the log holds only format 2
batches, so the broker converts on the way in and on the way out (apis/old_formats.py),
as Kafka 3.x does for a topic of message format 2. Layout of one message, big-endian::

    offset int64 | size int32 | crc uint32 | magic int8 | attributes int8
    | timestamp int64 (magic 1 only) | key bytes (int32 length, -1 null) | value bytes

`size` counts from crc to the end; the CRC is CRC-32 (not 32C) of magic to the end.
Attributes: bits 0-2 the codec, bit 3 (magic 1) the timestamp type. A compressed message
is a wrapper whose value is the compressed message set of its inner messages: in magic 1
their offsets are relative (0..n-1) and the wrapper's is the absolute offset of the last;
in magic 0 the inner offsets are the absolute ones.

LZ4 in magic 0: Kafka before 0.10 wrote the frame's header checksum over the wrong bytes
(KAFKA-3160), and Kafka goes on reading such frames and writing them for magic 0
(KafkaLZ4BlockInputStream/OutputStream with the "broken" flag descriptor checksum). A
magic 0 LZ4 frame is therefore read whatever its header checksum says, and written with
the checksum those readers expect.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from trio_broker.errors import ErrorCode
from trio_broker.protocol import compression as _codecs
from trio_broker.protocol.records import InvalidRecords

__all__ = [
    "LegacyMessage",
    "build_message_set",
    "iter_legacy_messages",
    "message_set_magic",
]

_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_LOG_OVERHEAD = 12
_MIN_SIZE_V0 = 14  # crc, magic, attributes, key length, value length
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_CODEC_MASK = 0x07
_TIMESTAMP_TYPE = 0x08
NO_TIMESTAMP = -1


class LegacyMessage(NamedTuple):
    """One record of a format 0 or 1 message set, after decompression."""

    offset: int  # as written: relative inside a magic 1 wrapper
    timestamp: int  # -1 in magic 0
    key: bytes | None
    value: bytes | None
    magic: int
    codec: int  # the wrapper's codec for an inner message, else 0
    log_append_time: bool  # the (wrapper's) timestamp type


def message_set_magic(buf: bytes | bytearray | memoryview) -> int:
    """The magic byte of the first message or batch of `buf` (-1 when too short)."""
    return buf[16] if len(buf) > 16 else -1


def _read_bytes(mv: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    if end - pos < 4:
        raise InvalidRecords(ErrorCode.CORRUPT_MESSAGE, "message cut short in a length")
    (length,) = _INT32.unpack_from(mv, pos)
    pos += 4
    if length < 0:
        return None, pos
    if length > end - pos:
        raise InvalidRecords(ErrorCode.CORRUPT_MESSAGE, f"{length} bytes do not fit the message")
    return bytes(mv[pos : pos + length]), pos + length


def iter_legacy_messages(
    buf: bytes | bytearray | memoryview, *, depth: int = 0
) -> Iterator[LegacyMessage]:
    """Every record of a format 0/1 message set, wrappers decompressed, CRCs checked.

    Raises InvalidRecords: CORRUPT_MESSAGE for a bad CRC or a message cut short (a
    partial message at the end of a produce is an error, unlike in a fetch), INVALID_RECORD
    for a magic 2 batch among old messages or a wrapper inside a wrapper."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    total = len(mv)
    pos = 0
    while pos < total:
        if total - pos < _LOG_OVERHEAD + _MIN_SIZE_V0:
            raise InvalidRecords(ErrorCode.CORRUPT_MESSAGE, "message set ends in a partial message")
        offset, size, crc, magic, attributes = _HEAD.unpack_from(mv, pos)
        end = pos + _LOG_OVERHEAD + size
        if size < _MIN_SIZE_V0 or end > total:
            raise InvalidRecords(ErrorCode.CORRUPT_MESSAGE, f"message of size {size} cut short")
        if magic not in (0, 1):
            raise InvalidRecords(
                ErrorCode.INVALID_RECORD if magic == 2 else ErrorCode.CORRUPT_MESSAGE,
                f"magic {magic} in a message set of format 0 or 1",
            )
        body_start = pos + _LOG_OVERHEAD + 4  # magic
        if zlib.crc32(mv[body_start:end]) != crc:
            raise InvalidRecords(ErrorCode.CORRUPT_MESSAGE, f"message at offset {offset}: bad CRC")
        p = body_start + 2
        timestamp = NO_TIMESTAMP
        if magic == 1:
            if end - p < 8:
                raise InvalidRecords(ErrorCode.CORRUPT_MESSAGE, "message cut short")
            (timestamp,) = _INT64.unpack_from(mv, p)
            p += 8
        key, p = _read_bytes(mv, p, end)
        value, p = _read_bytes(mv, p, end)
        codec = attributes & _CODEC_MASK
        append_time = bool(attributes & _TIMESTAMP_TYPE) and magic == 1
        if codec == 0:
            yield LegacyMessage(offset, timestamp, key, value, magic, 0, append_time)
        else:
            if depth:
                raise InvalidRecords(ErrorCode.INVALID_RECORD, "compressed message in a wrapper")
            if codec > _codecs.LZ4:
                # zstd came with format 2 (KIP-110); 5-7 are no codec at all.
                raise InvalidRecords(
                    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                    f"codec {codec} in a message of magic {magic}",
                )
            inner = _decompress(codec, value or b"", magic)
            for m in iter_legacy_messages(inner, depth=1):
                yield LegacyMessage(
                    m.offset,
                    timestamp if append_time else m.timestamp,
                    m.key,
                    m.value,
                    m.magic,
                    codec,
                    append_time,
                )
        pos = end


def _decompress(codec: int, data: bytes, magic: int) -> bytes:
    if codec == _codecs.LZ4 and magic == 0:
        data = _fix_lz4_header_checksum(data)
    return _codecs.decompress(codec, data)


# -- LZ4 frame headers (magic 0's quirk) -----------------------------------------------

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _xxh32_short(data: bytes) -> int:
    """xxHash32 (seed 0) of fewer than 16 bytes: an LZ4 frame descriptor."""
    assert len(data) < 16
    h = (_P5 + len(data)) & _M32
    i = 0
    while i + 4 <= len(data):
        (word,) = struct.unpack_from("<I", data, i)
        h = (_rotl((h + word * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    for b in data[i:]:
        h = (_rotl((h + b * _P5) & _M32, 11) * _P1) & _M32
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


def _descriptor_end(frame: bytes) -> int:
    """Where the header checksum byte of an LZ4 frame is (after FLG, BD, content size)."""
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        raise InvalidRecords(ErrorCode.CORRUPT_MESSAGE, "not an LZ4 frame")
    flg = frame[4]
    return 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)


def _fix_lz4_header_checksum(frame: bytes) -> bytes:
    at = _descriptor_end(frame)
    if len(frame) <= at:
        raise InvalidRecords(ErrorCode.CORRUPT_MESSAGE, "LZ4 frame header cut short")
    hc = (_xxh32_short(frame[4:at]) >> 8) & 0xFF
    return frame[:at] + bytes((hc,)) + frame[at + 1 :]


def _break_lz4_header_checksum(frame: bytes) -> bytes:
    # What Kafka before 0.10 wrote: the checksum over the magic number and the descriptor.
    at = _descriptor_end(frame)
    hc = (_xxh32_short(frame[:at]) >> 8) & 0xFF
    return frame[:at] + bytes((hc,)) + frame[at + 1 :]


# -- writing ---------------------------------------------------------------------------


def _message(
    offset: int,
    magic: int,
    attributes: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
) -> bytes:
    body = bytearray(struct.pack(">bb", magic, attributes))
    if magic == 1:
        body += _INT64.pack(timestamp)
    for part in (key, value):
        if part is None:
            body += _INT32.pack(-1)
        else:
            body += _INT32.pack(len(part))
            body += part
    crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, len(body) + 4, crc) + bytes(body)


MessageLike = tuple[int, int, bytes | None, bytes | None]  # offset, timestamp, key, value


def build_message_set(
    messages: Sequence[MessageLike],
    *,
    magic: int,
    codec: int = 0,
    log_append_time: int | None = None,
) -> bytes:
    """Messages of absolute offsets as a format `magic` message set; with a codec, one
    wrapper holding them all (offsets as that magic writes them). `log_append_time` marks a
    magic 1 set as LogAppendTime with that timestamp."""
    ts_attr = _TIMESTAMP_TYPE if magic == 1 and log_append_time is not None else 0
    if codec == 0:
        return b"".join(
            _message(
                off,
                magic,
                ts_attr,
                log_append_time if ts_attr else ts,
                key,
                value,
            )
            for off, ts, key, value in messages
        )
    if not messages:
        return b""
    last = messages[-1][0]
    first = messages[0][0]
    inner = b"".join(
        _message(
            off - first if magic == 1 else off,
            magic,
            ts_attr,
            log_append_time if ts_attr else ts,
            key,
            value,
        )
        for off, ts, key, value in messages
    )
    payload = _codecs.compress(codec, inner)
    if codec == _codecs.LZ4 and magic == 0:
        payload = _break_lz4_header_checksum(payload)
    if magic == 1:
        wrapper_ts = (
            log_append_time if ts_attr else max((ts for _, ts, _, _ in messages), default=-1)
        )
    else:
        wrapper_ts = NO_TIMESTAMP
    return _message(last, magic, codec | ts_attr, wrapper_ts, None, payload)
