from __future__ import annotations

import logging
import os
import struct

from logtest_helpers import append, make_batch

from trio_broker.log.config import LogConfig
from trio_broker.protocol.records import iter_batches


def region_bytes(result) -> bytes:
    return b"".join(os.pread(r.fd, r.size, r.position) for r in result.regions)


def fill(log, n: int) -> list[int]:
    sizes = []
    for i in range(n):
        batch = make_batch(2, value_size=60, tag=b"%d" % i, timestamp=1000 + i)
        sizes.append(len(batch))
        append(log, batch)
    return sizes


def crash(log) -> None:
    """Stop without a clean close: files stay as written, indexes untrimmed."""
    log.close_handlers()


def test_clean_reopen_trusts_files(open_log):
    config = LogConfig(segment_bytes=1000, index_interval_bytes=200)
    log = open_log(config)
    fill(log, 30)
    before = region_bytes(log.read(0, 1 << 20))
    index = log.segments[0].offset_index.path.read_bytes()
    log.close()
    # A clean close trims the active segment's indexes too.
    active_index = log.active_segment.offset_index.path
    assert os.path.getsize(active_index) % 8 == 0
    assert os.path.getsize(active_index) < config.segment_index_bytes

    log = open_log(config, clean_shutdown=True, high_watermark=60)
    assert log.log_end_offset == 60 and log.high_watermark == 60
    assert log.segments[0].offset_index.path.read_bytes() == index
    assert region_bytes(log.read(0, 1 << 20)) == before
    assert append(log, make_batch(1)).first_offset == 60


def test_torn_tail_is_truncated_and_indexes_rebuilt(open_log, caplog):
    config = LogConfig(segment_bytes=1500, index_interval_bytes=200)
    log = open_log(config)
    sizes = fill(log, 40)
    assert len(log.segments) > 2
    active = log.active_segment
    index_path = active.offset_index.path
    expected_index = index_path.read_bytes()[: active.offset_index.entries * 8]
    expected_end = log.log_end_offset
    data_before = region_bytes(log.read(0, 1 << 20))
    crash(log)

    # Cut the last batch in half.
    path = active.log_path
    size = os.path.getsize(path)
    os.truncate(path, size - sizes[-1] // 2)
    # And damage the index file, which recovery must rebuild.
    with open(index_path, "r+b") as f:
        f.write(b"\xff" * 16)

    with caplog.at_level(logging.WARNING, logger="trio_broker.log"):
        log = open_log(config, clean_shutdown=False, recovery_point=0, high_watermark=expected_end)
    assert log.log_end_offset == expected_end - 2
    assert os.path.getsize(path) == size - sizes[-1]
    assert log.high_watermark == expected_end - 2
    assert any("truncated" in r.getMessage() for r in caplog.records)
    # Every earlier batch is intact, byte for byte.
    assert region_bytes(log.read(0, 1 << 20)) == data_before[: len(data_before) - sizes[-1]]
    # The rebuilt index has the entries the appends had made (the torn batch had none).
    rebuilt = log.active_segment.offset_index
    assert index_path.read_bytes()[: rebuilt.entries * 8] == expected_index[: rebuilt.entries * 8]
    assert rebuilt.entries >= len(expected_index) // 8 - 1
    # Appends continue right after the last good batch.
    assert append(log, make_batch(1)).first_offset == expected_end - 2


def test_garbage_tail_is_truncated(open_log, caplog):
    config = LogConfig(index_interval_bytes=100)
    log = open_log(config)
    fill(log, 10)
    good = region_bytes(log.read(0, 1 << 20))
    crash(log)
    path = log.active_segment.log_path
    with open(path, "ab") as f:
        # A plausible header (length 200) whose CRC is wrong, then random bytes.
        f.write(struct.pack(">qi", 20, 200) + os.urandom(200))
    with caplog.at_level(logging.WARNING, logger="trio_broker.log"):
        log = open_log(config, clean_shutdown=False, recovery_point=0)
    assert path.read_bytes() == good
    assert log.log_end_offset == 20
    assert [h.base_offset for _, h in iter_batches(good)] == list(range(0, 20, 2))
    assert any("truncated 212" in r.getMessage() for r in caplog.records)


def test_corruption_in_middle_segment_drops_later_segments(open_log):
    config = LogConfig(segment_bytes=1000)
    log = open_log(config)
    fill(log, 30)
    assert len(log.segments) >= 3
    second = log.segments[1]
    crash(log)
    # Flip a byte inside the second segment's first batch body: its CRC fails.
    with open(second.log_path, "r+b") as f:
        f.seek(70)
        byte = f.read(1)
        f.seek(70)
        f.write(bytes([byte[0] ^ 0xFF]))
    log = open_log(config, clean_shutdown=False, recovery_point=0)
    assert [s.base_offset for s in log.segments] == [0, second.base_offset]
    assert log.log_end_offset == second.base_offset
    assert log.active_segment.size == 0


def test_recovery_starts_at_recovery_point(open_log, caplog):
    config = LogConfig(segment_bytes=1000)
    log = open_log(config)
    fill(log, 30)
    rp_segment = log.segments[-2]
    crash(log)
    with caplog.at_level(logging.DEBUG, logger="trio_broker.log"):
        log = open_log(config, clean_shutdown=False, recovery_point=rp_segment.base_offset + 1)
    checked = [r.getMessage() for r in caplog.records if "rebuilt its indexes" in r.getMessage()]
    assert len(checked) == 2  # the recovery point's segment and the active one
    assert log.log_end_offset == 60
