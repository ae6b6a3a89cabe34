"""Record batches (magic 2): our encoder and decoder against kafka-python's, and Kafka's errors."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from trio_broker.errors import ErrorCode
from trio_broker.protocol.record_codec import (
    Record,
    build_batch,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    iter_records,
)
from trio_broker.protocol.records import (
    HEADER_SIZE,
    BatchHeader,
    Compression,
    InvalidRecords,
    TimestampType,
    compute_crc,
    iter_batches,
    read_header,
    scan_valid_prefix,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batches,
)

# (key, value, headers, timestamp): a mix of null/empty/binary keys, values and headers.
SAMPLE = [
    (b"key-0", b"value-0", [("trace", b"abc"), ("empty", b""), ("null", None)], 1_700_000_000_000),
    (None, b"value-1" * 50, [], 1_700_000_000_005),
    (b"", None, [("\u00e9t\u00e9", b"\x00\xff")], 1_699_999_999_990),
    (bytes(range(256)), bytes(range(256)) * 10, [], 1_700_000_000_100),
]
CODECS = list(Compression)


def expect_error(code: ErrorCode, fn, *args, **kwargs) -> InvalidRecords:
    with pytest.raises(InvalidRecords) as info:
        fn(*args, **kwargs)
    assert info.value.code == code, info.value
    return info.value


def patch(batch: bytes, fmt: str, offset: int, value: int, *, fix_crc: bool = True) -> bytes:
    """Overwrite one header field and, by default, make the CRC match again."""
    out = bytearray(batch)
    struct.pack_into(fmt, out, offset, value)
    if fix_crc:
        struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def kafka_python_batch(codec: int, records=SAMPLE, **producer) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=producer.get("is_transactional", False),
        producer_id=producer.get("producer_id", -1),
        producer_epoch=producer.get("producer_epoch", -1),
        base_sequence=producer.get("base_sequence", -1),
        batch_size=1 << 22,
    )
    for offset, (key, value, headers, timestamp) in enumerate(records):
        builder.append(offset, timestamp, key, value, headers)
    return bytes(builder.build())


def as_tuples(records) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def expected(records=SAMPLE, base_offset: int = 0) -> list[tuple]:
    return [
        (base_offset + i, ts, key, value, [tuple(h) for h in headers])
        for i, (key, value, headers, ts) in enumerate(records)
    ]


# --- bytes on the wire ------------------------------------------------------------------


def test_uncompressed_batch_is_byte_identical_to_kafka_python():
    # kafka-python writes partitionLeaderEpoch 0 where the Java producer writes -1.
    ours = build_batch(SAMPLE, partition_leader_epoch=0)
    assert ours == kafka_python_batch(0)


def test_golden_single_record_batch():
    batch = build_batch([(b"k", b"v", [], 1000)])
    assert (
        batch[:HEADER_SIZE]
        == bytes.fromhex(
            "0000000000000000"  # baseOffset 0
            "0000003a"  # batchLength 58 = 49 + 9 bytes of record
            "ffffffff"  # partitionLeaderEpoch -1
            "02"  # magic 2
            + f"{crc32c.crc32c(batch[21:]):08x}"  # crc over attributes..end
            + "0000"  # attributes: no codec, CreateTime, not transactional, not control
            "00000000"  # lastOffsetDelta 0
            "00000000000003e8"  # baseTimestamp 1000
            "00000000000003e8"  # maxTimestamp 1000
            "ffffffffffffffff"  # producerId -1
            "ffff"  # producerEpoch -1
            "ffffffff"  # baseSequence -1
            "00000001"  # recordCount 1
        )
    )
    # length 8 (zigzag 10), attributes, timestampDelta 0, offsetDelta 0, key "k", value "v", 0 headers
    assert batch[HEADER_SIZE:] == bytes.fromhex("10000000026b027600")


def test_header_fields_and_properties():
    batch = build_batch(
        SAMPLE,
        base_offset=100,
        compression=Compression.LZ4,
        producer_id=42,
        producer_epoch=3,
        base_sequence=7,
        is_transactional=True,
        partition_leader_epoch=5,
    )
    header = read_header(batch)
    assert isinstance(header, BatchHeader)
    assert header.base_offset == 100
    assert header.size == len(batch) == 12 + header.batch_length
    assert header.partition_leader_epoch == 5
    assert header.magic == 2
    assert header.crc == compute_crc(batch)
    assert header.compression is Compression.LZ4
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert header.is_transactional and not header.is_control and not header.is_log_append_time
    assert (header.last_offset_delta, header.last_offset, header.next_offset) == (3, 103, 104)
    assert header.base_timestamp == SAMPLE[0][3]
    assert header.max_timestamp == max(r[3] for r in SAMPLE)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 7)
    assert header.record_count == 4


def test_read_header_at_position_and_short_buffer():
    batch = build_batch(SAMPLE)
    assert read_header(b"xx" + batch, 2) == read_header(batch)
    expect_error(ErrorCode.CORRUPT_MESSAGE, read_header, batch[:60])
    expect_error(ErrorCode.CORRUPT_MESSAGE, read_header, batch, len(batch) - 10)


# --- cross-checks with kafka-python, every codec ------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kafka_python_batches_decode(codec):
    batch = kafka_python_batch(codec, producer_id=9, producer_epoch=1, base_sequence=0)
    [header] = validate_batches(batch)
    assert header.compression == codec
    assert (header.producer_id, header.base_sequence, header.record_count) == (9, 0, 4)
    assert as_tuples(iter_records(batch)) == expected()


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kafka_python_memory_records_builder_decode(codec):
    builder = MemoryRecordsBuilder(magic=2, compression_type=codec, batch_size=1 << 22)
    for key, value, headers, ts in SAMPLE:
        builder.append(ts, key, value, headers)
    builder.close()
    blob = bytes(builder.buffer())
    [(pos, header)] = list(iter_batches(blob))
    assert pos == 0 and header.size == len(blob)
    validate_batches(blob, single_batch=True)
    assert as_tuples(iter_records(blob)) == expected()


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_our_batches_decode_with_kafka_python(codec):
    batch = build_batch(
        SAMPLE,
        base_offset=1000,
        compression=codec,
        producer_id=5,
        producer_epoch=2,
        base_sequence=11,
        is_transactional=True,
    )
    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (5, 2, 11)
    assert theirs.is_transactional
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs]
    assert got == expected(base_offset=1000)
    # and through kafka-python's records-set reader, as a consumer sees a fetch response
    assert [b.base_offset for b in _batches(MemoryRecords(batch + batch))] == [1000, 1000]


def _batches(records: MemoryRecords) -> list:
    out = []
    while (batch := records.next_batch()) is not None:
        out.append(batch)
    return out


# --- validation errors (produce path) ---------------------------------------------------


def test_validate_returns_headers_in_order_without_copying():
    one = build_batch(SAMPLE[:1])
    two = build_batch(SAMPLE, compression=Compression.GZIP)
    headers = validate_batches(memoryview(one + two))
    assert [h.record_count for h in headers] == [1, 4]
    assert headers[1].compression is Compression.GZIP


def test_empty_records_is_invalid_record():
    expect_error(ErrorCode.INVALID_RECORD, validate_batches, b"")


@pytest.mark.parametrize("offset", [21, 40, 61, 70, -1])
def test_flipped_bit_is_corrupt_message(offset):
    batch = bytearray(build_batch(SAMPLE))
    batch[offset] ^= 0x10
    expect_error(ErrorCode.CORRUPT_MESSAGE, validate_batches, bytes(batch))


def test_flipped_crc_is_corrupt_message():
    batch = bytearray(build_batch(SAMPLE))
    batch[18] ^= 0x01
    expect_error(ErrorCode.CORRUPT_MESSAGE, validate_batches, bytes(batch))


def test_truncated_batch_is_corrupt_message():
    batch = build_batch(SAMPLE)
    for cut in (5, 16, 17, 60, 61, len(batch) - 1):
        expect_error(ErrorCode.CORRUPT_MESSAGE, validate_batches, batch[:cut])


def test_trailing_partial_batch_is_corrupt_message():
    batch = build_batch(SAMPLE)
    expect_error(ErrorCode.CORRUPT_MESSAGE, validate_batches, batch + batch[:30])


def test_length_past_end_is_corrupt_message():
    batch = build_batch(SAMPLE)
    too_long = patch(batch, ">i", 8, len(batch), fix_crc=False)
    expect_error(ErrorCode.CORRUPT_MESSAGE, validate_batches, too_long)


@pytest.mark.parametrize("length", [-1, 0, 14, 48])
def test_length_below_header_is_corrupt_message(length):
    batch = patch(build_batch(SAMPLE), ">i", 8, length, fix_crc=False)
    expect_error(ErrorCode.CORRUPT_MESSAGE, validate_batches, batch)


@pytest.mark.parametrize(("magic", "code"), [(0, "INVALID_RECORD"), (1, "INVALID_RECORD")])
def test_legacy_magic_is_invalid_record(magic, code):
    # Kafka's ProduceRequest (v3+) refuses magic 0/1 with InvalidRecordException.
    batch = patch(build_batch(SAMPLE), ">b", 16, magic, fix_crc=False)
    expect_error(ErrorCode[code], validate_batches, batch)


@pytest.mark.parametrize("magic", [3, 99, -1])
def test_unknown_magic_is_corrupt_message(magic):
    batch = patch(build_batch(SAMPLE), ">b", 16, magic, fix_crc=False)
    expect_error(ErrorCode.CORRUPT_MESSAGE, validate_batches, batch)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_is_unsupported_compression_type(codec):
    batch = patch(build_batch(SAMPLE), ">h", 21, codec)
    expect_error(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, validate_batches, batch)
    expect_error(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, lambda: read_header(batch).compression)
    expect_error(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, lambda: list(iter_records(batch)))


@pytest.mark.parametrize("count", [0, 3, 5, -1])
def test_record_count_mismatch_is_invalid_record(count):
    batch = patch(build_batch(SAMPLE), ">i", 57, count)
    expect_error(ErrorCode.INVALID_RECORD, validate_batches, batch)


def test_last_offset_delta_mismatch_is_invalid_record():
    batch = patch(build_batch(SAMPLE), ">i", 23, 7)
    expect_error(ErrorCode.INVALID_RECORD, validate_batches, batch)


def test_replicated_compacted_batch_may_have_fewer_records_than_offsets():
    records = [Record(offset=10, timestamp=1, key=b"a", value=b"1")]
    batch = build_batch(records, base_offset=10, last_offset_delta=4)
    [header] = validate_batches(batch, from_client=False)
    assert (header.record_count, header.last_offset) == (1, 14)
    expect_error(ErrorCode.INVALID_RECORD, validate_batches, batch)


def test_nonzero_base_offset_from_client_is_invalid_record():
    batch = build_batch(SAMPLE, base_offset=5)
    expect_error(ErrorCode.INVALID_RECORD, validate_batches, batch)
    assert validate_batches(batch, from_client=False)[0].base_offset == 5


def test_control_batch_from_client_is_invalid_record():
    batch = build_batch([(b"\x00\x00\x00\x00", b"", [], 1)], is_control=True, producer_id=1)
    expect_error(ErrorCode.INVALID_RECORD, validate_batches, batch)
    assert validate_batches(batch, from_client=False)[0].is_control


def test_producer_id_without_sequence_is_invalid_record():
    batch = build_batch(SAMPLE, producer_id=3, producer_epoch=0, base_sequence=-1)
    expect_error(ErrorCode.INVALID_RECORD, validate_batches, batch)


def test_batch_over_max_size_is_message_too_large():
    batch = build_batch(SAMPLE)
    assert validate_batches(batch, max_batch_size=len(batch))
    expect_error(
        ErrorCode.MESSAGE_TOO_LARGE, validate_batches, batch, max_batch_size=len(batch) - 1
    )


def test_single_batch_refuses_a_second_batch():
    batch = build_batch(SAMPLE)
    assert len(validate_batches(batch + batch)) == 2
    expect_error(ErrorCode.INVALID_RECORD, validate_batches, batch + batch, single_batch=True)


# --- reading stored logs ----------------------------------------------------------------


def _log(n: int) -> bytes:
    out = b""
    for i in range(n):
        out += build_batch(SAMPLE, base_offset=4 * i, compression=CODECS[i % len(CODECS)])
    return out


def test_iter_batches_yields_positions_and_stops_at_torn_tail():
    log = _log(5)
    sizes = [h.size for _, h in iter_batches(log)]
    positions = [p for p, _ in iter_batches(log)]
    assert positions == [sum(sizes[:i]) for i in range(5)]
    assert [h.base_offset for _, h in iter_batches(log)] == [0, 4, 8, 12, 16]
    for cut in (1, 30, 61, sizes[-1] - 1):
        assert len(list(iter_batches(log[:-cut]))) == 4
    assert len(list(iter_batches(log + bytes(4096)))) == 5  # preallocated zeros
    assert [p for p, _ in iter_batches(log, positions[2])] == positions[2:]


def test_scan_valid_prefix_stops_at_first_bad_batch():
    log = _log(4)
    total = len(log)
    assert scan_valid_prefix(log)[0] == total
    torn = log + build_batch(SAMPLE)[:100]
    valid, headers = scan_valid_prefix(torn)
    assert (valid, len(headers)) == (total, 4)
    bad = bytearray(log)
    third = [p for p, _ in iter_batches(log)][2]
    bad[third + 70] ^= 0xFF
    valid, headers = scan_valid_prefix(memoryview(bad))
    assert (valid, [h.base_offset for h in headers]) == (third, [0, 4])
    assert scan_valid_prefix(b"") == (0, [])


# --- in-place rewrites ------------------------------------------------------------------


def test_set_base_offset_and_epoch_keep_crc_valid():
    buf = bytearray(b"\x00" * 7 + build_batch(SAMPLE, compression=Compression.SNAPPY))
    set_base_offset(buf, 7, 123_456)
    set_partition_leader_epoch(memoryview(buf), 7, 9)
    batch = bytes(buf[7:])
    [header] = validate_batches(batch, from_client=False)
    assert (header.base_offset, header.partition_leader_epoch) == (123_456, 9)
    assert [r.offset for r in iter_records(batch)] == [123_456 + i for i in range(4)]
    assert DefaultRecordBatch(batch).validate_crc()


def test_set_log_append_time_recomputes_crc():
    buf = bytearray(build_batch(SAMPLE, compression=Compression.ZSTD))
    old_crc = read_header(buf).crc
    set_log_append_time(buf, 0, 1_800_000_000_000)
    header = validate_batches(bytes(buf))[0]
    assert header.crc != old_crc
    assert header.is_log_append_time and header.max_timestamp == 1_800_000_000_000
    assert {r.timestamp for r in iter_records(buf)} == {1_800_000_000_000}
    theirs = DefaultRecordBatch(bytes(buf))
    assert theirs.validate_crc() and theirs.timestamp_type == 1
    assert {r.timestamp for r in theirs} == {1_800_000_000_000}


# --- records ----------------------------------------------------------------------------


def test_compacted_records_keep_offsets_and_last_offset():
    kept = [
        Record(offset=52, timestamp=5, key=b"a", value=b"1", headers=(("h", None),)),
        Record(offset=55, timestamp=9, key=b"b", value=None),
    ]
    batch = build_batch(kept, base_offset=50, last_offset_delta=7, compression=Compression.GZIP)
    header = read_header(batch)
    assert (header.base_offset, header.last_offset, header.record_count) == (50, 57, 2)
    assert list(iter_records(batch)) == kept


def test_empty_batch():
    batch = build_batch([], base_offset=10, last_offset_delta=2, producer_id=4, base_sequence=0)
    header = validate_batches(batch, from_client=False)[0]
    assert (header.record_count, header.last_offset, header.max_timestamp) == (0, 12, -1)
    assert list(iter_records(batch)) == []


def test_log_append_time_batch_built_directly():
    batch = build_batch(SAMPLE, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=1_234)
    assert read_header(batch).timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in iter_records(batch)] == [1_234] * 4


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_record_count_larger_than_records_is_invalid_record(codec):
    batch = patch(build_batch(SAMPLE, compression=codec), ">i", 57, 5)
    expect_error(ErrorCode.INVALID_RECORD, lambda: list(iter_records(batch)))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_records_left_over_is_invalid_record(codec):
    batch = patch(build_batch(SAMPLE, compression=codec), ">i", 57, 3)
    expect_error(ErrorCode.INVALID_RECORD, lambda: list(iter_records(batch)))


def test_record_length_past_batch_end_is_invalid_record():
    batch = bytearray(build_batch([(b"k", b"v", [], 1000)]))
    batch[HEADER_SIZE] = 0x7E  # record length 63, with 7 bytes left
    expect_error(ErrorCode.INVALID_RECORD, lambda: list(iter_records(bytes(batch))))


def test_negative_header_count_is_invalid_record():
    batch = bytearray(build_batch([(b"k", b"v", [], 1000)]))
    batch[-1] = 0x01  # headersCount -1
    expect_error(ErrorCode.INVALID_RECORD, lambda: list(iter_records(bytes(batch))))


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.name)
def test_corrupt_compressed_payload_is_corrupt_message(codec):
    batch = bytearray(build_batch(SAMPLE, compression=codec))
    batch[HEADER_SIZE : HEADER_SIZE + 8] = b"\xde\xad\xbe\xef" * 2
    expect_error(ErrorCode.CORRUPT_MESSAGE, lambda: list(iter_records(bytes(batch))))


# --- varints ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"), (300, "d804")],
)
def test_varint_golden(value, encoded):
    assert encode_varint(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(value):
    raw = encode_varint(value)
    assert len(raw) <= 5
    assert decode_varint(b"\xff" + raw, 1) == (value, len(raw) + 1)


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(value):
    raw = encode_varlong(value)
    assert len(raw) <= 10
    assert decode_varlong(memoryview(raw)) == (value, len(raw))


def test_overlong_varint_is_invalid_record():
    expect_error(ErrorCode.INVALID_RECORD, decode_varint, b"\xff" * 6)
    expect_error(ErrorCode.INVALID_RECORD, decode_varint, b"\xff\xff")


# --- property round trip ----------------------------------------------------------------

_bytes = st.one_of(st.none(), st.binary(max_size=300))
_headers = st.lists(st.tuples(st.text(max_size=10), _bytes), max_size=3)
_records = st.lists(
    st.tuples(_bytes, _bytes, _headers, st.integers(0, 2**42)), min_size=1, max_size=20
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=_records, codec=st.sampled_from(CODECS), base_offset=st.integers(0, 2**40))
def test_build_then_read_round_trip(records, codec, base_offset):
    batch = build_batch(records, base_offset=base_offset, compression=codec)
    [header] = validate_batches(batch, from_client=False)
    assert header.record_count == len(records)
    assert header.max_timestamp == max(r[3] for r in records)
    assert as_tuples(iter_records(batch)) == expected(records, base_offset)
    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert [(r.offset, r.key, r.value) for r in theirs] == [
        (base_offset + i, k, v) for i, (k, v, _, _) in enumerate(records)
    ]


@settings(max_examples=200, deadline=None)
@given(
    codec=st.sampled_from(CODECS),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_mangled_records_raise_only_invalid_records(codec, edits):
    # The CRC is fixed up after the damage, so the decoder itself must refuse bad bytes.
    batch = bytearray(build_batch(SAMPLE, compression=codec))
    for where, byte in edits:
        batch[HEADER_SIZE + where % (len(batch) - HEADER_SIZE)] = byte
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    validate_batches(bytes(batch))
    try:
        records = list(iter_records(bytes(batch)))
    except InvalidRecords as exc:
        assert exc.code in (ErrorCode.INVALID_RECORD, ErrorCode.CORRUPT_MESSAGE)
    else:
        assert len(records) == 4
