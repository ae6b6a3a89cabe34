"""The codecs of record batches: gzip, snappy, lz4 and zstd, all through cramjam.

A compressed batch stores its records as one compressed blob after the 61-byte header.
What each codec's blob looks like is whatever Kafka's Java client writes, because every
other client and broker reads that:

- gzip: a gzip member (GZIPOutputStream), default level 6.
- snappy: xerial framing (SnappyOutputStream): the magic ``\\x82SNAPPY\\x00``, version
  and compatible-version int32s, then blocks of int32 length + raw snappy, 32 KiB of
  input per block. Some producers (librdkafka among them) send plain raw snappy instead;
  decompression accepts both, as Java's SnappyInputStream does.
- lz4: the LZ4 frame format with independent blocks (Java's KafkaLZ4BlockInputStream
  decodes each block on its own, so linked blocks would not read back there).
- zstd: one zstd frame, level 3 (zstd-jni's default).
"""

from __future__ import annotations

import struct

import cramjam

from trio_broker.errors import ErrorCode
from trio_broker.protocol.records import InvalidRecords

__all__ = ["compress", "decompress"]

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

GZIP_LEVEL = 6
ZSTD_LEVEL = 3

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")


def _error(code: ErrorCode, message: str) -> Exception:
    return InvalidRecords(code, message)


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Compress a batch's records with `codec` (1-4) as Kafka's Java producer would."""
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data, level=GZIP_LEVEL))
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL))
    if codec == NONE:
        return bytes(data)
    raise _error(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Decompress a batch's records blob; corrupt data raises InvalidRecords(CORRUPT_MESSAGE)."""
    try:
        if codec == GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == SNAPPY:
            if bytes(data[: len(XERIAL_MAGIC)]) == XERIAL_MAGIC and len(data) >= 16:
                return _xerial_decompress(memoryview(data))
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise _error(
            ErrorCode.CORRUPT_MESSAGE, f"failed to decompress record stream: {exc}"
        ) from None
    if codec == NONE:
        return bytes(data)
    raise _error(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")


def _xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    mv = memoryview(data)
    out = bytearray(_XERIAL_HEADER)
    for start in range(0, len(mv), _XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(mv[start : start + _XERIAL_BLOCK_SIZE])
        out += _INT32.pack(len(block))
        out += block
    return bytes(out)


def _xerial_decompress(mv: memoryview) -> bytes:
    # Magic (8 bytes), version, compatible version, then length-prefixed raw blocks.
    out = bytearray()
    pos = 16
    end = len(mv)
    while pos < end:
        if end - pos < 4:
            raise _error(ErrorCode.CORRUPT_MESSAGE, "snappy block length cut short")
        (length,) = _INT32.unpack_from(mv, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise _error(ErrorCode.CORRUPT_MESSAGE, f"snappy block of {length} bytes cut short")
        out += cramjam.snappy.decompress_raw(mv[pos : pos + length])
        pos += length
    return bytes(out)
