from __future__ import annotations

import os
import struct

import pytest
from logtest_helpers import append, make_batch

from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.config import LogConfig, TimestampType
from trio_broker.protocol.record_codec import iter_records
from trio_broker.protocol.records import iter_batches, read_header


def region_bytes(result) -> bytes:
    return b"".join(os.pread(r.fd, r.size, r.position) for r in result.regions)


def test_append_assigns_offsets_and_read_returns_exact_bytes(open_log):
    log = open_log()
    r1 = append(log, make_batch(3), leader_epoch=5)
    r2 = append(log, make_batch(2, tag=b"w"), make_batch(1, tag=b"z"), leader_epoch=5)
    assert (r1.first_offset, r1.last_offset) == (0, 2)
    assert (r2.first_offset, r2.last_offset) == (3, 5)
    assert r1.log_append_time_ms == -1 and not r1.duplicate
    assert log.log_end_offset == 6

    result = log.read(0, 1 << 20)
    data = region_bytes(result)
    assert result.size == len(data)
    # The file holds the client's bytes, with only base offset and leader epoch rewritten.
    on_disk = (log.dir / "00000000000000000000.log").read_bytes()
    assert data == on_disk
    headers = [h for _, h in iter_batches(data)]
    assert [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in headers] == [
        (0, 2, 5),
        (3, 4, 5),
        (5, 5, 5),
    ]
    assert [r.offset for _, h in iter_batches(data) for r in iter_records(data[_:])][:3] == [
        0,
        1,
        2,
    ]
    values = [
        r.value[:3] for pos, h in iter_batches(data) for r in iter_records(data[pos : pos + h.size])
    ]
    assert values == [b"v0-", b"v1-", b"v2-", b"w0-", b"w1-", b"z0-"]
    assert result.first_offset == 0 and result.next_offset == 6


def test_read_respects_max_offset_max_bytes_and_min_one_message(open_log):
    log = open_log()
    sizes = []
    for i in range(5):
        batch = make_batch(2, value_size=100, tag=b"%d" % i)
        sizes.append(len(batch))
        append(log, batch)
    # Mid-batch fetch offset returns the whole batch holding it.
    result = log.read(3, 1 << 20, max_offset=6)
    assert result.first_offset == 2 and result.next_offset == 6
    assert result.size == sizes[1] + sizes[2]
    # max_bytes cuts at whole batches only.
    result = log.read(0, sizes[0] + sizes[1] + 5)
    assert result.size == sizes[0] + sizes[1] and result.next_offset == 4
    # A batch larger than max_bytes still comes back whole when min_one_message.
    result = log.read(0, 10, min_one_message=True)
    assert result.size == sizes[0]
    assert log.read(0, 10, min_one_message=False).size == 0
    # At the high watermark: nothing, and no error.
    empty = log.read(10, 100, max_offset=10)
    assert empty.regions == [] and empty.size == 0 and empty.first_offset == -1


def test_read_out_of_range(open_log):
    log = open_log()
    append(log, make_batch(2))
    for bad in (-1, 3, 100):
        with pytest.raises(KafkaError) as info:
            log.read(bad, 100)
        assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.read(2, 100).size == 0


def test_roll_by_size_and_index_lookups(open_log):
    config = LogConfig(segment_bytes=4000, index_interval_bytes=300)
    log = open_log(config)
    batches = []
    for i in range(60):
        batches.append(make_batch(3, value_size=50, tag=b"%d" % i, timestamp=1000 + 10 * i))
        append(log, batches[-1])
    assert log.log_end_offset == 180
    assert len(log.segments) > 3
    names = sorted(p.name for p in log.dir.iterdir() if p.suffix == ".log")
    assert names[0] == "00000000000000000000.log"
    assert all(len(n) == len("00000000000000000000.log") for n in names)
    for segment in log.segments[:-1]:
        assert segment.size <= 4000
        # Rolled segments have trimmed indexes: the file holds exactly the entries.
        assert os.path.getsize(segment.offset_index.path) == 8 * segment.offset_index.entries
        assert segment.offset_index.entries > 0
    # The active segment's index file is written on roll, flush and close, not per entry
    # (entries live in memory; no descriptor is held): it holds at most its entries.
    active_index = log.active_segment.offset_index
    assert os.path.getsize(active_index.path) <= 8 * active_index.entries
    log.flush()
    assert os.path.getsize(active_index.path) == 8 * active_index.entries
    # Read every offset back through the index.
    for offset in range(0, 180, 7):
        result = log.read(offset, 1)
        header = read_header(os.pread(result.regions[0].fd, 61, result.regions[0].position))
        assert header.base_offset <= offset <= header.last_offset
    # The index entries on disk are (relative offset, position) pairs pointing at batches.
    seg = log.segments[1]
    raw = seg.offset_index.path.read_bytes()
    for rel, pos in struct.iter_unpack(">ii", raw):
        header = read_header(os.pread(seg.fd, 61, pos))
        assert header.last_offset == seg.base_offset + rel
    # Time index: timestamps increase, offsets point at the batch holding them.
    raw = seg.time_index.path.read_bytes()
    entries = list(struct.iter_unpack(">qi", raw))
    assert entries and [e[0] for e in entries] == sorted({e[0] for e in entries})
    # Reads across segment boundaries return contiguous whole batches.
    result = log.read(0, 1 << 20)
    data = region_bytes(result)
    assert [h.base_offset for _, h in iter_batches(data)] == list(range(0, 180, 3))


