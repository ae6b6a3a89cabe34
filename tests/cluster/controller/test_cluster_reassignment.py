"""Partition reassignment online (AlterPartitionReassignments, ListPartitionReassignments),
as kafka-reassign-partitions drives it: the target replicas are added, and once the
leader reports them in the ISR the old ones are dropped."""

from __future__ import annotations

import socket

from clustertest_helpers import all_see, eventually, metadata
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient
from wire import request_of, roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.alter_partition_reassignments_request import (
    ReassignablePartition,
    ReassignableTopic,
)
from trio_broker.protocol._generated.list_partition_reassignments_request import (
    ListPartitionReassignmentsTopics,
)


def _call(bootstrap: str, request, version: int = 0):
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        return roundtrip(sock, request, version)


def _reassign(bootstrap: str, topic: str, partition: int, replicas: list[int] | None):
    request = request_of(
        45,
        topics=[
            ReassignableTopic(
                name=topic,
                partitions=[ReassignablePartition(partition_index=partition, replicas=replicas)],
            )
        ],
    )
    answer = _call(bootstrap, request)
    assert answer.error_code == 0, answer
    ((result,),) = [t.partitions for t in answer.responses]
    return result.error_code


def _ongoing(bootstrap: str, topics=None) -> dict:
    answer = _call(bootstrap, request_of(46, topics=topics))
    assert answer.error_code == 0
    return {
        (t.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
        for t in answer.topics
        for p in t.partitions
    }


def test_reassignment_adds_then_drops_replicas(zookeeper, tmp_path, zk_view):
    from trio_broker.testing import KafkaCluster

    # Broker processes with long sessions: a replica frozen (SIGSTOP) stays registered but
    # cannot catch up, so a reassignment to it stays in progress until it is resumed.
    with KafkaCluster(
        zookeeper,
        base_dir=tmp_path,
        size=3,
        processes=True,
        overrides={"zookeeper.session.timeout.ms": "30000"},
    ) as cluster:
        _reassignment_adds_then_drops_replicas(cluster, zk_view)


def _reassignment_adds_then_drops_replicas(cluster, zk_view):
    brokers = cluster.brokers
    all_see(brokers)
    # The replica added (`new`) is frozen on the way, so it must not be the controller,
    # which answers the reassignment requests; `a` and `b` hold the topic at first.
    controller_id = zk_view.controller()
    new = max(n for n in brokers if n != controller_id)
    a, b = sorted(n for n in brokers if n != new)
    admin = AdminClient({"bootstrap.servers": brokers[a].bootstrap})
    admin.create_topics([NewTopic("moving", 2, replica_assignment=[[a, b], [b, a]])])[
        "moving"
    ].result()
    controller = brokers[controller_id]
    other = next(broker for n, broker in brokers.items() if n not in (controller_id, new))

    # Only the controller serves it; bad targets get Kafka's errors.
    answer = _call(other.bootstrap, request_of(45, topics=[]))
    assert answer.error_code == ErrorCode.NOT_CONTROLLER
    assert (
        _reassign(controller.bootstrap, "moving", 0, [a, 9]) == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    )
    assert (
        _reassign(controller.bootstrap, "moving", 7, [a, b]) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )
    assert (
        _reassign(controller.bootstrap, "moving", 0, None) == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    )

    # Partition 0 from [a, b] to [new, b]: new is added, a is to go once new is in the ISR.
    brokers[new].pause()
    assert _reassign(controller.bootstrap, "moving", 0, [new, b]) == ErrorCode.NONE
    topic = zk_view.json("/brokers/topics/moving")
    assert topic["partitions"]["0"] == [new, b, a]
    assert (topic["adding_replicas"], topic["removing_replicas"]) == ({"0": [new]}, {"0": [a]})
    state = zk_view.json("/brokers/topics/moving/partitions/0/state")
    assert (state["leader"], state["leader_epoch"], state["isr"]) == (a, 1, [a, b])
    assert _ongoing(controller.bootstrap) == {("moving", 0): ([new, b, a], [new], [a])}
    wanted = [ListPartitionReassignmentsTopics(name="moving", partition_indexes=[1])]
    assert _ongoing(controller.bootstrap, wanted) == {}
    for broker in (brokers[a], brokers[b]):
        eventually(
            lambda broker=broker: [
                p.replica_nodes for t in metadata(broker.bootstrap).topics for p in t.partitions
                if (t.name, p.partition_index) == ("moving", 0)
            ] == [[new, b, a]],
            budget_s=10,
            what=f"{broker.bootstrap} describes the replicas being added",
        )  # fmt: skip

    # new resumes and catches up, the leader adds it to the ISR: the reassignment completes.
    # a (the leader) is not in the target, so new, the first target replica in the ISR,
    # leads; a leaves the ISR.
    brokers[new].resume()
    state = eventually(
        lambda: (
            (s := zk_view.json("/brokers/topics/moving/partitions/0/state"))["leader"] == new and s
        ),
        budget_s=10,
        what="the reassignment completed",
    )
    assert (state["leader_epoch"], sorted(state["isr"])) == (2, sorted([b, new]))
    # The controller writes the partition's state, then the topic's assignment (Kafka's
    # order too): the assignment may trail the state seen above by a ZooKeeper write.
    topic = eventually(
        lambda: (
            (t := zk_view.json("/brokers/topics/moving"))["partitions"]
            == {"0": [new, b], "1": [b, a]}
            and _ongoing(controller.bootstrap) == {}
            and t
        ),
        budget_s=10,
        what="the assignment written without the replica removed",
    )
    assert (topic["adding_replicas"], topic["removing_replicas"]) == ({}, {})
    for broker in brokers.values():
        eventually(
            lambda broker=broker: [
                (p.leader_id, p.replica_nodes) for t in metadata(broker.bootstrap).topics
                for p in t.partitions if (t.name, p.partition_index) == ("moving", 0)
            ] == [(new, [new, b])],
            budget_s=10,
            what=f"{broker.bootstrap} describes the new replicas",
        )  # fmt: skip

    # With kafka-python's admin client (it finds the controller itself): a reassignment
    # cancelled before it completes goes back to the original replicas.
    kp = KafkaAdminClient(bootstrap_servers=other.bootstrap, request_timeout_ms=15000)
    # Its first controller request finds (and keeps) the controller, with every broker
    # running: it asks the least loaded broker, which could otherwise be the frozen one.
    assert kp.list_partition_reassignments() == {}
    brokers[new].pause()  # so that it does not catch up before the cancellation
    try:
        tp = KpTopicPartition("moving", 1)
        assert kp.alter_partition_reassignments({tp: [new, a]}) == {tp: None}
        assert kp.list_partition_reassignments() == {
            tp: {"replicas": [new, a, b], "adding_replicas": [new], "removing_replicas": [b]}
        }
        assert kp.alter_partition_reassignments({tp: None}) == {tp: None}
        assert kp.list_partition_reassignments() == {}
    finally:
        kp.close()
        brokers[new].resume()
    topic = zk_view.json("/brokers/topics/moving")
    # The original replicas as Kafka derives them (replicas minus adding), so in RS order.
    assert topic["partitions"]["1"] == [a, b]
    assert (topic["adding_replicas"], topic["removing_replicas"]) == ({}, {})
    assert _ongoing(controller.bootstrap) == {}
    assert zk_view.json("/brokers/topics/moving/partitions/1/state")["leader"] == b


def test_a_new_controller_completes_an_ongoing_reassignment(zookeeper, tmp_path, zk_view):
    from trio_broker.testing import KafkaCluster

    with KafkaCluster(
        zookeeper,
        base_dir=tmp_path,
        size=3,
        processes=True,
        overrides={"zookeeper.session.timeout.ms": "30000"},
    ) as cluster:
        all_see(cluster.brokers)
        first = zk_view.controller()
        keep = [n for n in cluster.brokers if n != first]
        admin = AdminClient({"bootstrap.servers": cluster.brokers[keep[0]].bootstrap})
        admin.create_topics([NewTopic("resumed", 1, replica_assignment=[[keep[0]]])])[
            "resumed"
        ].result()
        cluster.brokers[keep[1]].pause()  # the added replica cannot catch up yet
        assert _reassign(cluster.brokers[first].bootstrap, "resumed", 0, keep) == 0
        assert cluster.brokers.pop(first).stop() == 0
        second = eventually(
            lambda: zk_view.controller() not in (None, first) and zk_view.controller(),
            budget_s=15,
            what="a new controller",
        )
        assert second == keep[0]
        # The new controller read the ongoing reassignment from the topic znode (asked once
        # it serves as controller: it is elected a moment before it starts).
        new_controller = cluster.brokers[second].bootstrap
        ongoing = eventually(
            lambda: (
                _call(new_controller, request_of(46, topics=None)).error_code == 0
                and _ongoing(new_controller)
            ),
            budget_s=10,
            what="the new controller's answer",
        )
        assert ongoing == {("resumed", 0): (keep, [keep[1]], [])}
        cluster.brokers[keep[1]].resume()  # catches up, joins the ISR
        eventually(
            lambda: zk_view.json("/brokers/topics/resumed")["adding_replicas"] == {},
            budget_s=20,
            what="the reassignment completed by the new controller",
        )
        assert zk_view.json("/brokers/topics/resumed")["partitions"] == {"0": keep}
