"""Clients of every Kafka generation against one broker: kafka-python pinned to the API
versions of Kafka 0.9 (message format 0), 0.10.0 and 0.10.1 (format 1) and 0.11 (format 2),
with every codec those formats have; old and new producers and consumers on one topic;
kcat told that the broker is Kafka 0.9 (no ApiVersions request)."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from trio_broker.testing import BrokerThread

TIMEOUT = 60
GENERATIONS = [(0, 9), (0, 10, 0), (0, 10, 1), (0, 11)]
COUNT = 20


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    props = {
        "log.dirs": str(tmp_path_factory.mktemp("old-clients")),
        "num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    with BrokerThread(props) as b:
        yield b


def _have_xxhash() -> bool:
    try:
        import xxhash  # noqa: F401
    except ImportError:
        return False
    return True


def old_produce(bootstrap: str, topic: str, api_version, codec, records) -> list[int]:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, api_version=api_version, compression_type=codec, linger_ms=5
    )
    futures = [producer.send(topic, key=k, value=v, partition=0) for k, v in records]
    producer.flush(TIMEOUT)
    offsets = [f.get(TIMEOUT).offset for f in futures]
    producer.close(TIMEOUT)
    return offsets


def old_consume(bootstrap: str, topic: str, api_version, count: int) -> list:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, api_version=api_version, enable_auto_commit=False
    )
    tp = KpTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    out = []
    deadline = time.monotonic() + TIMEOUT
    while len(out) < count and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            out.extend(batch)
    consumer.close()
    return out


def new_produce(bootstrap: str, topic: str, records) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    errors = []
    for k, v in records:
        producer.produce(
            topic, key=k, value=v, partition=0, on_delivery=lambda e, m: errors.append(e)
        )
    assert producer.flush(TIMEOUT) == 0
    assert errors == [None] * len(records)


def new_consume(bootstrap: str, topic: str, count: int) -> list:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "new-reader", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + TIMEOUT
    while len(out) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            out.append(msg)
    consumer.close()
    return out


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4"])
@pytest.mark.parametrize("api_version", GENERATIONS, ids=lambda v: ".".join(map(str, v)))
def test_kafka_python_of_each_generation_produces_and_consumes(broker, api_version, codec):
    if codec == "lz4" and api_version < (0, 10) and not _have_xxhash():
        pytest.skip("kafka-python writes magic 0 LZ4 only with xxhash installed")
    topic = f"gen-{'-'.join(map(str, api_version))}-{codec}"
    records = [(b"k%d" % i, b"value %d" % i * (i + 1)) for i in range(COUNT)]
    before = time.time() * 1000
    assert old_produce(broker.bootstrap, topic, api_version, codec, records) == list(range(COUNT))
    got = old_consume(broker.bootstrap, topic, api_version, COUNT)
    assert [(m.offset, m.key, m.value) for m in got] == [
        (i, k, v) for i, (k, v) in enumerate(records)
    ]
    if api_version < (0, 10):
        # Message format 0 has no timestamps.
        assert {m.timestamp for m in got} in ({None}, {-1})
    else:
        assert all(m.timestamp >= before - 60_000 for m in got)


def test_old_and_new_producers_and_consumers_share_one_topic(broker):
    topic = "mixed-generations"
    expected = []
    for n, api_version in enumerate(GENERATIONS):
        records = [(b"%d-%d" % (n, i), b"from %r" % (api_version,)) for i in range(5)]
        old_produce(broker.bootstrap, topic, api_version, "gzip", records)
        expected += records
    new = [(b"new-%d" % i, b"from librdkafka") for i in range(5)]
    new_produce(broker.bootstrap, topic, new)
    expected += new
    want = [(i, k, v) for i, (k, v) in enumerate(expected)]
    for api_version in GENERATIONS:
        got = old_consume(broker.bootstrap, topic, api_version, len(expected))
        assert [(m.offset, m.key, m.value) for m in got] == want, api_version
    got = new_consume(broker.bootstrap, topic, len(expected))
    assert [(m.offset(), m.key(), m.value()) for m in got] == want


def test_kafka_python_09_consumer_group_commits_where_a_new_one_reads(broker):
    topic = "old-group-topic"
    records = [(b"k%d" % i, b"v%d" % i) for i in range(10)]
    old_produce(broker.bootstrap, topic, (0, 9), None, records)
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        api_version=(0, 9),
        group_id="old-09-group",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    got = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < 10 and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            got.extend(batch)
    consumer.commit()
    consumer.close()
    assert [m.offset for m in got] == list(range(10))
    # JoinGroup v0, SyncGroup v0 and OffsetCommit v2 went to the group coordinator, so a
    # client of today sees the same committed offset.
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "old-09-group"})
    (tp,) = reader.committed([TopicPartition(topic, 0)], timeout=TIMEOUT)
    reader.close()
    assert tp.offset == 10


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_kcat_as_a_kafka_09_client(broker, kcat, codec):
    topic = f"kcat-09-{codec}"
    old = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.9.0.1"]
    lines = "".join(f"k{i}:value {i}\n" for i in range(50))
    subprocess.run(
        [kcat, "-b", broker.bootstrap, *old, "-z", codec, "-P", "-t", topic, "-K", ":"],
        input=lines,
        text=True,
        check=True,
        timeout=TIMEOUT,
    )
    out = subprocess.run(
        [kcat, "-b", broker.bootstrap, *old, "-C", "-t", topic, "-e", "-J", "-o", "beginning"],
        capture_output=True,
        text=True,
        check=True,
        timeout=TIMEOUT,
    )
    msgs = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(m["offset"], m["key"], m["payload"]) for m in msgs] == [
        (i, f"k{i}", f"value {i}") for i in range(50)
    ]


@pytest.mark.parametrize("api_version", [(0, 8, 1), (0, 8, 2)], ids=["0.8.1", "0.8.2"])
def test_kafka_python_08_commits_land_in_the_group_coordinator(broker, api_version):
    """kafka-python as a Kafka 0.8.1 client commits with OffsetCommit v0 (which Kafka 3.9
    kept in ZooKeeper) and 0.8.2 with v1: both go to the group coordinator here, where a
    client of today reads them."""
    name = "-".join(map(str, api_version))
    topic, group = f"old-08-{name}", f"old-08-group-{name}"
    old_produce(broker.bootstrap, topic, (0, 9), None, [(None, b"v%d" % i) for i in range(5)])
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        api_version=api_version,
        group_id=group,
        enable_auto_commit=False,
    )
    tp = KpTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < 5 and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            got.extend(batch)
    consumer.commit()
    assert consumer.committed(tp) == 5
    consumer.close()
    assert [m.value for m in got] == [b"v%d" % i for i in range(5)]
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    (committed,) = reader.committed([TopicPartition(topic, 0)], timeout=TIMEOUT)
    reader.close()
    assert committed.offset == 5
