"""Produce and Fetch on the wire: error codes for bad input, idempotent retries, waits."""

import socket
import threading
import time

import pytest
from wire import encode_request, read_response, request_of, roundtrip, session_fetch_request
from wire import session_fetch as wire_session_fetch

from trio_broker.protocol._generated.fetch_request import FetchPartition, FetchRequest, FetchTopic
from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_broker.protocol.record_codec import build_batch as make_batch
from trio_broker.protocol.record_codec import iter_records

PRODUCE_V = 9
FETCH_V = 12


def connect(broker):
    return socket.create_connection((broker.host, broker.port), timeout=20)


def create_topic(sock, name, partitions=1):
    # Metadata with auto-creation, as a producer would: the answer that creates the topic
    # is LEADER_NOT_AVAILABLE without partitions, as Kafka's; the next one lists them.
    codes = []
    while not codes or (codes[-1] == 5 and len(codes) < 2):
        meta = roundtrip(
            sock, request_of(3, topics=[_meta_topic(name)], allow_auto_topic_creation=True), 9
        )
        codes.append(meta.topics[0].error_code)
    assert codes in ([0], [5, 0]), meta.topics[0]


def _meta_topic(name):
    from trio_broker.protocol._generated.metadata_request import MetadataRequestTopic

    return MetadataRequestTopic(name=name)


def produce(sock, topic, batch, *, acks=1, partition=0, version=PRODUCE_V, cid=1):
    request = ProduceRequest(
        acks=acks,
        timeout_ms=5000,
        topic_data=[
            TopicProduceData(
                name=topic, partition_data=[PartitionProduceData(index=partition, records=batch)]
            )
        ],
    )
    response = roundtrip(sock, request, version, cid)
    return response.responses[0].partition_responses[0]


def fetch(sock, topic, offset, *, max_wait_ms=0, min_bytes=0, cid=2):
    request = FetchRequest(
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=50 * 1024 * 1024,
        session_epoch=-1,
        topics=[
            FetchTopic(
                topic=topic,
                partitions=[
                    FetchPartition(
                        partition=0, fetch_offset=offset, partition_max_bytes=10 * 1024 * 1024
                    )
                ],
            )
        ],
    )
    response = roundtrip(sock, request, FETCH_V, cid)
    return response.responses[0].partitions[0]


def batch(values, **kw):
    return make_batch([(None, v, (), 1_700_000_000_000 + i) for i, v in enumerate(values)], **kw)


def log_files(broker, topic):
    d = broker.log_dir / f"{topic}-0"
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.suffix == ".log"}


def test_produce_then_fetch_returns_the_same_bytes_with_offsets(kafka_broker):
    sock = connect(kafka_broker)
    create_topic(sock, "raw")
    first = produce(sock, "raw", batch([b"a", b"b", b"c"]))
    second = produce(sock, "raw", batch([b"d"]))
    assert (first.error_code, first.base_offset) == (0, 0)
    assert (second.error_code, second.base_offset) == (0, 3)
    data = fetch(sock, "raw", 0)
    assert data.error_code == 0 and data.high_watermark == 4
    assert [
        (r.offset, r.value) for r in iter_records(data.records[: len(batch([b"a", b"b", b"c"]))])
    ] == [(0, b"a"), (1, b"b"), (2, b"c")]


@pytest.mark.parametrize(
    "damage,expected",
    [
        ("flip_crc_covered_bit", 2),  # CORRUPT_MESSAGE
        ("bad_magic", 2),  # CORRUPT_MESSAGE (magic 5 is not a format)
        ("old_magic", 87),  # INVALID_RECORD (produce v3+ carries magic 2 only)
        ("truncate", 2),  # CORRUPT_MESSAGE
        ("codec_7", 76),  # UNSUPPORTED_COMPRESSION_TYPE (CRC fixed up)
        ("count_mismatch", 87),  # INVALID_RECORD (CRC fixed up)
    ],
)
def test_bad_batches_get_kafka_errors_and_leave_disk_alone(kafka_broker, damage, expected):
    from trio_broker.protocol.records import compute_crc

    sock = connect(kafka_broker)
    create_topic(sock, "guarded")
    assert produce(sock, "guarded", batch([b"ok"])).base_offset == 0
    before = log_files(kafka_broker, "guarded")
    bad = bytearray(batch([b"x" * 100, b"y"]))
    if damage == "flip_crc_covered_bit":
        bad[80] ^= 0x10
    elif damage == "bad_magic":
        bad[16] = 5
    elif damage == "old_magic":
        bad[16] = 1
    elif damage == "truncate":
        bad = bad[:-5]
    elif damage == "codec_7":
        bad[22] |= 0x07
        bad[17:21] = compute_crc(bad).to_bytes(4, "big")
    elif damage == "count_mismatch":
        bad[57:61] = (5).to_bytes(4, "big")
        bad[17:21] = compute_crc(bad).to_bytes(4, "big")
    answer = produce(sock, "guarded", bytes(bad))
    assert answer.error_code == expected, answer
    assert log_files(kafka_broker, "guarded") == before
    # Still serving on the same connection.
    assert produce(sock, "guarded", batch([b"after"])).base_offset == 1


