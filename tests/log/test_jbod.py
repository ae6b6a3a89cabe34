"""Several log directories (JBOD, issue 17 item 5): placement, checkpoints, restart and
DescribeLogDirs, with confluent-kafka's and kafka-python's admin clients."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

from trio_broker.testing import BrokerThread


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()])
    for future in futures.values():
        future.result(timeout=30)


def partition_dirs(log_dir: Path) -> set[str]:
    return {
        p.name
        for p in log_dir.iterdir()
        if p.is_dir() and p.name.rpartition("-")[2].isdigit() and not p.name.startswith("__")
    }


def describe_log_dirs_raw(bootstrap: str) -> list[dict]:
    """The log dirs of the one broker, as kafka-python's admin reports them."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        (response,) = admin.describe_log_dirs()
    finally:
        admin.close()
    return response["log_dirs"]


def describe_log_dirs(bootstrap: str) -> dict[str, dict[tuple[str, int], int]]:
    """{log dir: {(topic, partition): size}} of the current (not future) replicas."""
    out: dict[str, dict[tuple[str, int], int]] = {}
    for result in describe_log_dirs_raw(bootstrap):
        assert result["error_code"] == 0, result
        parts = out.setdefault(result["log_dir"], {})
        for topic in result["topics"]:
            for p in topic["partitions"]:
                if not p["is_future_key"]:
                    parts[(topic["name"], p["partition_index"])] = p["partition_size"]
    return out


def produce(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for value in values:
        producer.produce(topic, value, partition=partition)
    assert producer.flush(30) == 0


def consume(bootstrap: str, topic: str, partition: int, count: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "jbod", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    out = []
    try:
        while len(out) < count:
            msgs = consumer.consume(count - len(out), timeout=10)
            assert msgs, f"only {len(out)} of {count} records came back"
            for msg in msgs:
                assert msg.error() is None, msg.error()
                out.append(msg.value())
    finally:
        consumer.close()
    return out


def test_partitions_spread_over_log_dirs_and_survive_restart(tmp_path):
    dirs = [tmp_path / f"disk{i}" for i in range(3)]
    config = {
        "log.dirs": ",".join(str(d) for d in dirs),
        "offsets.topic.num.partitions": "1",
    }
    with BrokerThread(config) as broker:
        create_topics(broker.bootstrap, {"a": 4, "b": 2})
        # Each new partition went to the dir with the fewest: 6 over 3 dirs is 2 each.
        counts = Counter({d: len(partition_dirs(d)) for d in dirs})
        assert sorted(counts.values()) == [2, 2, 2], counts
        create_topics(broker.bootstrap, {"c": 1})
        assert sorted(len(partition_dirs(d)) for d in dirs) == [2, 2, 3]
        for partition in range(4):
            produce(
                broker.bootstrap, "a", partition, [b"a%d-%d" % (partition, i) for i in range(10)]
            )
        described = describe_log_dirs(broker.bootstrap)
        assert set(described) == {str(d) for d in dirs}
        for d in dirs:
            on_disk = {tuple(n.rsplit("-", 1)) for n in partition_dirs(d)}
            reported = {(t, str(p)) for (t, p) in described[str(d)] if not t.startswith("__")}
            assert reported == on_disk
        for d, parts in described.items():
            for (topic, partition), size in parts.items():
                expected = sum(
                    f.stat().st_size for f in Path(d, f"{topic}-{partition}").glob("*.log")
                )
                assert size == expected
                if topic == "a":
                    assert size > 0
    # Every dir has its own meta.properties and checkpoint files, and a clean marker.
    ids = set()
    for d in dirs:
        props = (d / "meta.properties").read_text()
        assert "cluster.id=" in props
        ids.add(next(line for line in props.splitlines() if line.startswith("directory.id")))
        for name in (
            "recovery-point-offset-checkpoint",
            "replication-offset-checkpoint",
            "log-start-offset-checkpoint",
            ".kafka_cleanshutdown",
        ):
            assert (d / name).exists(), (d, name)
        checkpoint = (d / "recovery-point-offset-checkpoint").read_text().splitlines()
        assert int(checkpoint[1]) == len(partition_dirs(d)) + sum(
            1 for p in d.iterdir() if p.name.startswith("__consumer_offsets-")
        )
        for line in checkpoint[2:]:
            topic, partition, offset = line.split()
            if topic == "a":
                assert int(offset) == 10
    assert len(ids) == 3  # a directory id of its own each

    with BrokerThread(config) as broker:
        for partition in range(4):
            assert consume(broker.bootstrap, "a", partition, 10) == [
                b"a%d-%d" % (partition, i) for i in range(10)
            ]
        described = describe_log_dirs(broker.bootstrap)
        assert sum(1 for parts in described.values() for t, _ in parts if t in "abc") == 7
