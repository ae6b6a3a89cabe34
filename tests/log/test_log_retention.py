from __future__ import annotations

import os

import pytest
from logtest_helpers import append, make_batch

from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.config import LogConfig

HOUR = 3_600_000


def fill_segments(log, clock, n_segments: int, per_segment: int = 3) -> None:
    """n_segments full segments (segment_bytes fits `per_segment` batches), one hour apart."""
    for _ in range(n_segments):
        for _ in range(per_segment):
            append(log, make_batch(2, value_size=100, timestamp=clock()))
        clock.advance(HOUR)


def test_retention_by_time_deletes_whole_old_segments(open_log, clock):
    batch_size = len(make_batch(2, value_size=100))
    config = LogConfig(segment_bytes=3 * batch_size, retention_ms=int(2.5 * HOUR))
    log = open_log(config)
    fill_segments(log, clock, 5)
    assert len(log.segments) == 5
    bases = [s.base_offset for s in log.segments]
    # Hold a file region of the oldest segment across its deletion.
    region = log.read(0, 1 << 20).regions[0]
    expected = os.pread(region.fd, region.size, region.position)

    deleted = log.delete_old_segments(clock())
    # Segments with max timestamp older than 2.5 h: the first three (5 h, 4 h, 3 h old).
    assert deleted == 3
    assert [s.base_offset for s in log.segments] == bases[3:]
    assert log.log_start_offset == bases[3]
    names = sorted(p.name for p in log.dir.iterdir())
    assert "00000000000000000000.log.deleted" in names
    assert "00000000000000000000.index.deleted" in names
    assert "00000000000000000000.log" not in names
    # The in-flight region still reads the exact bytes.
    assert os.pread(region.fd, region.size, region.position) == expected
    with pytest.raises(KafkaError) as info:
        log.read(0, 100)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE

    # file.delete.delay.ms later the files are gone.
    assert log.delete_expired_files(clock() + config.file_delete_delay_ms - 1) == 0
    assert log.delete_expired_files(clock() + config.file_delete_delay_ms) == 3
    assert not [p for p in log.dir.iterdir() if p.name.endswith(".deleted")]


def test_retention_rolls_when_everything_expired(open_log, clock):
    log = open_log(LogConfig(retention_ms=HOUR))
    append(log, make_batch(3, timestamp=clock()))
    clock.advance(2 * HOUR)
    assert log.delete_old_segments(clock()) == 1
    assert [s.base_offset for s in log.segments] == [3]
    assert log.log_start_offset == log.log_end_offset == 3
    assert log.active_segment.size == 0
    assert log.delete_old_segments(clock()) == 0


def test_retention_stops_at_high_watermark(open_log, clock):
    batch_size = len(make_batch(2, value_size=100))
    log = open_log(LogConfig(segment_bytes=3 * batch_size, retention_ms=HOUR))
    fill_segments(log, clock, 3)
    log.high_watermark = log.segments[1].base_offset  # as if not yet replicated
    clock.advance(10 * HOUR)
    assert log.delete_old_segments(clock()) == 1
    assert log.log_start_offset == log.segments[0].base_offset == 6


def test_retention_by_bytes(open_log, clock):
    batch_size = len(make_batch(2, value_size=100))
    segment_bytes = 3 * batch_size
    config = LogConfig(
        segment_bytes=segment_bytes, retention_bytes=2 * segment_bytes + 10, retention_ms=-1
    )
    log = open_log(config)
    fill_segments(log, clock, 5)
    append(log, make_batch(2, value_size=100, timestamp=clock()))  # active segment: 1 batch
    assert len(log.segments) == 6
    # 16 batches over a limit of 6 batches + 10 bytes: Kafka deletes a segment only while
    # what remains stays at or above retention.bytes, so 3 segments go and 7 batches stay.
    assert log.delete_old_segments(clock()) == 3
    assert log.size_in_bytes == 7 * batch_size
    assert [s.base_offset for s in log.segments] == [18, 24, 30]
    assert log.delete_old_segments(clock()) == 0


def test_delete_records_before(open_log, clock):
    batch_size = len(make_batch(2, value_size=100))
    log = open_log(LogConfig(segment_bytes=3 * batch_size))
    fill_segments(log, clock, 4)
    assert log.log_end_offset == 24
    assert log.delete_records_before(7) == 7
    # Only the first segment [0, 6) lies wholly below 7.
    assert [s.base_offset for s in log.segments] == [6, 12, 18]
    assert log.log_start_offset == 7
    with pytest.raises(KafkaError) as info:
        log.read(6, 100)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    # Reading at the new start returns the batch holding offset 7 ([6, 7]).
    assert log.read(7, 1).first_offset == 6
    # Lower than the current start: no-op. Beyond the high watermark: refused.
    assert log.delete_records_before(3) == 7
    log.high_watermark = 20
    with pytest.raises(KafkaError) as info:
        log.delete_records_before(21)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.delete_records_before(-1) == 20
    assert [s.base_offset for s in log.segments] == [18]