def test_offset_for_timestamp_and_max_timestamp(open_log):
    log = open_log(LogConfig(segment_bytes=2000, index_interval_bytes=100))
    for i in range(40):
        # record timestamps 1000 + 10*i + j
        append(log, make_batch(3, value_size=40, timestamp=1000 + 10 * i))
    assert len(log.segments) > 2
    assert log.offset_for_timestamp(0) == (0, 1000)
    assert log.offset_for_timestamp(1000 + 10 * 17 + 1) == (17 * 3 + 1, 1171)
    assert log.offset_for_timestamp(1000 + 10 * 17 + 3) == (18 * 3, 1180)
    assert log.offset_for_timestamp(10**13) is None
    assert log.max_timestamp_offset() == (119, 1392)


def test_roll_by_time_uses_message_timestamps(open_log, clock):
    config = LogConfig(segment_ms=60_000)
    log = open_log(config)
    append(log, make_batch(1, timestamp=clock()))
    clock.advance(30_000)
    append(log, make_batch(1, timestamp=clock()))
    assert len(log.segments) == 1
    clock.advance(31_000)
    append(log, make_batch(1, timestamp=clock()))
    assert [s.base_offset for s in log.segments] == [0, 2]
    # The rolled segment's producer snapshot is named after the new segment.
    assert (log.dir / "00000000000000000002.snapshot").exists()


def test_log_append_time_stamps_batches(open_log, clock):
    log = open_log(LogConfig(message_timestamp_type=TimestampType.LOG_APPEND_TIME))
    result = append(log, make_batch(2, timestamp=5))
    assert result.log_append_time_ms == clock()
    data = region_bytes(log.read(0, 1000))
    header = read_header(data)
    assert header.is_log_append_time and header.max_timestamp == clock()
    # The CRC was recomputed: the records still validate and carry the append time.
    assert [r.timestamp for r in iter_records(data)] == [clock(), clock()]
    from trio_broker.protocol.records import scan_valid_prefix

    assert scan_valid_prefix(data)[0] == len(data)


def test_leader_epoch_cache_and_end_offset_for_epoch(open_log):
    log = open_log()
    append(log, make_batch(2), leader_epoch=1)
    append(log, make_batch(2), leader_epoch=1)
    append(log, make_batch(3), leader_epoch=3)
    assert log.leader_epoch_cache.entries() == [(1, 0), (3, 4)]
    assert log.end_offset_for_epoch(1) == (1, 4)
    assert log.end_offset_for_epoch(2) == (1, 4)
    assert log.end_offset_for_epoch(3) == (3, 7)
    assert log.end_offset_for_epoch(0) == (0, 0)
    assert log.end_offset_for_epoch(4) == (-1, -1)
    assert (log.dir / "leader-epoch-checkpoint").read_text() == "0\n2\n1 0\n3 4\n"


def test_truncate_to(open_log):
    log = open_log(LogConfig(segment_bytes=500))
    for i in range(20):
        append(log, make_batch(2, value_size=40), leader_epoch=i // 5)
    assert len(log.segments) > 3
    assert log.truncate_to(40) is False
    # 15 falls inside the batch [14, 15]: the whole batch goes.
    assert log.truncate_to(15) is True
    assert log.log_end_offset == 14 and log.high_watermark == 14
    assert all(s.base_offset <= 14 for s in log.segments)
    data = region_bytes(log.read(0, 1 << 20))
    assert [h.last_offset for _, h in iter_batches(data)][-1] == 13
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 10)]
    assert append(log, make_batch(1), leader_epoch=2).first_offset == 14
    assert log.truncate_to(6) is True
    assert log.log_end_offset == 6
    assert log.leader_epoch_cache.entries() == [(0, 0)]
    assert append(log, make_batch(1)).first_offset == 6
