"""Topics in a cluster: created from any broker through ZooKeeper, partitions made by the
controller (state znodes, UpdateMetadata), described the same by every broker."""

from __future__ import annotations

import base64
import socket
import uuid
from collections import Counter

import pytest
from clustertest_helpers import all_see, eventually, metadata
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic
from wire import request_of, roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.metadata_request import MetadataRequestTopic
from trio_broker.testing import KafkaCluster


def _topic_id(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def _described(bootstrap: str, topic: str) -> dict[int, tuple]:
    """partition -> (error, leader, leader epoch, replicas, isr, offline) by one broker."""
    for t in metadata(bootstrap).topics:
        if t.name == topic:
            return {
                p.partition_index: (
                    p.error_code,
                    p.leader_id,
                    p.leader_epoch,
                    p.replica_nodes,
                    p.isr_nodes,
                    p.offline_replicas,
                )
                for p in t.partitions
            }
    return {}


def _describe_topic_partitions(
    bootstrap: str, names: list[str] | None = None, limit: int = 2000
) -> list[tuple[list, object]]:
    """Every page of DescribeTopicPartitions (v0) from one broker: [(topics, next cursor)]."""
    from trio_broker.protocol._generated.describe_topic_partitions_request import (
        Cursor,
        TopicRequest,
    )

    host, port = bootstrap.rsplit(":", 1)
    pages = []
    cursor = None
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        while True:
            request = request_of(
                75,
                topics=[TopicRequest(name=n) for n in names or []],
                response_partition_limit=limit,
                cursor=cursor,
            )
            answer = roundtrip(sock, request, 0)
            pages.append((answer.topics, answer.next_cursor))
            if answer.next_cursor is None:
                return pages
            c = answer.next_cursor
            cursor = Cursor(topic_name=c.topic_name, partition_index=c.partition_index)


def _zk_partitions(zk_view, topic: str) -> dict[int, tuple]:
    """partition -> (leader, leader epoch, replicas, isr) as ZooKeeper holds them."""
    assignment = zk_view.json(f"/brokers/topics/{topic}")["partitions"]
    out = {}
    for p, replicas in assignment.items():
        state = zk_view.json(f"/brokers/topics/{topic}/partitions/{p}/state")
        out[int(p)] = (state["leader"], state["leader_epoch"], replicas, state["isr"])
    return out


def test_topics_created_on_any_broker_are_replicated_and_described_everywhere(
    kafka_cluster, zk_view
):
    brokers = kafka_cluster.brokers
    all_see(brokers)
    admin = AdminClient({"bootstrap.servers": brokers[2].bootstrap})
    futures = admin.create_topics(
        [NewTopic("orders", 6, 3, config={"retention.ms": "100000"})], operation_timeout=15
    )
    futures["orders"].result()
    # kafka-python's admin client, on another broker.
    kp = KafkaAdminClient(bootstrap_servers=brokers[3].bootstrap, request_timeout_ms=15000)
    try:
        kp.create_topics([KpNewTopic("events", 3, 2)], timeout_ms=15000)
    finally:
        kp.close()

    # ZooKeeper holds Kafka's layout: the config, the assignment with a topic id, and one
    # state znode per partition written by the controller (epoch 0, ISR = all replicas).
    assert zk_view.json("/config/topics/orders") == {
        "version": 1,
        "config": {"retention.ms": "100000"},
    }
    topic_znode = zk_view.json("/brokers/topics/orders")
    assert topic_znode["version"] == 3
    controller_epoch = zk_view.controller_epoch()
    orders = _zk_partitions(zk_view, "orders")
    assert sorted(orders) == list(range(6))
    for p, (leader, epoch, replicas, isr) in orders.items():
        assert sorted(replicas) == [1, 2, 3]
        assert (leader, epoch, isr) == (replicas[0], 0, replicas)
        state = zk_view.json(f"/brokers/topics/orders/partitions/{p}/state")
        assert state["controller_epoch"] == controller_epoch and state["version"] == 1
    # Kafka's round robin: leaders (preferred replicas) spread evenly over the brokers.
    assert Counter(leader for leader, *_ in orders.values()) == {1: 2, 2: 2, 3: 2}
    events = _zk_partitions(zk_view, "events")
    assert all(len(r) == 2 and len(set(r)) == 2 for _, _, r, _ in events.values())
    assert sorted(Counter(leader for leader, *_ in events.values()).values()) == [1, 1, 1]

    # Every broker's Metadata says the same: leaders, epochs, replicas, ISR, topic id.
    expected = {p: (0, leader, 0, r, isr, []) for p, (leader, _, r, isr) in orders.items()}
    topic_id = _topic_id(topic_znode["topic_id"])
    for broker in brokers.values():
        eventually(
            lambda b=broker: _described(b.bootstrap, "orders") == expected,
            budget_s=10,
            what=f"orders described by {broker.bootstrap}",
        )
        (t,) = [t for t in metadata(broker.bootstrap).topics if t.name == "orders"]
        assert t.topic_id == topic_id
        md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
        got = {p: (m.leader, m.replicas, m.isrs) for p, m in md.topics["events"].partitions.items()}
        assert got == {p: (leader, r, isr) for p, (leader, _, r, isr) in events.items()}

    # DescribeTopicPartitions says the same, a page of partitions at a time.
    pages = _describe_topic_partitions(brokers[3].bootstrap, limit=4)
    assert [
        [(t.name, [p.partition_index for p in t.partitions]) for t in topics] for topics, _ in pages
    ] == [
        [("events", [0, 1, 2]), ("orders", [0])],
        [("orders", [1, 2, 3, 4])],
        [("orders", [5])],
    ]
    assert [(c.topic_name, c.partition_index) if c else None for _, c in pages] == [
        ("orders", 1),
        ("orders", 5),
        None,
    ]
    paged = {p.partition_index: p for topics, _ in pages for t in topics if t.name == "orders"
             for p in t.partitions}  # fmt: skip
    assert {
        p: (m.error_code, m.leader_id, m.leader_epoch, m.replica_nodes, m.isr_nodes, m.offline_replicas)
        for p, m in paged.items()
    } == expected  # fmt: skip
    ((unknown,), _) = _describe_topic_partitions(brokers[1].bootstrap, ["nope"])[0]
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    # Replication above the live brokers, and a name taken: Kafka's errors, from any broker.
    other = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
    futures = other.create_topics(
        [NewTopic("too-many", 1, 4), NewTopic("orders", 1, 1)], operation_timeout=15
    )
    with pytest.raises(KafkaException) as info:
        futures["too-many"].result()
    assert info.value.args[0].code() == ErrorCode.INVALID_REPLICATION_FACTOR
    with pytest.raises(KafkaException) as info:
        futures["orders"].result()
    assert info.value.args[0].code() == ErrorCode.TOPIC_ALREADY_EXISTS
    assert zk_view.exists("/brokers/topics/too-many") is None


def test_explicit_assignments_and_auto_creation(kafka_cluster, zk_view):
    brokers = kafka_cluster.brokers
    all_see(brokers)
    admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
    futures = admin.create_topics(
        [NewTopic("manual", 3, replica_assignment=[[2, 3], [3, 1], [1, 2]])], operation_timeout=15
    )
    futures["manual"].result()
    assert _zk_partitions(zk_view, "manual") == {
        0: (2, 0, [2, 3], [2, 3]),
        1: (3, 0, [3, 1], [3, 1]),
        2: (1, 0, [1, 2], [1, 2]),
    }
    # An assignment naming a broker that is not registered is refused.
    futures = admin.create_topics(
        [NewTopic("ghost", 1, replica_assignment=[[1, 9]])], operation_timeout=15
    )
    with pytest.raises(KafkaException) as info:
        futures["ghost"].result()
    assert info.value.args[0].code() == ErrorCode.INVALID_REPLICA_ASSIGNMENT

    # Auto-creation by Metadata: LEADER_NOT_AVAILABLE at first (Kafka's answer), then the
    # topic with default.replication.factor (1) and num.partitions (1).
    host, port = brokers[3].bootstrap.rsplit(":", 1)
    request = request_of(
        3, topics=[MetadataRequestTopic(name="auto")], allow_auto_topic_creation=True
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        first = roundtrip(sock, request, 12)
    assert first.topics[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE
    described = eventually(
        lambda: _described(brokers[2].bootstrap, "auto"), budget_s=10, what="auto"
    )
    ((error, leader, epoch, replicas, isr, offline),) = described.values()
    assert (error, epoch, replicas, isr, offline) == (0, 0, [leader], [leader], [])


def test_rack_aware_assignment_and_internal_topics(zookeeper, tmp_path, zk_view):
    overrides = {"offsets.topic.num.partitions": "6"}
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=0, overrides=overrides) as cluster:
        for node_id, rack in ((1, "a"), (2, "a"), (3, "b")):
            cluster.add_broker(node_id, {"broker.rack": rack})
        racks = {1: "a", 2: "a", 3: "b"}
        all_see(cluster.brokers)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("racked", 6, 2)], operation_timeout=15)["racked"].result()
        for _, _, replicas, _ in _zk_partitions(zk_view, "racked").values():
            assert {racks[b] for b in replicas} == {"a", "b"}

        # __consumer_offsets is created on first FindCoordinator, with
        # offsets.topic.replication.factor (Kafka's default, 3) and its partition count.
        def coordinator() -> int:
            host, port = cluster.brokers[1].bootstrap.rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                found = roundtrip(sock, request_of(10, key="g", key_type=0), 3)
            return found.error_code == 0 and found.node_id >= 0

        eventually(coordinator, budget_s=15, what="a group coordinator")
        offsets = _zk_partitions(zk_view, "__consumer_offsets")
        assert sorted(offsets) == list(range(6))
        assert all(sorted(r) == [1, 2, 3] for _, _, r, _ in offsets.values())
        config = zk_view.json("/config/topics/__consumer_offsets")["config"]
        assert config["cleanup.policy"] == "compact"

        # Every broker's Metadata names the topic whole once the controller's UpdateMetadata
        # reached it (never some of its partitions: LeaderAndIsr does not fill the cache).
        def internal(node: int) -> list:
            return [t for t in metadata(cluster.brokers[node].bootstrap).topics if t.is_internal]

        for node in (1, 2, 3):
            (t,) = eventually(lambda n=node: internal(n), budget_s=15, what="the topic")
            assert t.name == "__consumer_offsets" and len(t.partitions) == 6, node


def test_internal_topic_waits_for_enough_brokers(zookeeper, tmp_path, zk_view):
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=2) as cluster:
        all_see(cluster.brokers)
        host, port = cluster.brokers[1].bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            found = roundtrip(sock, request_of(10, key="g", key_type=0), 3)
        # Two brokers alive, replication factor 3: refused, as Kafka does.
        assert found.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert zk_view.exists("/brokers/topics/__consumer_offsets") is None