def test_unknown_topic_and_invalid_name(kafka_broker_factory):
    broker = kafka_broker_factory({"auto.create.topics.enable": "false"})
    sock = connect(broker)
    assert produce(sock, "missing", batch([b"x"])).error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    meta = roundtrip(sock, request_of(3, topics=[_meta_topic("bad name!")]), 9)
    assert meta.topics[0].error_code in (3, 17)


def test_invalid_topic_name_on_auto_create(kafka_broker):
    sock = connect(kafka_broker)
    meta = roundtrip(
        sock,
        request_of(3, topics=[_meta_topic("no spaces allowed")], allow_auto_topic_creation=True),
        9,
    )
    assert meta.topics[0].error_code == 17  # INVALID_TOPIC_EXCEPTION


def test_idempotent_retry_after_dropped_connection_is_not_duplicated(kafka_broker):
    sock = connect(kafka_broker)
    create_topic(sock, "retry")
    pid = roundtrip(sock, request_of(22, transactional_id=None, transaction_timeout_ms=60000), 4)
    assert pid.error_code == 0
    first = batch(
        [b"one", b"two"],
        producer_id=pid.producer_id,
        producer_epoch=pid.producer_epoch,
        base_sequence=0,
    )
    # The request reaches the broker, but the connection drops before the answer is read.
    sock.sendall(
        encode_request(
            ProduceRequest(
                acks=-1,
                timeout_ms=5000,
                topic_data=[
                    TopicProduceData(
                        name="retry", partition_data=[PartitionProduceData(index=0, records=first)]
                    )
                ],
            ),
            PRODUCE_V,
            9,
        )
    )
    sock.close()
    time.sleep(0.2)
    sock = connect(kafka_broker)
    retried = produce(sock, "retry", first, acks=-1)
    assert (retried.error_code, retried.base_offset) == (0, 0)
    nxt = batch(
        [b"three"], producer_id=pid.producer_id, producer_epoch=pid.producer_epoch, base_sequence=2
    )
    assert produce(sock, "retry", nxt, acks=-1).base_offset == 2
    gap = batch(
        [b"five"], producer_id=pid.producer_id, producer_epoch=pid.producer_epoch, base_sequence=4
    )
    assert produce(sock, "retry", gap, acks=-1).error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    data = fetch(sock, "retry", 0)
    assert data.high_watermark == 3


def test_fetch_waits_for_min_bytes_until_a_produce_arrives(kafka_broker):
    sock = connect(kafka_broker)
    create_topic(sock, "waiting")
    result = {}

    def waiter():
        s = connect(kafka_broker)
        start = time.monotonic()
        result["data"] = fetch(s, "waiting", 0, max_wait_ms=20000, min_bytes=1)
        result["waited"] = time.monotonic() - start

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.5)
    assert thread.is_alive()  # parked in the purgatory, not answered empty
    produce(sock, "waiting", batch([b"wake up"]))
    thread.join(20)
    data = result["data"]
    assert data.error_code == 0 and data.high_watermark == 1
    assert [r.value for r in iter_records(data.records)] == [b"wake up"]
    assert result["waited"] < 15


def test_fetch_max_wait_expires_with_empty_answer(kafka_broker):
    sock = connect(kafka_broker)
    create_topic(sock, "quiet")
    data = fetch(sock, "quiet", 0, max_wait_ms=300, min_bytes=1)
    assert data.error_code == 0 and len(data.records) == 0 and data.high_watermark == 0


def test_fetch_out_of_range(kafka_broker):
    sock = connect(kafka_broker)
    create_topic(sock, "short")
    produce(sock, "short", batch([b"a"]))
    data = fetch(sock, "short", 5)
    assert data.error_code == 1  # OFFSET_OUT_OF_RANGE
    assert data.high_watermark == 1


def test_acks_zero_gets_no_answer_but_is_appended(kafka_broker):
    sock = connect(kafka_broker)
    create_topic(sock, "fire")
    sock.sendall(
        encode_request(
            ProduceRequest(
                acks=0,
                timeout_ms=1000,
                topic_data=[
                    TopicProduceData(
                        name="fire",
                        partition_data=[PartitionProduceData(index=0, records=batch([b"f"]))],
                    )
                ],
            ),
            PRODUCE_V,
            11,
        )
    )
    # The next request's answer is the first thing on the wire.
    data = fetch(sock, "fire", 0, cid=12)
    assert data.high_watermark == 1


