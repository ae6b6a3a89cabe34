"""PartitionLog.append_as_follower: a follower stores the leader's batches unchanged."""

from __future__ import annotations

import os

import pytest
from logtest_helpers import FakeClock, append, make_batch

from trio_broker.errors import ErrorCode
from trio_broker.log.config import LogConfig
from trio_broker.log.control_batch import ControlType, build_marker_batch
from trio_broker.log.loader import load_log
from trio_broker.protocol.records import InvalidRecords, iter_batches, read_header


def _log(tmp_path, name: str, config: LogConfig | None = None):
    return load_log(tmp_path / name / "t-0", "t", 0, config or LogConfig(), now_ms=FakeClock())


def _bytes(log) -> bytes:
    result = log.read(log.log_start_offset, 1 << 30)
    return b"".join(os.pread(r.fd, r.size, r.position) for r in result.regions)


def test_follower_copy_is_byte_for_byte_with_epochs_indexes_and_producer_state(tmp_path):
    leader = _log(tmp_path, "leader", LogConfig(segment_bytes=2000, index_interval_bytes=100))
    follower = _log(tmp_path, "follower", LogConfig(segment_bytes=2000, index_interval_bytes=100))
    append(leader, make_batch(3, value_size=200), leader_epoch=0)
    append(leader, make_batch(4, value_size=200, producer_id=7, producer_epoch=0, base_sequence=0),
           leader_epoch=1)  # fmt: skip
    append(leader, make_batch(5, value_size=300, tag=b"w"), leader_epoch=3)
    data = _bytes(leader)

    # Fetched in two pieces, as a follower does; the second ends with half a batch.
    first_end = next(pos + h.size for pos, h in iter_batches(data))
    r1 = follower.append_as_follower(bytearray(data[:first_end]))
    assert (r1.first_offset, r1.last_offset, r1.record_count) == (0, 2, 3)
    r2 = follower.append_as_follower(bytearray(data[first_end:-10]))
    assert (r2.first_offset, r2.last_offset) == (3, 6)  # the cut batch waits
    r3 = follower.append_as_follower(bytearray(data))  # a repeat: old batches skipped
    assert (r3.first_offset, r3.last_offset) == (7, 11)

    assert follower.log_end_offset == leader.log_end_offset == 12
    assert _bytes(follower) == data
    assert [s.base_offset for s in follower.segments] == [s.base_offset for s in leader.segments]
    assert follower.leader_epoch_cache.entries() == [(0, 0), (1, 3), (3, 7)]
    assert follower.leader_epoch_cache.entries() == leader.leader_epoch_cache.entries()
    assert follower.producer_state.last_entry(7).last_seq == 3
    # The indexes work: a read from the middle starts at the right batch.
    middle = follower.read(8, 1 << 20)
    assert (
        read_header(os.pread(middle.regions[0].fd, 61, middle.regions[0].position)).base_offset == 7
    )
    assert follower.offset_for_timestamp(0) == leader.offset_for_timestamp(0)


def test_follower_keeps_transaction_markers_and_aborted_index(tmp_path):
    leader = _log(tmp_path, "leader")
    follower = _log(tmp_path, "follower")
    txn = dict(producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True)
    append(leader, make_batch(2, **txn), leader_epoch=0)
    assert leader.producer_state.ongoing == {9: 0}
    marker = build_marker_batch(
        producer_id=9, producer_epoch=0, coordinator_epoch=1, control=ControlType.ABORT,
        timestamp_ms=1_700_000_000_000,
    )  # fmt: skip
    append(leader, marker, leader_epoch=0, from_coordinator=True)
    follower.append_as_follower(bytearray(_bytes(leader)))
    assert follower.producer_state.ongoing == {}
    aborted = follower.collect_aborted_transactions(0, 3)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in aborted] == [(9, 0, 2)]


def test_follower_refuses_a_damaged_batch_and_one_across_its_end(tmp_path):
    leader = _log(tmp_path, "leader")
    follower = _log(tmp_path, "follower")
    append(leader, make_batch(3), make_batch(2), leader_epoch=0)
    data = bytearray(_bytes(leader))
    damaged = bytearray(data)
    damaged[-1] ^= 0xFF
    with pytest.raises(InvalidRecords) as info:
        follower.append_as_follower(damaged)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    assert follower.log_end_offset == 0  # nothing of it was written
    assert follower.append_as_follower(bytearray()).last_offset == -1
    # A batch that straddles the follower's log end (logs that diverged) is refused.
    follower.append_as_follower(bytearray(data[: read_header(data).size]))
    assert follower.log_end_offset == 3
    other = _log(tmp_path, "other")
    append(other, make_batch(5), leader_epoch=0)
    with pytest.raises(InvalidRecords):
        follower.append_as_follower(bytearray(_bytes(other)))
    assert follower.log_end_offset == 3
