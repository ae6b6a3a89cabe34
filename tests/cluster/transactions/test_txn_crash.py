"""Crashes: kill -9 in the middle of a transaction, and a broker process that dies at each
step of a commit or an abort (TRIO_BROKER_CRASH_AT: after the Prepare record, between two
partitions' markers, before the Complete record). After the restart the transaction ends
the way it was decided, read_committed consumers see exactly the committed records, the
.txnindex is rebuilt, and the last stable offset moves on."""

from __future__ import annotations

import socket
import threading

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from txntest_helpers import consume_all, create_topic, read_txn_index
from wire import roundtrip

from trio_broker.protocol._generated.describe_producers_request import (
    DescribeProducersRequest,
    TopicRequest,
)
from trio_broker.protocol._generated.describe_transactions_request import (
    DescribeTransactionsRequest,
)
from trio_broker.protocol.records import iter_batches
from trio_broker.testing import BrokerProcess

SMALL = {
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
}


def _state(host: str, port: int, txn_id: str):
    with socket.create_connection((host, port), timeout=10) as sock:
        request = DescribeTransactionsRequest(transactional_ids=[txn_id])
        return roundtrip(sock, request, 0).transaction_states[0]


def test_kill_9_mid_transaction(tmp_path):
    overrides = {"log.dirs": str(tmp_path), **SMALL}
    broker = BrokerProcess(overrides)
    try:
        create_topic(broker.bootstrap, "crashy", 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "crash-1"})
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.produce("crashy", value=b"committed", partition=0)
        producer.commit_transaction(15)
        producer.begin_transaction()
        producer.produce("crashy", value=b"aborted", partition=0)
        producer.flush(15)
        producer.abort_transaction(15)
        producer.begin_transaction()
        producer.produce("crashy", value=b"open when killed", partition=0)
        producer.flush(15)
        index = tmp_path / "crashy-0" / "00000000000000000000.txnindex"
        written = index.read_bytes()
        assert read_txn_index(index) == [(0, read_txn_index(index)[0][1], 2, 3, 4)]
    finally:
        broker.kill()
    index.unlink()  # recovery must rebuild it from the segment

    broker = BrokerProcess(overrides)
    try:
        assert index.read_bytes() == written
        # The open transaction is still open: read_committed stops at its first offset.
        plain = Producer({"bootstrap.servers": broker.bootstrap})
        plain.produce("crashy", value=b"after restart", partition=0)
        plain.flush(10)
        seen = consume_all(broker.bootstrap, "crashy", 1, "read_committed")
        assert [v for _, _, v in seen] == [b"committed"]
        host, port = broker.bootstrap.split(":")
        assert _state(host, int(port), "crash-1").transaction_state == "Ongoing"
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            request = DescribeProducersRequest(
                topics=[TopicRequest(name="crashy", partition_indexes=[0])]
            )
            (part,) = roundtrip(sock, request, 0).topics[0].partitions
        # The open transaction, restored by recovery, starts at offset 4.
        assert [p.current_txn_start_offset for p in part.active_producers] == [4]

        # The producer comes back: InitProducerId aborts the transaction left open.
        again = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "crash-1"})
        again.init_transactions(15)
        seen = consume_all(broker.bootstrap, "crashy", 1, "read_committed")
        assert [v for _, _, v in seen] == [b"committed", b"after restart"]
        entries = read_txn_index(index)
        assert [(first, last) for _, _, first, last, _ in entries] == [(2, 3), (4, 6)]
        everything = consume_all(broker.bootstrap, "crashy", 1, "read_uncommitted")
        assert len(everything) == 4
    finally:
        broker.kill()


def _end(producer: Producer, commit: bool, outcome: list) -> None:
    """commit_transaction / abort_transaction until it succeeds or fails for good; what
    happened goes into `outcome` (the broker dies and comes back meanwhile)."""
    try:
        for _attempt in range(30):
            try:
                (producer.commit_transaction if commit else producer.abort_transaction)(60)
                outcome.append("done")
                return
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise
                outcome.append(f"retried: {exc.args[0].str()}")
        outcome.append("never ended")
    except BaseException as exc:  # reported by the test
        outcome.append(exc)


def _markers(partition_dir) -> int:
    """Control batches (transaction markers) in a partition's first segment on disk."""
    data = (partition_dir / "00000000000000000000.log").read_bytes()
    return sum(1 for _, header in iter_batches(data) if header.is_control)


