"""SharePartition's state machine on its own (no broker, no clock): acquisition,
acknowledgement, release, lock expiry, delivery limits, the start offset moving, and the
ShareSnapshot and ShareUpdate records that keep it across a restart."""

from __future__ import annotations

import random
import uuid

from trio_broker.cluster.groups.share.share_group import simple_assign
from trio_broker.cluster.groups.share.share_partition import AckType, RecordState, SharePartition
from trio_broker.cluster.groups.share.share_state import (
    SNAPSHOT_TYPE,
    UPDATE_TYPE,
    StateWriter,
    decode_key,
    decode_snapshot,
    difference,
    encode_key,
    encode_snapshot,
    overlay,
    written_batches,
)

S = RecordState
LIMIT = 3


def _partition() -> SharePartition:
    sp = SharePartition("t", 0, 100)
    assert sp.acquire_new("a", 100, 109, deadline=10.0) == (100, 109, 1)
    return sp


def test_accept_moves_the_start_offset_only_past_a_done_prefix():
    sp = _partition()
    assert sp.acknowledge("a", 103, 105, AckType.ACCEPT, LIMIT)
    assert sp.start_offset == 100 and sp.state_of(104) == (S.ACKNOWLEDGED, 1)
    assert sp.acknowledge("a", 100, 102, AckType.ACCEPT, LIMIT)
    assert sp.start_offset == 106  # 100-105 done: the prefix goes
    assert sp.state_of(106) == (S.ACQUIRED, 1)
    assert sp.acknowledge("a", 106, 109, AckType.REJECT, LIMIT)
    assert (sp.start_offset, sp.end_offset, sp.spans) == (110, 110, [])


def test_only_the_holder_acknowledges_and_only_acquired_records():
    sp = _partition()
    assert not sp.acknowledge("b", 100, 100, AckType.ACCEPT, LIMIT)  # not b's
    assert not sp.acknowledge("a", 105, 112, AckType.ACCEPT, LIMIT)  # past the end offset
    assert sp.acknowledge("a", 100, 100, AckType.ACCEPT, LIMIT)
    assert sp.acknowledge("a", 90, 99, AckType.ACCEPT, LIMIT)  # below the start: archived
    assert sp.state_of(101) == (S.ACQUIRED, 1)
    assert sp.acknowledge("a", 102, 102, AckType.ACCEPT, LIMIT)
    assert not sp.acknowledge("a", 102, 102, AckType.REJECT, LIMIT)  # already acknowledged
    assert sp.state_of(102) == (S.ACKNOWLEDGED, 1)


def test_released_records_are_redelivered_until_the_limit_then_archived():
    sp = _partition()
    assert sp.acknowledge("a", 100, 104, AckType.ACCEPT, LIMIT)
    assert sp.acknowledge("a", 105, 106, AckType.RELEASE, LIMIT)
    assert sp.state_of(105) == (S.AVAILABLE, 1)
    # The next acquisition takes the released records first, one delivery more.
    assert sp.acquire_available("b", 10, deadline=20.0) == [(105, 106, 2)]
    assert sp.release_member("b", LIMIT) == 2
    assert sp.acquire_available("b", 1, deadline=30.0) == [(105, 105, 3)]  # max_records 1
    assert sp.acknowledge("b", 105, 105, AckType.RELEASE, LIMIT)
    # Delivered LIMIT times: archived, never again (and the start offset moves past it).
    assert sp.start_offset == 106 and sp.state_of(105)[0] is S.ARCHIVED
    assert sp.acquire_available("c", 10, deadline=40.0) == [(106, 106, 3)]


def test_locks_run_out_at_their_deadline():
    sp = _partition()
    sp.acquire_new("b", 110, 119, deadline=20.0)
    assert sp.next_deadline() == 10.0
    assert sp.expire_locks(9.9, LIMIT) == 0
    assert sp.expire_locks(10.0, LIMIT) == 10
    assert sp.state_of(100) == (S.AVAILABLE, 1) and sp.state_of(110) == (S.ACQUIRED, 1)
    assert sp.next_deadline() == 20.0
    # An acknowledgement after the lock ran out is refused (Kafka's INVALID_RECORD_STATE).
    assert not sp.acknowledge("a", 100, 109, AckType.ACCEPT, LIMIT)


def test_per_offset_acknowledgements_split_the_spans():
    sp = _partition()
    for offset in range(100, 110):
        kind = AckType.RELEASE if offset % 2 else AckType.ACCEPT
        assert sp.acknowledge("a", offset, offset, kind, LIMIT)
    assert sp.start_offset == 101
    assert [r[:2] for r in sp.acquire_available("b", 100, deadline=5.0)] == [
        (101, 101),
        (103, 103),
        (105, 105),
        (107, 107),
        (109, 109),
    ]


