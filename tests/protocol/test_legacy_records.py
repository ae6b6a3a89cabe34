"""Message sets of formats 0 and 1 (trio_broker/protocol/legacy_records.py): golden bytes,
kafka-python's own encoder and decoder as the other side, the LZ4 header quirk of magic 0,
and bad bytes that must only ever raise InvalidRecords."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_broker.apis.old_formats import up_convert_produce
from trio_broker.errors import ErrorCode
from trio_broker.protocol.compression import GZIP, LZ4, NONE, SNAPPY
from trio_broker.protocol.legacy_records import (
    _fix_lz4_header_checksum,
    _xxh32_short,
    build_message_set,
    iter_legacy_messages,
)
from trio_broker.protocol.records import InvalidRecords

MESSAGES = [(i, 1_700_000_000_000 + i, b"k%d" % i, b"v" * i or None) for i in range(4)]


def test_golden_magic_1_message():
    got = build_message_set([(5, 1000, b"k", b"value")], magic=1)
    body = (
        b"\x01"  # magic
        + b"\x00"  # attributes: no codec, CreateTime
        + struct.pack(">q", 1000)  # timestamp
        + struct.pack(">i", 1)
        + b"k"  # key
        + struct.pack(">i", 5)
        + b"value"  # value
    )
    assert got == struct.pack(">qiI", 5, len(body) + 4, zlib.crc32(body)) + body


def test_xxh32_matches_the_reference_vectors():
    # xxHash's own test values (seed 0).
    assert _xxh32_short(b"") == 0x02CC5D05
    assert _xxh32_short(b"a") == 0x550D7456
    assert _xxh32_short(b"abc") == 0x32D153FF


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4])
@pytest.mark.parametrize("magic", [0, 1])
def test_kafka_python_reads_what_we_write_and_we_read_what_it_writes(magic, codec):
    from kafka.record import MemoryRecords
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    if codec == LZ4 and magic == 0:
        pytest.importorskip("xxhash")  # kafka-python's magic 0 LZ4 needs it
    ours = build_message_set(MESSAGES, magic=magic, codec=codec)
    records = MemoryRecords(ours)
    read = []
    while (batch := records.next_batch()) is not None:
        read += [(r.offset, r.key, r.value) for r in batch]
    assert read == [(o, k, v) for o, _, k, v in MESSAGES]
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for offset, ts, key, value in MESSAGES:
        builder.append(offset, timestamp=ts, key=key, value=value)
    theirs = bytes(builder.build())
    got = [(m.key, m.value, m.timestamp) for m in iter_legacy_messages(theirs)]
    assert got == [(k, v, ts if magic == 1 else -1) for _, ts, k, v in MESSAGES]


def test_a_magic_0_lz4_frame_is_read_with_either_header_checksum():
    wrong = build_message_set(MESSAGES, magic=0, codec=LZ4)  # Kafka 0.9's checksum
    values = [m.value for m in iter_legacy_messages(wrong)]
    assert values == [v for _, _, _, v in MESSAGES]
    # The frame inside carries the old checksum, which a strict reader refuses.
    frame = wrong[26:]
    assert _fix_lz4_header_checksum(frame) != frame


def test_up_conversion_keeps_the_codec_and_refuses_what_kafka_refuses():
    from trio_broker.protocol.record_codec import iter_records
    from trio_broker.protocol.records import Compression, read_header

    batch = up_convert_produce(build_message_set(MESSAGES, magic=1, codec=SNAPPY))
    assert read_header(batch).compression == Compression.SNAPPY
    assert [(r.offset, r.timestamp, r.key) for r in iter_records(batch)] == [
        (o, ts, k) for o, ts, k, _ in MESSAGES
    ]
    with pytest.raises(InvalidRecords) as err:
        up_convert_produce(b"")
    assert err.value.code == ErrorCode.INVALID_RECORD
    from trio_broker.protocol.compression import compress
    from trio_broker.protocol.legacy_records import _message

    wrapper = build_message_set(MESSAGES, magic=1, codec=GZIP)
    nested = _message(0, 1, GZIP, 1, None, compress(GZIP, wrapper))  # a wrapper in a wrapper
    with pytest.raises(InvalidRecords) as err:
        up_convert_produce(nested)
    assert err.value.code == ErrorCode.INVALID_RECORD


@settings(max_examples=300, deadline=None)
@given(
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from([NONE, GZIP, SNAPPY, LZ4]),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 10_000),
)
def test_mangled_message_sets_raise_only_invalid_records(magic, codec, flips, cut):
    data = bytearray(build_message_set(MESSAGES, magic=magic, codec=codec))
    for at, value in flips:
        data[at % len(data)] = value
    del data[cut % (len(data) + 1) :]
    try:
        up_convert_produce(bytes(data))
    except InvalidRecords:
        pass
