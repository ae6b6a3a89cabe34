"""CreateTopics, DeleteTopics and CreatePartitions through confluent-kafka's and
kafka-python's admin clients, and by raw request where no client reaches."""

from __future__ import annotations

import base64
import socket
import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.errors import (
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicAlreadyExistsError,
)
from wire import request_of, roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.create_topics_request import (
    CreatableTopic,
    CreatableTopicConfig,
)
from trio_broker.protocol._generated.delete_topics_request import DeleteTopicState

TIMEOUT = 30


def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def error_of(future) -> int:
    with pytest.raises(KafkaException) as info:
        future.result(TIMEOUT)
    return info.value.args[0].code()


def wait_until(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def partition_dirs(broker, topic: str) -> list[str]:
    return sorted(p.name for p in broker.log_dir.iterdir() if p.name.startswith(f"{topic}-"))


def raw(broker, api_key: int, version: int, **fields):
    with socket.create_connection((broker.host, broker.port), timeout=TIMEOUT) as sock:
        return roundtrip(sock, request_of(api_key, **fields), version)


def test_create_topics_confluent(kafka_broker):
    client = admin(kafka_broker)
    futures = client.create_topics(
        [
            NewTopic(
                "orders", 3, 1, config={"retention.ms": "3600000", "cleanup.policy": "compact"}
            ),
            NewTopic("bad/name", 1, 1),
            NewTopic("three-replicas", 1, 3),
            NewTopic("bad-config", 1, 1, config={"retention.ms": "soon"}),
            NewTopic("unknown-config", 1, 1, config={"no.such.key": "1"}),
            NewTopic("zero-partitions", 0, 1),
        ]
    )
    futures["orders"].result(TIMEOUT)
    assert error_of(futures["bad/name"]) == KafkaError.TOPIC_EXCEPTION
    assert error_of(futures["three-replicas"]) == KafkaError.INVALID_REPLICATION_FACTOR
    assert error_of(futures["bad-config"]) == KafkaError.INVALID_CONFIG
    assert error_of(futures["unknown-config"]) == KafkaError.INVALID_CONFIG
    assert error_of(futures["zero-partitions"]) == KafkaError.INVALID_PARTITIONS
    assert partition_dirs(kafka_broker, "orders") == ["orders-0", "orders-1", "orders-2"]
    # Only the good topic exists; the broker still serves.
    topics = client.list_topics(timeout=TIMEOUT).topics
    assert "orders" in topics and len(topics["orders"].partitions) == 3
    assert not {"bad/name", "three-replicas", "bad-config", "zero-partitions"} & set(topics)
    # A second create of the same name.
    again = client.create_topics([NewTopic("orders", 1, 1)])
    assert error_of(again["orders"]) == KafkaError.TOPIC_ALREADY_EXISTS


def test_created_partitions_hold_kafkas_files_and_keep_their_topic_id(kafka_broker):
    """Each partition of a new topic is a directory with its first segment and a
    partition.metadata naming the topic id the broker answered (created together, fsynced
    together: see checkpoints.PendingSyncs), and a restart finds the same id."""
    response = raw(
        kafka_broker,
        19,
        7,
        topics=[CreatableTopic(name="ids", num_partitions=4, replication_factor=1)],
        timeout_ms=10000,
    )
    (created,) = response.topics
    assert created.error_code == ErrorCode.NONE
    encoded = base64.urlsafe_b64encode(created.topic_id.bytes).rstrip(b"=").decode()
    assert partition_dirs(kafka_broker, "ids") == [f"ids-{p}" for p in range(4)]
    for p in range(4):
        d = kafka_broker.log_dir / f"ids-{p}"
        assert (d / "partition.metadata").read_text() == f"version: 0\ntopic_id: {encoded}"
        assert {"00000000000000000000.log", "00000000000000000000.index"} <= {
            f.name for f in d.iterdir()
        }
        assert not [f.name for f in d.iterdir() if f.name.endswith(".tmp")]
    kafka_broker.restart()
    meta = raw(kafka_broker, 3, 12, topics=None, allow_auto_topic_creation=False)
    assert {t.name: t.topic_id for t in meta.topics}["ids"] == created.topic_id


def test_create_validate_only_creates_nothing(kafka_broker):
    client = admin(kafka_broker)
    futures = client.create_topics([NewTopic("dry-run", 2, 1)], validate_only=True)
    futures["dry-run"].result(TIMEOUT)
    assert partition_dirs(kafka_broker, "dry-run") == []
    assert "dry-run" not in client.list_topics(timeout=TIMEOUT).topics
    bad = client.create_topics([NewTopic("dry-run", 2, 3)], validate_only=True)
    assert error_of(bad["dry-run"]) == KafkaError.INVALID_REPLICATION_FACTOR


def test_create_raw_v7_reports_configs_and_duplicates(kafka_broker):
    response = raw(
        kafka_broker,
        19,
        7,
        topics=[
            CreatableTopic(
                name="with-configs",
                num_partitions=-1,
                replication_factor=-1,
                configs=[CreatableTopicConfig(name="retention.ms", value="1000")],
            ),
            CreatableTopic(name="twice", num_partitions=1, replication_factor=1),
            CreatableTopic(name="twice", num_partitions=2, replication_factor=1),
            CreatableTopic(name="a" * 250, num_partitions=1, replication_factor=1),
        ],
        timeout_ms=10000,
    )
    by_name = {t.name: t for t in response.topics}
    created = by_name["with-configs"]
    assert created.error_code == ErrorCode.NONE
    assert created.topic_id != uuid.UUID(int=0)
    assert (created.num_partitions, created.replication_factor) == (1, 1)  # broker defaults
    configs = {c.name: c for c in created.configs}
    assert configs["retention.ms"].value == "1000"
    assert configs["retention.ms"].config_source == 1  # TOPIC_CONFIG
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["segment.bytes"].config_source == 5  # DEFAULT_CONFIG
    assert by_name["twice"].error_code == ErrorCode.INVALID_REQUEST
    assert by_name["a" * 250].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "249" in by_name["a" * 250].error_message
    assert partition_dirs(kafka_broker, "twice") == []


def test_kafka_python_create_and_delete(kafka_broker_factory):
    broker = kafka_broker_factory({"file.delete.delay.ms": "0"})
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        client.create_topics({"kp-topic": {"num_partitions": 2, "replication_factor": 1}})
        with pytest.raises(TopicAlreadyExistsError):
            client.create_topics({"kp-topic": {"num_partitions": 2, "replication_factor": 1}})
        with pytest.raises(InvalidReplicationFactorError):
            client.create_topics({"kp-rf3": {"num_partitions": 1, "replication_factor": 3}})
        with pytest.raises(InvalidTopicError):
            client.create_topics({"..": {"num_partitions": 1, "replication_factor": 1}})
        assert partition_dirs(broker, "kp-topic") == ["kp-topic-0", "kp-topic-1"]
        client.delete_topics(["kp-topic"])
        assert "kp-topic" not in client.list_topics()
        wait_until(lambda: not any(broker.log_dir.glob("kp-topic-*")), "partition dirs removed")
    finally:
        client.close()


def test_delete_topics_confluent_and_by_id(kafka_broker_factory):
    broker = kafka_broker_factory({"file.delete.delay.ms": "0"})
    client = admin(broker)
    for f in client.create_topics([NewTopic("by-name", 2, 1), NewTopic("by-id", 1, 1)]).values():
        f.result(TIMEOUT)
    client.delete_topics(["by-name"])["by-name"].result(TIMEOUT)
    assert (
        error_of(client.delete_topics(["by-name"])["by-name"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    )
    # By id: the id from CreateTopics/Metadata, through a raw v6 request.
    meta = raw(broker, 3, 12, topics=None, allow_auto_topic_creation=False)
    topic_id = {t.name: t.topic_id for t in meta.topics}["by-id"]
    response = raw(
        broker, 20, 6, topics=[DeleteTopicState(name=None, topic_id=topic_id)], timeout_ms=5000
    )
    (result,) = response.responses
    assert (result.error_code, result.name, result.topic_id) == (ErrorCode.NONE, "by-id", topic_id)
    again = raw(
        broker, 20, 6, topics=[DeleteTopicState(name=None, topic_id=topic_id)], timeout_ms=5000
    )
    assert again.responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    wait_until(
        lambda: not any(broker.log_dir.glob("by-*")), "partition dirs (and -delete dirs) removed"
    )
    assert set(client.list_topics(timeout=TIMEOUT).topics) & {"by-name", "by-id"} == set()


def test_deleted_topic_is_gone_after_restart(kafka_broker):
    client = admin(kafka_broker)
    for f in client.create_topics([NewTopic("keep", 1, 1), NewTopic("drop", 1, 1)]).values():
        f.result(TIMEOUT)
    client.delete_topics(["drop"])["drop"].result(TIMEOUT)
    kafka_broker.restart()
    topics = admin(kafka_broker).list_topics(timeout=TIMEOUT).topics
    assert "keep" in topics and "drop" not in topics
    assert not any(kafka_broker.log_dir.glob("drop-*"))


def test_create_partitions(kafka_broker):
    client = admin(kafka_broker)
    client.create_topics([NewTopic("grow", 2, 1)])["grow"].result(TIMEOUT)
    dry = client.create_partitions([NewPartitions("grow", 4)], validate_only=True)
    dry["grow"].result(TIMEOUT)
    assert partition_dirs(kafka_broker, "grow") == ["grow-0", "grow-1"]
    client.create_partitions([NewPartitions("grow", 4)])["grow"].result(TIMEOUT)
    assert partition_dirs(kafka_broker, "grow") == ["grow-0", "grow-1", "grow-2", "grow-3"]
    shrink = client.create_partitions([NewPartitions("grow", 3)])
    assert error_of(shrink["grow"]) == KafkaError.INVALID_PARTITIONS
    missing = client.create_partitions([NewPartitions("no-such-topic", 3)])
    assert error_of(missing["no-such-topic"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    kafka_broker.restart()
    topics = admin(kafka_broker).list_topics(timeout=TIMEOUT).topics
    assert len(topics["grow"].partitions) == 4
    kp = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        kp.create_partitions({"grow": 6})
    finally:
        kp.close()
    assert len(partition_dirs(kafka_broker, "grow")) == 6


def test_a_request_creates_at_most_ten_thousand_partitions(kafka_broker):
    # Kafka 4's bound: a request that would create more is refused whole (every topic
    # POLICY_VIOLATION), before anything is made; a few bytes must not make the broker
    # create 2**31 - 1 partition directories.
    client = admin(kafka_broker)
    asked = client.create_topics([NewTopic("small", 2, 1), NewTopic("huge", 50_000, 1)])
    assert error_of(asked["small"]) == KafkaError.POLICY_VIOLATION
    assert error_of(asked["huge"]) == KafkaError.POLICY_VIOLATION
    with socket.create_connection((kafka_broker.host, kafka_broker.port), timeout=TIMEOUT) as s:
        raw = roundtrip(
            s,
            request_of(
                19,
                topics=[
                    CreatableTopic(name="huge", num_partitions=2**31 - 1, replication_factor=1)
                ],
                timeout_ms=5000,
            ),
            7,
        )
    assert [(t.name, t.error_code) for t in raw.topics] == [("huge", ErrorCode.POLICY_VIOLATION)]
    many = client.create_topics([NewTopic(f"many-{i}", 2_001, 1) for i in range(5)])
    assert {error_of(f) for f in many.values()} == {KafkaError.POLICY_VIOLATION}
    assert not [
        p for p in kafka_broker.log_dir.iterdir() if p.name.startswith(("small", "huge", "many"))
    ]

    client.create_topics([NewTopic("grown", 1, 1)])["grown"].result(TIMEOUT)
    grow = client.create_partitions([NewPartitions("grown", 20_000)])
    assert error_of(grow["grown"]) == KafkaError.POLICY_VIOLATION
    assert partition_dirs(kafka_broker, "grown") == ["grown-0"]
    # Within the bound, as before.
    client.create_partitions([NewPartitions("grown", 3)])["grown"].result(TIMEOUT)
    assert partition_dirs(kafka_broker, "grown") == ["grown-0", "grown-1", "grown-2"]