def test_snapshot_round_trip_keeps_states_and_gives_back_acquired():
    sp = _partition()
    sp.acknowledge("a", 100, 101, AckType.ACCEPT, LIMIT)
    sp.acknowledge("a", 103, 104, AckType.REJECT, LIMIT)
    sp.acknowledge("a", 105, 105, AckType.RELEASE, LIMIT)
    value = encode_snapshot(sp, snapshot_epoch=7)
    again = decode_snapshot(value, "t", 0)
    assert (again.start_offset, again.end_offset) == (102, 110)
    assert again.state_of(102) == (S.AVAILABLE, 1)  # acquired when written: back
    assert again.state_of(103) == (S.ARCHIVED, 1)
    assert again.state_of(105) == (S.AVAILABLE, 1)
    assert again.state_of(106) == (S.AVAILABLE, 1)
    topic_id = uuid.uuid4()
    key = encode_key("g", topic_id, 3)
    # int16 type 0, int16 length + "g", 16 bytes of topic id, int32 partition
    assert key == b"\x00\x00\x00\x01g" + topic_id.bytes + b"\x00\x00\x00\x03"
    assert decode_key(key) == (0, "g", topic_id, 3)
    # int16 version 0, int32 snapshot epoch 7, then the state epoch, leader epoch, start,
    # creation and write times (Kafka 4.1's ShareSnapshotValue).
    assert value[:6] == b"\x00\x00\x00\x00\x00\x07"
    # The early-access layout (uint16 snapshot epoch, no times) is still read.
    early = b"\x00\x00\x00\x07" + value[6:22] + value[38:]
    old = decode_snapshot(early, "t", 0)
    assert [(x.first, x.last, x.state, x.delivery_count) for x in old.spans] == [
        (x.first, x.last, x.state, x.delivery_count) for x in again.spans
    ]


def test_an_update_laid_over_its_snapshot_gives_the_state_written():
    # Random acquisitions and acknowledgements; after each, the difference from the last
    # snapshot, laid over it, is exactly the state a snapshot would hold.
    for seed in range(20):
        rng = random.Random(seed)
        sp = SharePartition("t", 0, 0)
        base = written_batches(sp)
        for step in range(60):
            if rng.random() < 0.4:
                first = sp.end_offset
                sp.acquire_new("a", first, first + rng.randrange(1, 6), deadline=1.0)
            elif rng.random() < 0.2:
                sp.acquire_available("a", rng.randrange(1, 5), deadline=1.0)
            elif sp.end_offset > sp.start_offset:
                lo = rng.randrange(sp.start_offset, sp.end_offset)
                hi = min(sp.end_offset - 1, lo + rng.randrange(0, 4))
                sp.acknowledge("a", lo, hi, AckType(rng.choice([1, 2, 3])), LIMIT)
            new = written_batches(sp)
            diff = difference(base, sp.start_offset, sp.end_offset, new)
            assert diff is not None, (seed, step)
            assert len(diff) <= len(new)
            laid = overlay(base, sp.start_offset, diff)
            assert _offsets(laid) == _offsets(new), (seed, step)
            if step % 17 == 0:
                base = new  # a new snapshot


def _offsets(batches):
    return {o: (state, count) for f, last, state, count in batches for o in range(f, last + 1)}


def test_the_writer_snapshots_then_updates_then_snapshots_again():
    per_snapshot = [2]
    writer = StateWriter(lambda: per_snapshot[0])
    sp = _partition()
    kinds = []
    for i in range(6):
        sp.acknowledge("a", 100 + i, 100 + i, AckType.ACCEPT, LIMIT)
        kind, value = writer.record("k", sp)
        kinds.append(kind)
    S_, U_ = SNAPSHOT_TYPE, UPDATE_TYPE
    assert kinds == [S_, U_, U_, S_, U_, U_]
    # An update names its snapshot's epoch (the second snapshot is epoch 1).
    assert value[2:6] == b"\x00\x00\x00\x01"
    per_snapshot[0] = 0  # every write a snapshot
    assert writer.record("k", sp)[0] == S_


def test_simple_assignor_spreads_then_shares_partitions():
    two = simple_assign({"m1": {"t"}, "m2": {"t"}}, {"t": 4})
    assert sorted(p for m in two.values() for p in m["t"]) == [0, 1, 2, 3]
    assert all(len(m["t"]) == 2 for m in two.values())
    six = simple_assign({f"m{i}": {"t"} for i in range(6)}, {"t": 4})
    assert all(len(m["t"]) == 1 for m in six.values())  # every member gets one
    assert {p for m in six.values() for p in m["t"]} == {0, 1, 2, 3}
    assert simple_assign({"m1": {"other"}}, {"t": 4}) == {"m1": {}}