def _watermarks(bootstrap: str, partitions: int, isolation: str) -> list[tuple[int, int]]:
    """(low, high) per partition from ListOffsets with `isolation`: for read_committed the
    high mark is the last stable offset."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"marks-{isolation}",
            "isolation.level": isolation,
        }
    )
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition("decided", p), timeout=10, cached=False)
            for p in range(partitions)
        ]
    finally:
        consumer.close()


@pytest.mark.parametrize(
    ("crash_at", "commit"),
    [
        ("txn.after_prepare", True),
        ("txn.after_first_marker", True),
        ("txn.before_complete", True),
        ("txn.after_prepare", False),
        ("txn.after_first_marker", False),
    ],
)
def test_broker_dies_at_each_step_of_ending_a_transaction(tmp_path, monkeypatch, crash_at, commit):
    overrides = {"log.dirs": str(tmp_path), **SMALL}
    monkeypatch.setenv("TRIO_BROKER_CRASH_AT", crash_at)
    broker = BrokerProcess(overrides)  # this process only: the variable is read at start
    monkeypatch.delenv("TRIO_BROKER_CRASH_AT")
    producer = None
    try:
        create_topic(broker.bootstrap, "decided", 2)
        plain = Producer({"bootstrap.servers": broker.bootstrap})
        plain.produce("decided", value=b"before", partition=1)
        assert plain.flush(10) == 0
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "transactional.id": "dies",
                "reconnect.backoff.max.ms": 200,
            }
        )
        producer.init_transactions(15)
        producer.begin_transaction()
        values = [b"txn-%d" % i for i in range(4)]
        for i, value in enumerate(values):
            producer.produce("decided", value=value, partition=i % 2)
        assert producer.flush(15) == 0
        # Offsets committed in the transaction: pending until its marker.
        group = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-decided"})
        producer.send_offsets_to_transaction(
            [TopicPartition("decided", 0, 42)], group.consumer_group_metadata(), 15
        )
        group.close()

        outcome: list = []
        ending = threading.Thread(target=_end, args=(producer, commit, outcome), daemon=True)
        ending.start()
        assert broker.wait_exit(30) == 137, "the broker did not stop at the crash point"
        assert any(f"crash point {crash_at}" in line for line in broker.lines)
        # What the crash left on disk: the data partitions' markers, none or both.
        assert [_markers(tmp_path / f"decided-{p}") for p in (0, 1)] == (
            [1, 1] if crash_at == "txn.before_complete" else [0, 0]
        )
        if crash_at == "txn.after_first_marker":  # the first went to the offsets partition
            assert sum(_markers(d) for d in tmp_path.glob("__consumer_offsets-*")) == 1
        broker.start_again()
        ending.join(90)
        assert outcome and outcome[-1] == "done", outcome

        host, port = broker.bootstrap.split(":")
        ended = "CompleteCommit" if commit else "CompleteAbort"
        assert _state(host, int(port), "dies").transaction_state == ended
        seen = consume_all(broker.bootstrap, "decided", 2, "read_committed")
        assert sorted(v for _, _, v in seen) == sorted([b"before", *(values if commit else [])])
        everything = consume_all(broker.bootstrap, "decided", 2, "read_uncommitted")
        assert sorted(v for _, _, v in everything) == sorted([b"before", *values])
        # The last stable offset is the high watermark: no transaction is left open.
        committed_marks = _watermarks(broker.bootstrap, 2, "read_committed")
        assert committed_marks == _watermarks(broker.bootstrap, 2, "read_uncommitted")
        # Each partition: its records and a marker, or two when the marker written before
        # the crash is written again after it (the coordinator resends, as Kafka's does).
        records = [2, 3]
        assert all(
            high - n in (1, 2) for (_, high), n in zip(committed_marks, records, strict=True)
        ), committed_marks
        reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-decided"})
        try:
            (offset,) = reader.committed([TopicPartition("decided", 0)], timeout=10)
        finally:
            reader.close()
        assert offset.offset == (42 if commit else -1001)  # -1001: no committed offset
        for p in (0, 1):
            index = tmp_path / f"decided-{p}" / "00000000000000000000.txnindex"
            assert index.exists() != commit
            if not commit:
                assert [(first, last) for _, _, first, last, _ in read_txn_index(index)] == [
                    (p, p + 2)
                ]

        # The same producer goes on: its next transaction is read, the LSO moves past it.
        producer.begin_transaction()
        producer.produce("decided", value=b"next", partition=0)
        producer.commit_transaction(30)
        seen = consume_all(broker.bootstrap, "decided", 2, "read_committed")
        assert b"next" in [v for _, _, v in seen]
        lso = _watermarks(broker.bootstrap, 2, "read_committed")[0][1]
        assert lso == committed_marks[0][1] + 2  # the record and its marker
    finally:
        if producer is not None:
            producer.flush(1)
        if broker.alive:
            broker.kill()
