"""Partition (the leader's view of its followers): high watermark, ISR shrink and join
rules, on a real log; no network."""

from __future__ import annotations

from trio_broker.cluster.replication.partition import Partition
from trio_broker.log.config import LogConfig
from trio_broker.log.loader import load_log
from trio_broker.protocol.record_codec import build_batch
from trio_broker.protocol.records import iter_batches


def _append(log, count: int, epoch: int) -> None:
    batch = bytearray(build_batch([(None, b"v", (), 1_700_000_000_000 + i) for i in range(count)]))
    log.append_as_leader(batch, [h for _, h in iter_batches(batch)], leader_epoch=epoch)


def _leader(tmp_path, isr=(1, 2, 3), now=0):
    log = load_log(tmp_path / "t-0", "t", 0, LogConfig())
    part = Partition("t", 0, log, node_id=1)
    part.make_leader(
        leader_epoch=4, isr=list(isr), replicas=[1, 2, 3], zk_version=0, controller_epoch=1,
        now_ms=now,
    )  # fmt: skip
    return part, log


def test_high_watermark_is_the_smallest_log_end_offset_over_the_isr(tmp_path):
    part, log = _leader(tmp_path)
    _append(log, 10, 4)
    assert log.high_watermark == 0  # the followers' ends are unknown yet
    assert not part.update_follower(2, 10, now_ms=1)
    assert part.update_follower(3, 6, now_ms=1)
    assert log.high_watermark == 6
    assert part.update_follower(3, 10, now_ms=2)
    assert log.high_watermark == 10
    assert log.leader_epoch_cache.entries() == [(4, 0)]
    # A follower outside the ISR does not hold the HW back.
    part.isr = [1, 2]
    _append(log, 5, 4)
    part.update_follower(2, 15, now_ms=3)
    assert log.high_watermark == 15


def test_out_of_sync_only_when_behind_for_the_lag_time(tmp_path):
    part, log = _leader(tmp_path, now=1000)
    # Nothing to fetch: a silent follower with everything never falls out.
    assert part.out_of_sync_replicas(now_ms=100_000, lag_ms=500) == [2, 3]  # never fetched
    part.update_follower(2, 0, now_ms=100_000)
    part.update_follower(3, 0, now_ms=100_000)
    assert part.out_of_sync_replicas(now_ms=200_000, lag_ms=500) == []
    part.update_follower(3, 0, now_ms=200_000)  # last caught up now
    _append(log, 3, 4)
    part.update_follower(2, 3, now_ms=200_100)  # caught up at 200_100
    assert part.out_of_sync_replicas(now_ms=200_400, lag_ms=500) == []
    assert part.out_of_sync_replicas(now_ms=200_601, lag_ms=500) == [3]
    # A follower that reached the leader's end of its previous fetch was caught up then.
    _append(log, 2, 4)  # the leader's end: 5
    part.update_follower(3, 3, now_ms=200_700)
    _append(log, 1, 4)  # 6
    part.update_follower(3, 5, now_ms=200_800)
    assert part.remote[3].last_caught_up_ms == 200_700
    part.update_follower(2, 6, now_ms=200_900)  # has everything
    assert part.out_of_sync_replicas(now_ms=201_100, lag_ms=500) == []
    assert part.out_of_sync_replicas(now_ms=201_201, lag_ms=500) == [3]


def test_join_needs_the_high_watermark_and_the_epoch_start(tmp_path):
    part, log = _leader(tmp_path, isr=(1, 2))
    _append(log, 5, 4)
    part.update_follower(2, 5, now_ms=1)
    assert log.high_watermark == 5
    part.update_follower(3, 4, now_ms=1)
    assert not part.caught_up_to_join(3)
    part.update_follower(3, 5, now_ms=2)
    assert part.caught_up_to_join(3)
    assert not part.caught_up_to_join(2)  # already in


def test_while_an_isr_change_is_written_the_hw_waits_for_both_isrs(tmp_path):
    # Kafka's maximal ISR (KIP-497): the znode may name a joining follower before the
    # leader has ZooKeeper's answer, and the controller may elect it; a record it lacks
    # is not committed meanwhile. A shrink being written keeps the old ISR's wait.
    part, log = _leader(tmp_path, isr=(1, 2))
    _append(log, 5, 4)
    part.update_follower(2, 5, now_ms=1)
    part.update_follower(3, 5, now_ms=1)
    assert log.high_watermark == 5 and part.caught_up_to_join(3)
    part.pending_isr = [1, 2, 3]  # the expansion is being written
    assert part.isr_change_in_flight and part.maximal_isr == [1, 2, 3]
    _append(log, 3, 4)
    assert not part.update_follower(2, 8, now_ms=2)
    assert log.high_watermark == 5  # 3 has not got 5-7
    assert part.update_follower(3, 8, now_ms=2)
    assert log.high_watermark == 8
    # Written: the ISR is the new one, nothing pending.
    part.isr, part.pending_isr = [1, 2, 3], None
    assert not part.isr_change_in_flight and part.maximal_isr == [1, 2, 3]
    # A shrink to [1, 2] being written: 3 still counts until it is done.
    part.pending_isr = [1, 2]
    assert part.maximal_isr == [1, 2, 3]
    _append(log, 2, 4)
    part.update_follower(2, 10, now_ms=3)
    assert log.high_watermark == 8
    part.isr, part.pending_isr = [1, 2], None
    assert part.maybe_increment_high_watermark() and log.high_watermark == 10


def test_a_new_epoch_of_the_same_leader_keeps_follower_state_a_new_leadership_does_not(
    tmp_path,
):
    part, log = _leader(tmp_path)
    _append(log, 5, 4)
    part.update_follower(2, 5, now_ms=1)
    part.update_follower(3, 5, now_ms=1)
    generation = part.leader_generation
    part.make_leader(
        leader_epoch=5, isr=[1, 2, 3], replicas=[1, 2, 3], zk_version=1, controller_epoch=1,
        now_ms=2,
    )  # fmt: skip
    assert part.leader_generation == generation
    assert part.remote[2].log_end_offset == 5
    assert log.leader_epoch_cache.entries() == [(4, 0), (5, 5)]
    part.make_follower(
        leader=2, leader_epoch=6, isr=[1, 2, 3], replicas=[1, 2, 3], zk_version=2,
        controller_epoch=1,
    )  # fmt: skip
    assert not part.is_leader
    part.make_leader(
        leader_epoch=7, isr=[1, 2, 3], replicas=[1, 2, 3], zk_version=3, controller_epoch=1,
        now_ms=3,
    )  # fmt: skip
    assert part.leader_generation == generation + 1
    assert part.remote[2].log_end_offset == -1
