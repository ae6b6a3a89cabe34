"""Transactions with librdkafka (confluent-kafka): commit, abort, isolation levels, the
LSO, the .txnindex bytes, exactly-once consume-transform-produce, and fencing."""

from __future__ import annotations

import socket

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from txntest_helpers import consume_all, create_topic, read_txn_index
from wire import roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
)


def _producer(bootstrap: str, txn_id: str, **extra: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, **extra})
    producer.init_transactions(15)
    return producer


def test_commit_and_abort_by_isolation_level(broker):
    create_topic(broker.bootstrap, "orders", 2)
    producer = _producer(broker.bootstrap, "orders-writer")
    for txn in range(6):
        producer.begin_transaction()
        for i in range(4):
            producer.produce("orders", value=b"%d-%d" % (txn, i), partition=i % 2)
        if txn % 2 == 0:
            producer.commit_transaction(15)
        else:
            producer.flush(15)  # the records reach the log, then the transaction is aborted
            producer.abort_transaction(15)

    committed = consume_all(broker.bootstrap, "orders", 2, "read_committed")
    everything = consume_all(broker.bootstrap, "orders", 2, "read_uncommitted")
    # read_committed: exactly the committed records, in order per partition.
    for partition in (0, 1):
        values = [v for p, _, v in committed if p == partition]
        assert values == [
            b"%d-%d" % (t, i) for t in (0, 2, 4) for i in range(4) if i % 2 == partition
        ]
    assert len(everything) == 24
    assert {v for _, _, v in everything} == {b"%d-%d" % (t, i) for t in range(6) for i in range(4)}

    # Each partition: 6 transactions of 2 records plus one marker each, 18 offsets; the
    # three aborted ones are in the segment's .txnindex in Kafka's format.
    entries = read_txn_index(broker.log_dir / "orders-0" / "00000000000000000000.txnindex")
    assert [(v, first, last, lso) for v, _, first, last, lso in entries] == [
        (0, 3, 5, 6),
        (0, 9, 11, 12),
        (0, 15, 17, 18),
    ]
    assert len({pid for _, pid, *_ in entries}) == 1


def test_lso_holds_read_committed_back_until_commit(broker):
    create_topic(broker.bootstrap, "pending", 1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce("pending", value=b"before", partition=0)
    plain.flush(10)
    producer = _producer(broker.bootstrap, "slow-writer")
    producer.begin_transaction()
    producer.produce("pending", value=b"inside", partition=0)
    producer.flush(10)
    plain.produce("pending", value=b"after", partition=0)
    plain.flush(10)

    committed = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "w1",
            "isolation.level": "read_committed",
        }
    )
    uncommitted = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "w2",
            "isolation.level": "read_uncommitted",
        }
    )
    tp = TopicPartition("pending", 0)
    try:
        # ListOffsets LATEST: the LSO (the open transaction's first offset) for read_committed,
        # the high watermark otherwise.
        assert committed.get_watermark_offsets(tp, timeout=10, cached=False) == (0, 1)
        assert uncommitted.get_watermark_offsets(tp, timeout=10, cached=False) == (0, 3)
        assert [v for _, _, v in consume_all(broker.bootstrap, "pending", 1, "read_committed")] == [
            b"before"
        ]
        producer.commit_transaction(15)
        assert committed.get_watermark_offsets(tp, timeout=10, cached=False) == (0, 4)
    finally:
        committed.close()
        uncommitted.close()
    values = [v for _, _, v in consume_all(broker.bootstrap, "pending", 1, "read_committed")]
    assert values == [b"before", b"inside", b"after"]


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        return tp.offset
    finally:
        consumer.close()


def test_consume_transform_produce_exactly_once(broker):
    """Each batch is a fresh consumer (a restart) resuming at the committed offset; midway a
    second instance with the same transactional id fences the first, a zombie holding an
    open transaction, and takes over."""
    create_topic(broker.bootstrap, "in", 1)
    create_topic(broker.bootstrap, "out", 1)
    source = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30):
        source.produce("in", value=b"%d" % i, partition=0)
    source.flush(10)

    def run_batch(producer: Producer, finish: str) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "eos",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        consumer.assign([TopicPartition("in", 0)])  # resumes at the committed offset
        producer.begin_transaction()
        taken = []
        while len(taken) < 10:
            msg = consumer.poll(5)
            assert msg is not None and not msg.error()
            taken.append(msg)
            producer.produce("out", value=b"x" + msg.value(), partition=0)
        producer.send_offsets_to_transaction(
            [TopicPartition("in", 0, taken[-1].offset() + 1)],
            consumer.consumer_group_metadata(),
            15,
        )
        producer.flush(15)
        if finish == "commit":
            producer.commit_transaction(15)
        elif finish == "abort":
            producer.abort_transaction(15)
        consumer.close()

    first = _producer(broker.bootstrap, "eos-pipeline")
    run_batch(first, "commit")
    assert _committed(broker.bootstrap, "eos", "in") == 10
    run_batch(first, "abort")  # aborted: neither the output nor the offsets count
    assert _committed(broker.bootstrap, "eos", "in") == 10
    run_batch(first, "leave open")  # the first instance hangs mid-transaction
    second = _producer(broker.bootstrap, "eos-pipeline")  # fences it, aborting its work
    run_batch(second, "commit")
    run_batch(second, "commit")
    assert _committed(broker.bootstrap, "eos", "in") == 30
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(15)  # the zombie wakes up
    assert raised.value.args[0].fatal()

    out = [v for _, _, v in consume_all(broker.bootstrap, "out", 1, "read_committed")]
    assert out == [b"x%d" % i for i in range(30)]  # each input exactly once, in order
    everything = consume_all(broker.bootstrap, "out", 1, "read_uncommitted")
    assert len(everything) == 50  # the aborted batches are in the log, invisible to read_committed


def test_second_producer_fences_the_first(broker):
    create_topic(broker.bootstrap, "fenced", 1)
    first = _producer(broker.bootstrap, "shared-id")
    first.begin_transaction()
    first.produce("fenced", value=b"zombie", partition=0)
    first.flush(10)
    second = _producer(broker.bootstrap, "shared-id")  # aborts the first's open transaction
    second.begin_transaction()
    second.produce("fenced", value=b"live", partition=0)
    second.commit_transaction(15)

    with pytest.raises(KafkaException) as raised:
        first.produce("fenced", value=b"late", partition=0)
        first.commit_transaction(15)
    error = raised.value.args[0]
    assert error.fatal(), error
    assert "fenced" in error.str().lower() or "epoch" in error.str().lower(), error

    values = [v for _, _, v in consume_all(broker.bootstrap, "fenced", 1, "read_committed")]
    assert values == [b"live"]


def test_pending_transactional_offsets_are_unstable(broker):
    create_topic(broker.bootstrap, "src", 1)
    producer = _producer(broker.bootstrap, "offsets-writer")
    group = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-unstable"})
    producer.begin_transaction()
    producer.send_offsets_to_transaction(
        [TopicPartition("src", 0, 7)], group.consumer_group_metadata(), 15
    )
    request = OffsetFetchRequest(
        group_id="g-unstable",
        topics=[OffsetFetchRequestTopic(name="src", partition_indexes=[0])],
        require_stable=True,
    )
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        (part,) = roundtrip(sock, request, 7).topics[0].partitions
        assert (part.error_code, part.committed_offset) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
        producer.commit_transaction(15)
        (part,) = roundtrip(sock, request, 7).topics[0].partitions
        assert (part.error_code, part.committed_offset) == (ErrorCode.NONE, 7)
    group.close()
