"""Record-batch codecs: our output read by other implementations, and theirs read by us."""

from __future__ import annotations

import gzip
import os
import struct

import cramjam
import lz4.frame
import pytest
import snappy
import zstandard
from kafka import codec as kafka_codec

from trio_broker.errors import ErrorCode
from trio_broker.protocol.compression import compress, decompress
from trio_broker.protocol.records import Compression, InvalidRecords

PAYLOADS = {
    "empty": b"",
    "small": b"hello kafka",
    "repetitive": b"abcdefgh" * 20_000,  # 160 KB: several snappy and lz4 blocks
    "random": os.urandom(100_000),
}
CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name)
@pytest.mark.parametrize("name", PAYLOADS)
def test_round_trip(codec, name):
    data = PAYLOADS[name]
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(b"xx" + packed)[2:]) == data


def test_gzip_interoperates_with_stdlib():
    data = PAYLOADS["repetitive"]
    assert gzip.decompress(compress(Compression.GZIP, data)) == data
    assert decompress(Compression.GZIP, gzip.compress(data)) == data


def test_snappy_writes_xerial_framing_like_the_java_client():
    data = PAYLOADS["repetitive"]
    packed = compress(Compression.SNAPPY, data)
    magic, version, compat = struct.unpack_from(">8sii", packed)
    assert (magic, version, compat) == (b"\x82SNAPPY\x00", 1, 1)
    # 32 KiB of input per block, each block int32 length + raw snappy
    pos, blocks = 16, []
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        blocks.append(snappy.uncompress(packed[pos + 4 : pos + 4 + n]))
        pos += 4 + n
    assert b"".join(blocks) == data
    assert {len(b) for b in blocks[:-1]} == {32 * 1024}
    assert kafka_codec.snappy_decode(packed) == data


def test_snappy_reads_xerial_and_raw():
    data = PAYLOADS["repetitive"]
    xerial = kafka_codec.snappy_encode(data, xerial_compatible=True, xerial_blocksize=4096)
    assert decompress(Compression.SNAPPY, xerial) == data
    assert decompress(Compression.SNAPPY, snappy.compress(data)) == data  # raw (librdkafka)
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(b"x"))) == b"x"


def test_lz4_writes_independent_blocks():
    data = PAYLOADS["repetitive"]
    packed = compress(Compression.LZ4, data)
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flg = packed[4]
    assert flg >> 6 == 1  # frame version 01
    assert flg & 0x20  # block independence: Java's KafkaLZ4BlockInputStream needs it
    assert lz4.frame.decompress(packed) == data
    assert kafka_codec.lz4_decode(packed) == data


def test_lz4_reads_other_encoders():
    data = PAYLOADS["repetitive"]
    assert decompress(Compression.LZ4, kafka_codec.lz4_encode(data)) == data
    assert decompress(Compression.LZ4, lz4.frame.compress(data, content_checksum=True)) == data


def test_zstd_interoperates():
    data = PAYLOADS["repetitive"]
    packed = compress(Compression.ZSTD, data)
    assert zstandard.ZstdDecompressor().decompressobj().decompress(packed) == data
    assert kafka_codec.zstd_decode(packed) == data
    # a streaming producer's frame carries no content size
    streamed = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    frame = streamed.compress(data) + streamed.flush()
    assert decompress(Compression.ZSTD, frame) == data


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec_is_unsupported_compression_type(codec):
    for fn in (compress, decompress):
        with pytest.raises(InvalidRecords) as info:
            fn(codec, b"data")
        assert info.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize(
    "junk", [b"not compressed at all", b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x7f"]
)
def test_corrupt_input_is_corrupt_message(codec, junk):
    with pytest.raises(InvalidRecords) as info:
        decompress(codec, junk)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_truncated_input_is_corrupt_message():
    for codec in CODECS:
        packed = compress(codec, PAYLOADS["random"])
        with pytest.raises(InvalidRecords) as info:
            decompress(codec, packed[: len(packed) // 2])
        assert info.value.code == ErrorCode.CORRUPT_MESSAGE, codec
