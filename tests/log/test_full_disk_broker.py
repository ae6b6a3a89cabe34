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
from disk import fill_disk, small_tmpfs
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


def produce(
    bootstrap: str, values: list[bytes], partition: int = 0, **config
) -> tuple[dict[int, bytes], list]:
    """Produce `values` to `partition`; ({offset: value} acknowledged, [errors])."""
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
                producer.produce(TOPIC, value, partition=partition, on_delivery=on_delivery)
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


def consume_all(bootstrap: str, partition: int = 0) -> list[tuple[int, bytes]]:
    """Every record of `partition` from offset 0 to the high watermark, in order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "check",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=20)
        consumer.assign([TopicPartition(TOPIC, partition, 0)])
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


def check_every_acked_record(bootstrap: str, acked: dict[int, bytes], partition: int = 0) -> None:
    got = consume_all(bootstrap, partition)
    # Exactly the acknowledged records, each at its offset, once, with no gap: a refused
    # append left nothing behind.
    assert [offset for offset, _ in got] == list(range(len(acked)))
    assert dict(got) == acked


def raw_produce(sock: socket.socket, partition: int, value: bytes, cid: int = 1) -> int:
    """One Produce v9 of one record on `sock`; the partition's error code."""
    batch = build_batch([(b"k", value, (), int(time.time() * 1000))])
    request = request_of(
        0,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            TopicProduceData(
                name=TOPIC, partition_data=[PartitionProduceData(index=partition, records=batch)]
            )
        ],
    )
    return (
        roundtrip(sock, request, 9, correlation_id=cid)
        .responses[0]
        .partition_responses[0]
        .error_code
    )


def raw_produce_is_refused_on_an_open_connection(broker: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=20) as sock:
        assert raw_produce(sock, 0, b"x" * 100_000) == ErrorCode.KAFKA_STORAGE_ERROR
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
            with socket.create_connection(("127.0.0.1", broker.port), timeout=20) as sock:
                # The failed creation left nothing behind: now it is created.
                found = roundtrip(sock, request_of(10, key="group", key_type=0), 3)
                assert found.error_code == ErrorCode.NONE and found.port == broker.port
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


def test_a_log_dir_failing_io_goes_offline_and_the_other_goes_on(tmp_path):
    """An error other than ENOSPC (here EFBIG: the broker's RLIMIT_FSIZE, set with
    prlimit) takes its log dir offline, as Kafka's LogDirFailureChannel does: its partition
    answers KAFKA_STORAGE_ERROR, DescribeLogDirs reports the dir's error, the partition in
    the other dir goes on, and a restart brings every acknowledged record back."""
    import resource

    from kafka.admin import KafkaAdminClient

    dirs = [tmp_path / "a", tmp_path / "b"]
    config = {"log.dirs": ",".join(map(str, dirs)), "num.partitions": "2"}
    config["offsets.topic.num.partitions"] = "1"
    broker = BrokerProcess(config)
    try:
        # Partition 0 is created in dir a, partition 1 in dir b (the least loaded).
        acked0, _ = produce(broker.bootstrap, [b"p0-%06d-" % i + b"x" * 1000 for i in range(300)])
        acked1, _ = produce(broker.bootstrap, [b"p1-%06d" % i for i in range(100)], partition=1)
        assert (dirs[0] / f"{TOPIC}-0").is_dir() and (dirs[1] / f"{TOPIC}-1").is_dir()
        size0 = sum(f.stat().st_size for f in (dirs[0] / f"{TOPIC}-0").glob("*.log"))
        hard = resource.prlimit(broker.proc.pid, resource.RLIMIT_FSIZE)[1]
        resource.prlimit(broker.proc.pid, resource.RLIMIT_FSIZE, (size0 + 20_000, hard))
        more, errors = produce(
            broker.bootstrap,
            [b"p0-%06d-" % i + b"y" * 1000 for i in range(300, 400)],
            retries=0,
            **{"message.timeout.ms": 5000},
        )
        assert errors and KafkaError.KAFKA_STORAGE_ERROR in {e.code() for e in errors}
        acked0 |= more
        # The other dir goes on.
        more1, errors1 = produce(broker.bootstrap, [b"p1-%06d" % i for i in range(100, 200)], 1)
        assert len(more1) == 100 and not errors1
        acked1 |= more1
        with socket.create_connection(("127.0.0.1", broker.port), timeout=20) as sock:
            assert raw_produce(sock, 0, b"z") == ErrorCode.KAFKA_STORAGE_ERROR
            assert raw_produce(sock, 1, b"z", cid=2) == ErrorCode.NONE
        acked1[len(acked1)] = b"z"
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            (described,) = admin.describe_log_dirs()
        finally:
            admin.close()
        by_dir = {d["log_dir"]: d for d in described["log_dirs"]}
        assert by_dir[str(dirs[0])]["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
        assert by_dir[str(dirs[1])]["error_code"] == ErrorCode.NONE
        assert [
            (t["name"], [p["partition_index"] for p in t["partitions"]])
            for t in by_dir[str(dirs[1])]["topics"]
            if t["name"] == TOPIC
        ] == [(TOPIC, [1])]
        resource.prlimit(broker.proc.pid, resource.RLIMIT_FSIZE, (hard, hard))
        assert broker.stop() == 0

        broker = BrokerProcess(config)
        check_every_acked_record(broker.bootstrap, acked0, 0)
        check_every_acked_record(broker.bootstrap, acked1, 1)
    finally:
        if broker.proc.poll() is None:
            broker.stop()
