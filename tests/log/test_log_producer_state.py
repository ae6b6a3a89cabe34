from __future__ import annotations

import struct

import crc32c
import pytest
from logtest_helpers import append, make_batch

from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.config import LogConfig

PID = 4242


def pbatch(seq: int, count: int = 2, epoch: int = 0, pid: int = PID) -> bytes:
    return make_batch(count, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_duplicate_returns_original_offsets(open_log):
    log = open_log()
    append(log, make_batch(3))
    first = append(log, pbatch(0))
    second = append(log, pbatch(2))
    assert (first.first_offset, first.last_offset) == (3, 4)
    assert (second.first_offset, second.last_offset) == (5, 6)
    end = log.log_end_offset
    # A retry of either of the last five batches is answered, not appended.
    again = append(log, pbatch(0))
    assert again.duplicate and (again.first_offset, again.last_offset) == (3, 4)
    again = append(log, pbatch(2))
    assert again.duplicate and (again.first_offset, again.last_offset) == (5, 6)
    assert log.log_end_offset == end


def test_sequence_gap_and_stale_epoch_are_refused(open_log):
    log = open_log()
    append(log, pbatch(0, epoch=1))
    with pytest.raises(KafkaError) as info:
        append(log, pbatch(5, epoch=1))
    assert info.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    with pytest.raises(KafkaError) as info:
        append(log, pbatch(2, epoch=0))
    assert info.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    # A new epoch must start at sequence 0.
    with pytest.raises(KafkaError) as info:
        append(log, pbatch(2, epoch=2))
    assert info.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(log, pbatch(0, epoch=2)).first_offset == 2
    # Nothing refused was written.
    assert log.log_end_offset == 4
    # An unknown producer may start anywhere (its state may have expired).
    assert append(log, pbatch(17, pid=7)).first_offset == 4


def test_only_last_five_batches_are_deduplicated(open_log):
    log = open_log()
    for i in range(7):
        append(log, pbatch(2 * i))
    assert append(log, pbatch(4)).duplicate  # batch 2 of 7: among the last five
    with pytest.raises(KafkaError) as info:
        append(log, pbatch(2))  # batch 1: forgotten, and out of sequence
    assert info.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_state_survives_clean_restart_via_snapshot(open_log):
    log = open_log()
    append(log, pbatch(0))
    append(log, pbatch(2))
    log.close()
    snapshot = log.dir / "00000000000000000004.snapshot"
    data = snapshot.read_bytes()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 1)
    assert crc == crc32c.crc32c(data[6:])
    assert struct.unpack_from(">qhiqiqiq", data, 10)[:5] == (PID, 0, 3, 3, 1)

    log = open_log()
    again = append(log, pbatch(2))
    assert again.duplicate and (again.first_offset, again.last_offset) == (2, 3)
    with pytest.raises(KafkaError) as info:
        append(log, pbatch(7))
    assert info.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(log, pbatch(4)).first_offset == 4


def test_state_rebuilt_from_log_after_crash(open_log):
    config = LogConfig(segment_bytes=400)
    log = open_log(config)
    for i in range(10):
        append(log, pbatch(2 * i))
    assert len(log.segments) > 2
    log.close_handlers()  # crash: no snapshot at the end
    log = open_log(config, clean_shutdown=False)
    assert append(log, pbatch(18)).duplicate
    assert append(log, pbatch(20)).first_offset == 20
