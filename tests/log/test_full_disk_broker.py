"""Issue 11: a broker whose log dir is on a small tmpfs that fills up, with confluent-kafka.

Acknowledged records are counted before, while and after the disk is full; every one must
come back at its acknowledged offset exactly once, before and after a SIGTERM and restart,
also when the stop comes while the disk is still full. While full, produces get
KAFKA_STORAGE_ERROR on a connection that stays open, FindCoordinator answers
COORDINATOR_NOT_AVAILABLE (`__consumer_offsets` cannot be created), and the broker never
logs a traceback."""

from __future__ import annotations

import socket
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from logtest_helpers import fill_disk, small_tmpfs
from wire import request_of, roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    TopicProduceData,
)
from trio_broker.protocol.record_codec import build_batch
from trio_broker.testing import BrokerProcess

TOPIC = "full"


def overrides(disk) -> dict[str, str]:
    return {
        "log.dirs": str(disk / "data"),
        "num.partitions": "1",
        "offsets.topic.num.partitions": "1",
        # Rolls happen while the disk fills, too.
        "log.segment.bytes": str(1 << 20),
    }


def produce(bootstrap: str, values: list[bytes], **config) -> tuple[dict[int, bytes], list]:
    """Produce `values` to partition 0; ({offset: value} acknowledged, [errors])."""
    acked: dict[int, bytes] = {}
    errors: list[KafkaError] = []

    def on_delivery(err, msg):
        if err is None:
            acked[msg.offset()] = msg.value()
        else:
            errors.append(err)

    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "log_level": 0} | config
    )
    for value in values:
        while True:
            try:
                producer.produce(TOPIC, value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(30) == 0
    return acked, errors


def produce_until_refused(bootstrap: str, start: int) -> tuple[dict[int, bytes], list]:
    """Produce 4 KiB records without retries until the broker refuses some."""
    acked: dict[int, bytes] = {}
    errors: list = []
    for chunk in range(200):
        values = [b"during-%08d-" % (start + chunk * 50 + i) + b"d" * 4096 for i in range(50)]
        got, failed = produce(bootstrap, values, retries=0, **{"message.timeout.ms": 20000})
        acked |= got
        errors += failed
        if failed:
            return acked, errors
    raise AssertionError("the disk never filled up")


def consume_all(bootstrap: str) -> list[tuple[int, bytes]]:
    """Every record of partition 0 from offset 0 to the high watermark, in order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "check",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=20)
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 20
        while (not got or got[-1][0] < end - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.value()))
        return got
    finally:
        consumer.close()


def check_every_acked_record(bootstrap: str, acked: dict[int, bytes]) -> None:
    got = consume_all(bootstrap)
    # Exactly the acknowledged records, each at its offset, once, with no gap: a refused
    # append left nothing behind.
    assert [offset for offset, _ in got] == list(range(len(acked)))
    assert dict(got) == acked


def raw_produce_is_refused_on_an_open_connection(broker: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=20) as sock:
        batch = build_batch([(b"k", b"x" * 100_000, (), int(time.time() * 1000))])
        request = request_of(
            0,
            acks=-1,
            timeout_ms=5000,
            topic_data=[
                TopicProduceData(
                    name=TOPIC, partition_data=[PartitionProduceData(index=0, records=batch)]
                )
            ],
        )
        answer = roundtrip(sock, request, 9)
        assert answer.responses[0].partition_responses[0].error_code == (
            ErrorCode.KAFKA_STORAGE_ERROR
        )
        # `__consumer_offsets` cannot be created: an error code, not a closed connection.
        found = roundtrip(sock, request_of(10, key="group", key_type=0), 3, correlation_id=2)
        assert found.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        # The same connection answers the next request.
        meta = roundtrip(sock, request_of(3, topics=None), 9, correlation_id=3)
        assert [t.name for t in meta.topics] == [TOPIC]


def no_traceback(broker: BrokerProcess) -> None:
    logged = "".join(broker.lines)
    assert "Traceback" not in logged, logged[-3000:]


def test_full_disk_loses_no_acknowledged_record(tmp_path):
    with small_tmpfs(tmp_path / "disk", "16m") as disk:
        broker = BrokerProcess(overrides(disk))
        try:
            acked, errors = produce(broker.bootstrap, [b"before-%08d" % i for i in range(2000)])
            assert len(acked) == 2000 and not errors

            filler = fill_disk(disk, 2 << 20)
            during, errors = produce_until_refused(broker.bootstrap, len(acked))
            assert during, "some records fit in the space left"
            assert {e.code() for e in errors} == {KafkaError.KAFKA_STORAGE_ERROR}
            acked |= during
            fill_disk(disk, 0)  # whatever is left, so that nothing more fits
            raw_produce_is_refused_on_an_open_connection(broker)

            filler.unlink()
            after, errors = produce(broker.bootstrap, [b"after-%08d" % i for i in range(2000)])
            assert len(after) == 2000 and not errors
            assert min(after) == len(acked)  # right after the last acknowledged record
            acked |= after
            check_every_acked_record(broker.bootstrap, acked)
            no_traceback(broker)
            assert broker.stop() == 0

            broker = BrokerProcess(overrides(disk))
            assert not any("not shut down cleanly" in line for line in broker.lines)
            check_every_acked_record(broker.bootstrap, acked)
        finally:
            if broker.proc.poll() is None:
                broker.stop()
        no_traceback(broker)


def test_stop_while_the_disk_is_full_loses_nothing(tmp_path):
    with small_tmpfs(tmp_path / "disk", "16m") as disk:
        broker = BrokerProcess(overrides(disk))
        try:
            acked, _ = produce(broker.bootstrap, [b"before-%08d" % i for i in range(2000)])
            assert len(acked) == 2000
            filler = fill_disk(disk, 2 << 20)
            during, errors = produce_until_refused(broker.bootstrap, len(acked))
            assert {e.code() for e in errors} == {KafkaError.KAFKA_STORAGE_ERROR}
            acked |= during
            fill_disk(disk, 0)
            assert broker.stop() == 0  # checkpoints and the marker fail; the stop does not
            no_traceback(broker)

            filler.unlink()
            broker = BrokerProcess(overrides(disk))
            assert any("not shut down cleanly" in line for line in broker.lines)
            check_every_acked_record(broker.bootstrap, acked)
            after, _ = produce(broker.bootstrap, [b"after-%08d" % i for i in range(100)])
            assert min(after) == len(acked) and len(after) == 100
        finally:
            if broker.proc.poll() is None:
                broker.stop()
        no_traceback(broker)
