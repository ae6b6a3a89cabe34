"""A retried idempotent batch that reaches a new leader (a follower until then) is answered
with its original offsets, as Kafka's ProducerStateManager answers it: a follower keeps the
metadata of each producer's last five batches from what it copies, and after a truncation
it rebuilds them from its log.

Why it matters: librdkafka retries a batch answered with an error that leaves it possibly
appended (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND, a lost connection) with the
same producer id, epoch and sequence, often at the partition's next leader."""

from __future__ import annotations

import os

import pytest
from logtest_helpers import FakeClock, append, make_batch

from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.config import LogConfig
from trio_broker.log.loader import load_log

PID = 9


def _batch(seq: int, pid: int = PID) -> bytes:
    return make_batch(2, producer_id=pid, producer_epoch=0, base_sequence=seq)


def _bytes(log) -> bytes:
    result = log.read(log.log_start_offset, 1 << 30)
    return b"".join(os.pread(r.fd, r.size, r.position) for r in result.regions)


def test_a_follower_made_leader_answers_retries_of_the_last_five_batches(tmp_path):
    leader = load_log(tmp_path / "a" / "t-0", "t", 0, LogConfig(), now_ms=FakeClock())
    follower = load_log(tmp_path / "b" / "t-0", "t", 0, LogConfig(), now_ms=FakeClock())
    offsets = {}  # first sequence -> (first offset, last offset) the old leader answered
    for i in range(7):
        result = append(leader, _batch(2 * i), leader_epoch=0)
        offsets[2 * i] = (result.first_offset, result.last_offset)
        append(leader, _batch(2 * i, pid=PID + 1), leader_epoch=0)  # another producer between
    follower.append_as_follower(bytearray(_bytes(leader)))
    end = follower.log_end_offset

    # Leader now (epoch 1): each of the last five batches is a duplicate, at its offsets.
    for seq in (4, 6, 8, 10, 12):
        again = append(follower, _batch(seq), leader_epoch=1)
        assert again.duplicate, seq
        assert (again.first_offset, again.last_offset) == offsets[seq]
    assert follower.log_end_offset == end
    # Older than five batches: forgotten, and out of sequence (as in Kafka).
    with pytest.raises(KafkaError) as info:
        append(follower, _batch(2), leader_epoch=1)
    assert info.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

    # Truncated below the last batch (it followed another leader in between): the state
    # is rebuilt from the log, the four batches left are still answered, and the cut one
    # is appended anew where the log now ends.
    cut = offsets[12][0]
    follower.truncate_to(cut)
    for seq in (4, 6, 8, 10):
        again = append(follower, _batch(seq), leader_epoch=2)
        assert again.duplicate and (again.first_offset, again.last_offset) == offsets[seq]
    fresh = append(follower, _batch(12), leader_epoch=2)
    assert not fresh.duplicate and fresh.first_offset == cut
