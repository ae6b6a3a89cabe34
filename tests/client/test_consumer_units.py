"""Consumer parts without a broker: record decoding (read_committed, CRC, cut batches),
the assignors, and the consumer protocol's embedded messages."""

from __future__ import annotations

import functools
import struct

import pytest

from trio_broker.client.assignors import (
    MemberSubscription,
    assign_cooperative_sticky,
    assign_range,
)
from trio_broker.client.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from trio_broker.client.fetcher import FetchSession, decode_records, scan_next_offset
from trio_broker.client.subscription import PartitionState, TopicPartition
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol.record_codec import build_batch
from trio_broker.protocol.records import Compression

TP = TopicPartition("t", 0)


def _batch(base: int, values: list[bytes], pid: int = -1, txn: bool = False,
           codec: Compression = Compression.NONE) -> bytes:  # fmt: skip
    return build_batch(
        [(None, v, (), 1000 + i) for i, v in enumerate(values)],
        base_offset=base, compression=codec, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
        base_sequence=0 if pid >= 0 else -1, is_transactional=txn,
    )  # fmt: skip


def _marker(offset: int, pid: int, commit: bool) -> bytes:
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, 0)
    return build_batch([(key, value, (), 2000)], base_offset=offset, producer_id=pid,
                       producer_epoch=0, is_transactional=True, is_control=True)  # fmt: skip


def _log() -> bytes:
    # 0-1 plain; 2-3 txn of producer 7 (aborted at 4); 5-6 txn of producer 8 (committed at 7);
    # 8 plain, gzip.
    return b"".join([
        _batch(0, [b"a", b"b"]),
        _batch(2, [b"x1", b"x2"], pid=7, txn=True),
        _marker(4, 7, commit=False),
        _batch(5, [b"c1", b"c2"], pid=8, txn=True),
        _marker(7, 8, commit=True),
        _batch(8, [b"z"], codec=Compression.GZIP),
    ])  # fmt: skip


def test_read_uncommitted_gives_every_data_record_and_no_markers():
    records, next_offset, _ = decode_records(TP, _log(), 0)
    assert [(r.offset, r.value) for r in records] == [
        (0, b"a"), (1, b"b"), (2, b"x1"), (3, b"x2"), (5, b"c1"), (6, b"c2"), (8, b"z"),
    ]  # fmt: skip
    assert next_offset == 9


def test_read_committed_skips_aborted_transactions():
    records, next_offset, _ = decode_records(TP, _log(), 0, read_committed=True, aborted=[(7, 2)])
    assert [r.value for r in records] == [b"a", b"b", b"c1", b"c2", b"z"]
    assert next_offset == 9
    # From the middle: records before the fetch offset are not handed out again.
    records, _, _ = decode_records(TP, _log(), 6, read_committed=True, aborted=[(7, 2)])
    assert [(r.offset, r.value) for r in records] == [(6, b"c2"), (8, b"z")]


def test_a_cut_batch_is_left_for_the_next_fetch_and_a_bad_crc_raises():
    data = _log()
    cut = data[:-5]
    records, next_offset, used = decode_records(TP, cut, 0)
    assert next_offset == 8 and records[-1].offset == 6 and used < len(cut)
    broken = bytearray(data)
    broken[-1] ^= 0xFF
    with pytest.raises(KafkaError, match="CORRUPT_MESSAGE.*CRC"):
        decode_records(TP, bytes(broken), 0)
    # A length that would not move the reader forward is refused, not looped on.
    struck = bytearray(data)
    struck[8:12] = (-12).to_bytes(4, "big", signed=True)
    with pytest.raises(KafkaError, match="CORRUPT_MESSAGE.*claims -12 bytes"):
        decode_records(TP, bytes(struck), 0)


def _pending(state: PartitionState, data: bytes, fetch_offset: int, **kw) -> None:
    # As the fetcher hands a response over: the next offset from batch headers, the
    # decoding left for when the user reaches the records.
    next_offset = scan_next_offset(TP, data, fetch_offset)
    decode = functools.partial(decode_records, TP, data, fetch_offset, **kw)
    state.pending.append((decode, next_offset, len(data)))
    state.pending_bytes += len(data)
    state.buffered_bytes += len(data)
    state.fetch_offset = next_offset


def test_fetched_data_is_decoded_when_reached_and_control_batches_move_the_position():
    state = PartitionState()
    state.seek(0)
    first = _batch(0, [b"a", b"b"])
    markers_only = _marker(2, 7, commit=False)
    rest = _batch(3, [b"q"])
    _pending(state, first, 0)
    _pending(state, markers_only, 2)
    _pending(state, rest, 3)
    assert state.fetch_offset == 4 and not state.records  # nothing decoded yet
    assert state.fill() and [r.value for r in state.records] == [b"a", b"b"]
    assert state.decoded_next == 2 and len(state.pending) == 2
    state.records.clear()
    # The marker-only chunk has no records: the position moves past it, the next decodes.
    assert state.fill() and [r.offset for r in state.records] == [3]
    assert state.position == 3 and state.decoded_next == 4 and state.pending_bytes == 0
    # A corrupt chunk raises every time it is reached, and stays (no silent skip).
    state.records.clear()
    broken = bytearray(_batch(4, [b"x"]))
    broken[-1] ^= 0xFF
    _pending(state, bytes(broken), 4)
    for _ in range(2):
        with pytest.raises(KafkaError, match="CRC"):
            state.fill()
    assert len(state.pending) == 1
    state.seek(4)
    assert not state.pending and state.pending_bytes == 0 and state.buffered_bytes == 0


