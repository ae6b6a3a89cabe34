"""AlterReplicaLogDirs (issue 17 item 5): a partition moves to another log dir while a
confluent-kafka producer writes to it; every acknowledged record is read back once, at its
offset, after the move and after a restart, and the files end up in the target dir only."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient
from kafka.errors import NoError
from test_jbod import create_topics, describe_log_dirs_raw
from wire import encode_request, read_response, request_of

from trio_broker.protocol._generated.alter_replica_log_dirs_request import (
    AlterReplicaLogDir,
    AlterReplicaLogDirTopic,
)
from trio_broker.testing import BrokerThread

TOPIC = "moving"


def where(bootstrap: str, topic: str, partition: int) -> dict[str, bool]:
    """{log dir: is_future} of every replica of topic-partition DescribeLogDirs lists."""
    out = {}
    for result in describe_log_dirs_raw(bootstrap):
        for t in result["topics"]:
            for p in t["partitions"]:
                if t["name"] == topic and p["partition_index"] == partition:
                    out[result["log_dir"]] = p["is_future_key"]
    return out


def alter_log_dir(bootstrap: str, topic: str, partition: int, path: str):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.alter_replica_log_dirs({TopicPartitionReplica(topic, partition, 1): path})
    finally:
        admin.close()
    return result[TopicPartitionReplica(topic, partition, 1)]


class BackgroundProducer:
    """Produces numbered values until stopped; keeps {offset: value} of the acknowledged."""

    def __init__(self, bootstrap: str, acks: str) -> None:
        self.acked: dict[int, bytes] = {}
        self.errors: list = []
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 2, "log_level": 0}
            # acks=all with idempotence: its sequence numbers must carry over the swap.
            | ({"enable.idempotence": True} if acks == "all" else {})
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            assert msg.offset() not in self.acked
            self.acked[msg.offset()] = msg.value()
        else:
            self.errors.append(err)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self.producer.produce(
                    TOPIC, b"v%08d" % i + b"." * 500, partition=0, on_delivery=self._on_delivery
                )
                i += 1
            except BufferError:
                self.producer.poll(0.05)
            self.producer.poll(0)
            if i % 200 == 0:
                time.sleep(0.002)  # a steady stream, not a flood

    def __enter__(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self.producer.flush(60) == 0


def read_all(bootstrap: str, end: int) -> dict[int, bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "mover", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    out: dict[int, bytes] = {}
    try:
        while len(out) < end:
            msgs = consumer.consume(min(5000, end - len(out)), timeout=10)
            assert msgs, f"only {len(out)} of {end} records came back"
            for msg in msgs:
                assert msg.error() is None, msg.error()
                assert msg.offset() not in out, f"offset {msg.offset()} read twice"
                out[msg.offset()] = msg.value()
    finally:
        consumer.close()
    return out


def alter_and_describe(port: int, path: str) -> tuple[int, dict[str, bool]]:
    """AlterReplicaLogDirs v2 and DescribeLogDirs v4 pipelined on one connection: the
    move's error code, and {log dir: is_future} of the partition right after it started."""
    alter = request_of(
        34,
        dirs=[
            AlterReplicaLogDir(
                path=path, topics=[AlterReplicaLogDirTopic(name=TOPIC, partitions=[0])]
            )
        ],
    )
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(
            encode_request(alter, 2, 1) + encode_request(request_of(35, topics=None), 4, 2)
        )
        _, altered = read_response(sock, 34, 2)
        _, described = read_response(sock, 35, 4)
    replicas = {
        r.log_dir: p.is_future_key
        for r in described.results
        for t in r.topics
        for p in t.partitions
        if t.name == TOPIC
    }
    return altered.results[0].partitions[0].error_code, replicas


def partition_dirs(log_dir: Path) -> list[str]:
    return sorted(p.name for p in log_dir.iterdir() if p.name.startswith(f"{TOPIC}-0"))