def test_incremental_fetch_session(kafka_broker):
    """KIP-227: open a session, then fetch incrementally; unchanged partitions are left out."""
    sock = connect(kafka_broker)
    create_topic(sock, "sess-a")
    create_topic(sock, "sess-b")
    produce(sock, "sess-a", batch([b"a0"]))
    produce(sock, "sess-b", batch([b"b0"]))

    def session_fetch(epoch, session_id, topics, cid):
        return wire_session_fetch(sock, session_id, epoch, topics, cid, FETCH_V)

    full = session_fetch(0, 0, [("sess-a", 0), ("sess-b", 0)], 20)
    assert full.error_code == 0 and full.session_id > 0
    assert sorted(t.topic for t in full.responses) == ["sess-a", "sess-b"]
    # Incremental, with the fetch positions moved past what was read: nothing is new, so
    # the answer names no partition.
    quiet = session_fetch(1, full.session_id, [("sess-a", 1), ("sess-b", 1)], 21)
    assert quiet.error_code == 0 and quiet.responses == []
    # New data on one partition: only that one comes back.
    produce(sock, "sess-b", batch([b"b1"]))
    moved = session_fetch(2, full.session_id, [("sess-b", 1)], 22)
    assert [(t.topic, t.partitions[0].high_watermark) for t in moved.responses] == [("sess-b", 2)]
    assert [r.value for r in iter_records(moved.responses[0].partitions[0].records)] == [b"b1"]
    # A stale epoch is refused.
    assert session_fetch(2, full.session_id, [], 23).error_code == 71  # INVALID_FETCH_SESSION_EPOCH
    assert session_fetch(1, 12345, [], 24).error_code == 70  # FETCH_SESSION_ID_NOT_FOUND


def test_incremental_session_sends_a_high_watermark_seen_while_waiting(kafka_broker):
    """A parked read_committed fetch is woken by a transactional append to sess-b: the high
    watermark moves, but nothing is committed, so it waits on. When sess-a's records
    complete it, sess-b's new high watermark is in the answer: the session remembers only
    what went out (the wake's discarded read must not count as told)."""
    from confluent_kafka import Producer

    sock = connect(kafka_broker)
    other = connect(kafka_broker)
    create_topic(sock, "hw-a")
    create_topic(sock, "hw-b")

    def request(epoch, session_id, max_wait_ms):
        topics = [("hw-a", 0), ("hw-b", 0)]
        return session_fetch_request(
            session_id, epoch, topics, max_wait_ms=max_wait_ms, min_bytes=1, isolation_level=1
        )  # READ_COMMITTED

    full = roundtrip(sock, request(0, 0, 0), FETCH_V, 30)
    assert full.error_code == 0 and full.session_id > 0
    hw = {t.topic: t.partitions[0].high_watermark for t in full.responses}
    assert hw == {"hw-a": 0, "hw-b": 0}
    sock.sendall(encode_request(request(1, full.session_id, 20_000), FETCH_V, 31))
    time.sleep(0.3)  # parked

    txn = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": "hw-b"})
    txn.init_transactions(20)
    txn.begin_transaction()
    txn.produce("hw-b", b"undecided")
    txn.flush(20)
    time.sleep(0.3)  # the wake has read sess-b and gone back to waiting
    produce(other, "hw-a", batch([b"a0"]))

    sock.settimeout(20)
    cid, answer = read_response(sock, 1, FETCH_V)
    assert cid == 31 and answer.error_code == 0
    parts = {t.topic: t.partitions[0] for t in answer.responses}
    assert [r.value for r in iter_records(parts["hw-a"].records)] == [b"a0"]
    # sess-b: no record (not committed), but its news: high watermark 1, stable offset 0.
    assert "hw-b" in parts, "the high watermark seen while waiting was never sent"
    assert (parts["hw-b"].high_watermark, parts["hw-b"].last_stable_offset) == (1, 0)
    assert not parts["hw-b"].records
    txn.abort_transaction(20)


def test_a_parked_fetch_is_answered_when_the_broker_stops(kafka_broker_factory):
    """A consumer's long poll (max_wait_ms a minute) parked on an empty partition: stopping
    the broker answers it at once with what there is (nothing, high watermark 1), rather
    than holding the shutdown until the grace period ends and closing it unanswered."""
    broker = kafka_broker_factory({"shutdown.grace.period.ms": "60000"})
    sock = connect(broker)
    create_topic(sock, "stopping")
    produce(sock, "stopping", batch([b"only"]))
    request = FetchRequest(
        max_wait_ms=60_000,
        min_bytes=1,
        max_bytes=1 << 20,
        session_epoch=-1,
        topics=[
            FetchTopic(
                topic="stopping",
                partitions=[FetchPartition(partition=0, fetch_offset=1, partition_max_bytes=1024)],
            )
        ],
    )
    sock.sendall(encode_request(request, FETCH_V, 40))
    time.sleep(0.3)  # parked: nothing past offset 1
    stopper = threading.Thread(target=broker.stop)
    stopper.start()
    sock.settimeout(20)  # far less than the fetch's minute and the grace period's
    cid, answer = read_response(sock, 1, FETCH_V)
    stopper.join(20)
    assert not stopper.is_alive()
    data = answer.responses[0].partitions[0]
    assert (cid, answer.error_code, data.error_code) == (40, 0, 0)
    assert data.high_watermark == 1 and not data.records