def test_fetch_session_sends_only_what_changed():
    session = FetchSession()
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    to_send, forget, full = session.build({a: (0, 100), b: (0, 100)})
    assert full and set(to_send) == {a, b} and forget == []
    session.session_id, session.epoch, session.sent = 5, 1, dict(to_send)
    to_send, forget, full = session.build({a: (10, 100), b: (0, 100)})
    assert not full and to_send == {a: (10, 100)} and forget == []
    to_send, forget, full = session.build({a: (0, 100)})
    assert to_send == {} and forget == [b]


def _members(*specs) -> dict[str, MemberSubscription]:  # noqa: ANN002
    return {
        m: MemberSubscription(member_id=m, topics=("t",), owned=tuple(owned)) for m, owned in specs
    }


def test_range_gives_consecutive_ranges_the_first_members_one_more():
    result = assign_range(_members(("m1", ()), ("m2", ()), ("m3", ()), ("m4", ())), {"t": 6})
    assert result == {
        "m1": [("t", 0), ("t", 1)], "m2": [("t", 2), ("t", 3)], "m3": [("t", 4)], "m4": [("t", 5)],
    }  # fmt: skip


def test_cooperative_sticky_keeps_owners_and_never_double_assigns():
    everything = [("t", p) for p in range(6)]
    alone = assign_cooperative_sticky(_members(("a", ())), {"t": 6})
    assert alone == {"a": everything}
    # b joins: a keeps three of its six; the other three wait a round (a must revoke first).
    first = assign_cooperative_sticky(_members(("a", everything), ("b", ())), {"t": 6})
    assert len(first["a"]) == 3 and first["b"] == []
    second = assign_cooperative_sticky(_members(("a", first["a"]), ("b", ())), {"t": 6})
    assert second["a"] == first["a"]
    assert sorted(second["a"] + second["b"]) == everything
    # Three members, one leaving: the survivors keep theirs and split the orphans.
    start = {"a": everything[:2], "b": everything[2:4], "c": everything[4:]}
    after = assign_cooperative_sticky(_members(("a", start["a"]), ("b", start["b"])), {"t": 6})
    assert set(start["a"]) <= set(after["a"]) and set(start["b"]) <= set(after["b"])
    assert sorted(after["a"] + after["b"]) == everything


def test_consumer_protocol_messages_round_trip():
    owned = [TopicPartition("t", 1), TopicPartition("u", 0)]
    member = decode_subscription("m", encode_subscription(["u", "t"], owned), "i")
    assert member.topics == ("t", "u") and set(member.owned) == set(owned)
    assert member.group_instance_id == "i"
    assignment = encode_assignment([("t", 2), ("t", 0), ("u", 1)])
    assert decode_assignment(assignment) == {("t", 0), ("t", 2), ("u", 1)}
    assert decode_assignment(b"") == set()


@pytest.mark.parametrize("cut", [1, 5, 9, -1])
def test_unreadable_group_protocol_bytes_are_a_kafka_error(cut):
    # A member's subscription (read by the group leader) or the leader's assignment (read
    # by every member) that does not decode ends the membership with an error the
    # application sees, as Java's consumer does; it raised DecodeError out of the
    # consumer's task, ending the consumer.
    subscription = encode_subscription(["topic"], [TopicPartition("topic", 0)])[:cut]
    with pytest.raises(KafkaError) as info:
        decode_subscription("m-1", subscription, None)
    assert info.value.code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL and "m-1" in str(info.value)
    assignment = encode_assignment([("topic", 0), ("topic", 1)])[:cut]
    with pytest.raises(KafkaError) as info:
        decode_assignment(assignment)
    assert info.value.code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_the_fast_reader_agrees_with_the_record_codec():
    from trio_broker.protocol.record_codec import iter_records

    records = [
        (
            None if i % 5 == 0 else b"k" * (i * 37 % 300),
            None if i % 7 == 0 else bytes([i % 256]) * (i * 911 % 20_000),
            tuple((f"h{j}", None if j == 2 else b"v" * j * 70) for j in range(i % 4)),
            1_700_000_000_000 + (i * 104_729 % 10_000_000) - 5_000_000,  # deltas of both signs
        )
        for i in range(300)
    ]
    for codec in (Compression.NONE, Compression.LZ4):
        batch = build_batch(records, base_offset=1000, compression=codec)
        expected = [
            (1000 + i, r.timestamp, r.key, r.value, r.headers)
            for i, r in enumerate(iter_records(batch))
        ]
        got, next_offset, used = decode_records(TP, batch, 1000)
        assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == expected
        assert next_offset == 1300 and used == len(batch)
        tail, _, _ = decode_records(TP, batch, 1290)
        assert [r.offset for r in tail] == list(range(1290, 1300))


def test_consumer_config_takes_both_spellings_and_refuses_typos():
    from trio_broker.client import Consumer

    c = Consumer(
        "h:1",
        group_id="g",
        max_poll_records=7,
        config={"auto.offset.reset": "earliest", "enable.auto.commit": "false",
                "isolation.level": "read_committed", "partition.assignment.strategy": "cooperative-sticky"},
    )  # fmt: skip
    cfg = c.config
    assert (cfg.auto_offset_reset, cfg.enable_auto_commit, cfg.isolation_level) == (
        "earliest",
        False,
        1,
    )
    assert cfg.partition_assignment_strategy == ("cooperative-sticky",)
    assert cfg.max_poll_records == 7 and cfg.group_id == "g"
    assert c.group is not None and c.group.cooperative
    with pytest.raises(ValueError, match="auto.offset.rest"):
        Consumer("h:1", config={"auto.offset.rest": "earliest"})
    with pytest.raises(ValueError, match="isolation_level"):
        Consumer("h:1", isolation_level="read_most")
    with pytest.raises(ValueError, match="subscribe\\(\\) needs a group_id"):
        Consumer("h:1").subscribe(["t"])