@pytest.mark.parametrize("acks", ["1", "all"])
def test_move_while_producing_loses_nothing(tmp_path, acks):
    dirs = [tmp_path / "disk0", tmp_path / "disk1"]
    config = {
        "log.dirs": ",".join(str(d) for d in dirs),
        "log.segment.bytes": str(1 << 20),
        "file.delete.delay.ms": "0",
        "offsets.topic.num.partitions": "1",
    }
    with BrokerThread(config) as broker:
        create_topics(broker.bootstrap, {TOPIC: 1})
        (source,) = [d for d in dirs if partition_dirs(d)]
        (target,) = [d for d in dirs if d != source]
        with BackgroundProducer(broker.bootstrap, acks) as producer:
            # Rolled segments to copy, then the move while records keep coming.
            deadline = time.monotonic() + 60
            while len(producer.acked) < 16_000:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            code, replicas = alter_and_describe(broker.port, str(target))
            assert code == 0
            # While it copies, the future replica is listed in the target dir.
            assert replicas == {str(source): False, str(target): True}
            # kafka-python's admin call: the same destination again is no error.
            assert alter_log_dir(broker.bootstrap, TOPIC, 0, str(target)) is NoError
            seen_future = True
            while True:
                assert time.monotonic() < deadline, "the move did not finish"
                replicas = where(broker.bootstrap, TOPIC, 0)
                if replicas.get(str(target)) is True:
                    assert replicas[str(source)] is False
                    seen_future = True
                if replicas == {str(target): False}:
                    break
                time.sleep(0.01)
            assert seen_future
            moved_at = max(producer.acked)
            while len(producer.acked) < moved_at + 5_000:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert not producer.errors
        acked = producer.acked
        assert sorted(acked) == list(range(len(acked)))
        assert read_all(broker.bootstrap, len(acked)) == acked
        # The old files go (file.delete.delay.ms=0: at the next housekeeping round).
        while partition_dirs(source):
            assert time.monotonic() < deadline + 30, partition_dirs(source)
            time.sleep(0.1)
        assert partition_dirs(target) == [f"{TOPIC}-0"]
        assert len(list((target / f"{TOPIC}-0").glob("*.log"))) > 3
    with BrokerThread(config) as broker:
        assert read_all(broker.bootstrap, len(acked)) == acked
        assert where(broker.bootstrap, TOPIC, 0) == {str(target): False}
    assert partition_dirs(source) == []
    assert partition_dirs(target) == [f"{TOPIC}-0"]


def test_a_log_dir_asked_for_before_the_replica_exists_is_where_it_is_created(tmp_path):
    """AlterReplicaLogDirs for a partition this broker has no replica of yet answers
    UNKNOWN_TOPIC_OR_PARTITION and remembers the dir (Kafka's preferred log dirs): the
    replica, once created, starts there rather than in the least loaded dir, with nothing
    to copy. Another partition still goes to the least loaded dir."""
    from kafka.errors import UnknownTopicOrPartitionError

    dirs = [tmp_path / "disk0", tmp_path / "disk1"]
    config = {"log.dirs": ",".join(str(d) for d in dirs), "offsets.topic.num.partitions": "1"}
    with BrokerThread(config) as broker:
        assert alter_log_dir(broker.bootstrap, "later", 0, str(dirs[1])) is (
            UnknownTopicOrPartitionError
        )
        create_topics(broker.bootstrap, {"later": 2})
        # Without the preference both would spread from disk0 (the least loaded, first).
        assert (dirs[1] / "later-0").is_dir() and not (dirs[0] / "later-0").exists()
        assert (dirs[0] / "later-1").is_dir()
        assert where(broker.bootstrap, "later", 0) == {str(dirs[1]): False}
        assert alter_log_dir(broker.bootstrap, "later", 0, str(dirs[1])) is NoError


def test_a_throttled_move_copies_at_its_pace(tmp_path):
    """replica.alter.log.dirs.io.max.bytes.per.second (what kafka-reassign-partitions
    --replica-alter-log-dirs-throttle sets, a dynamic broker config): the move copies at
    about that rate, and the records are all there after it."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    dirs = [tmp_path / "disk0", tmp_path / "disk1"]
    config = {
        "log.dirs": ",".join(str(d) for d in dirs),
        "log.segment.bytes": str(1 << 20),
        "offsets.topic.num.partitions": "1",
    }
    with BrokerThread(config) as broker:
        create_topics(broker.bootstrap, {TOPIC: 1})
        (source,) = [d for d in dirs if partition_dirs(d)]
        (target,) = [d for d in dirs if d != source]
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        for i in range(6000):
            producer.produce(TOPIC, b"v%08d" % i + b"." * 500, partition=0)
            if i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(30) == 0
        size = sum(p.stat().st_size for p in (source / f"{TOPIC}-0").glob("*.log"))
        assert size > 3_000_000

        rate = 600_000
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        key = "replica.alter.log.dirs.io.max.bytes.per.second"
        resource = ConfigResource(
            ConfigResource.Type.BROKER,
            str(broker.config.node_id),
            incremental_configs=[
                ConfigEntry(key, str(rate), incremental_operation=AlterConfigOpType.SET)
            ],
        )
        admin.incremental_alter_configs([resource])[resource].result(30)
        started = time.monotonic()
        code, replicas = alter_and_describe(broker.port, str(target))
        assert code == 0
        assert replicas == {str(source): False, str(target): True}
        # Two seconds in, still copying (unthrottled, 3 MB takes a fraction of a second).
        time.sleep(2)
        assert where(broker.bootstrap, TOPIC, 0) == {str(source): False, str(target): True}
        deadline = time.monotonic() + 60
        while where(broker.bootstrap, TOPIC, 0) != {str(target): False}:
            assert time.monotonic() < deadline, "the move did not finish"
            time.sleep(0.05)
        took = time.monotonic() - started
        # A lower bound only: a first window's worth goes at once, the rest at the rate.
        assert took > (size - 1_048_576) / rate, took
        values = read_all(broker.bootstrap, 6000)
        assert values == {i: b"v%08d" % i + b"." * 500 for i in range(6000)}
