"""Admin in a cluster beyond creation: DeleteTopics and CreatePartitions from any broker,
preferred leader election (ElectLeaders and auto.leader.rebalance.enable), producer id
blocks from ZooKeeper."""

from __future__ import annotations

import socket
import time

import pytest
from clustertest_helpers import FAST_SESSION, all_see, eventually, metadata
from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from wire import request_of, roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.create_partitions_request import CreatePartitionsTopic
from trio_broker.testing import KafkaCluster


def _states(zk_view, topic: str) -> dict[int, dict]:
    parts = zk_view.json(f"/brokers/topics/{topic}")["partitions"]
    return {int(p): zk_view.json(f"/brokers/topics/{topic}/partitions/{p}/state") for p in parts}


def _topics(bootstrap: str) -> dict[str, int]:
    return {t.name: len(t.partitions) for t in metadata(bootstrap).topics}


def test_delete_topics_and_create_partitions_from_any_broker(shared_cluster, shared_zk_view):
    brokers = shared_cluster.brokers
    all_see(brokers)
    admin = AdminClient({"bootstrap.servers": brokers[3].bootstrap})
    created = admin.create_topics([NewTopic("doomed", 3, 2), NewTopic("growing", 2, 3)])
    for f in created.values():
        f.result()

    # CreatePartitions: 2 -> 4 by the assignment rule, then a 5th on brokers given by hand.
    admin.create_partitions([NewPartitions("growing", 4)], operation_timeout=15)["growing"].result()
    admin.create_partitions(
        [NewPartitions("growing", 5, replica_assignment=[[2, 1, 3]])], operation_timeout=15
    )["growing"].result()
    states = _states(shared_zk_view, "growing")
    assignment = shared_zk_view.json("/brokers/topics/growing")["partitions"]
    assert sorted(states) == [0, 1, 2, 3, 4]
    assert assignment["4"] == [2, 1, 3] and states[4]["leader"] == 2
    for p, replicas in assignment.items():
        assert sorted(replicas) == [1, 2, 3]
        assert states[int(p)]["leader"] == replicas[0] and states[int(p)]["leader_epoch"] == 0
    for b in brokers.values():
        eventually(
            lambda b=b: _topics(b.bootstrap).get("growing") == 5, budget_s=10, what="5 partitions"
        )
    with pytest.raises(KafkaException) as info:
        admin.create_partitions([NewPartitions("growing", 3)])["growing"].result()
    assert info.value.args[0].code() == ErrorCode.INVALID_PARTITIONS

    # DeleteTopics on a broker that is not the controller: gone from its Metadata when the
    # call returns, then from ZooKeeper and from every broker.
    not_controller = next(b for n, b in brokers.items() if n != shared_zk_view.controller())
    other = AdminClient({"bootstrap.servers": not_controller.bootstrap})
    other.delete_topics(["doomed"], operation_timeout=15)["doomed"].result()
    assert "doomed" not in _topics(not_controller.bootstrap)
    for path in ("/brokers/topics/doomed", "/config/topics/doomed", "/admin/delete_topics/doomed"):
        eventually(lambda path=path: shared_zk_view.exists(path) is None, budget_s=10, what=path)
    for b in brokers.values():
        eventually(lambda b=b: "doomed" not in _topics(b.bootstrap), budget_s=10, what="deleted")
    with pytest.raises(KafkaException) as info:
        other.delete_topics(["doomed"], operation_timeout=15)["doomed"].result()
    assert info.value.args[0].code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # The name is free again.
    admin.create_topics([NewTopic("doomed", 1, 3)])["doomed"].result()
    assert sorted(shared_zk_view.json("/brokers/topics/doomed")["partitions"]["0"]) == [1, 2, 3]


def test_names_that_cannot_be_topics_and_a_zero_timeout(shared_cluster, shared_zk_view):
    # A name no topic can have never becomes a ZooKeeper path: the empty name would be
    # /brokers/topics itself, and a NUL or ".." makes the ZooKeeper client raise. Each gets
    # UNKNOWN_TOPIC_OR_PARTITION, and the connection goes on serving. (A fuzzer found
    # both: the handler failed and the broker closed the connection.)
    broker = shared_cluster.brokers[1]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("short-wait", 1, 3)])["short-wait"].result()
    names = ["", "..", "a/b", "bad\x00name", "x" * 300]
    unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    with socket.create_connection((broker.host, broker.port), timeout=20) as sock:
        deleted = roundtrip(sock, request_of(20, topic_names=names, timeout_ms=5000), 4)
        assert [(r.name, r.error_code) for r in deleted.responses] == [(n, unknown) for n in names]
        grown = roundtrip(
            sock,
            request_of(
                37,
                topics=[CreatePartitionsTopic(name=n, count=2, assignments=None) for n in names],
                timeout_ms=5000,
            ),
            2,
            correlation_id=2,
        )
        assert [(r.name, r.error_code) for r in grown.results] == [(n, unknown) for n in names]
        # Kafka: a timeout of 0 or less starts the deletion and answers REQUEST_TIMED_OUT.
        for correlation_id, timeout_ms in ((3, 0), (4, -1)):
            if timeout_ms == -1:
                admin.create_topics([NewTopic("short-wait", 1, 3)])["short-wait"].result()
            answer = roundtrip(
                sock,
                request_of(20, topic_names=["short-wait"], timeout_ms=timeout_ms),
                4,
                correlation_id=correlation_id,
            )
            assert [(r.name, r.error_code) for r in answer.responses] == [
                ("short-wait", ErrorCode.REQUEST_TIMED_OUT)
            ]
            eventually(
                lambda: shared_zk_view.exists("/brokers/topics/short-wait") is None,
                budget_s=15,
                what="deleted anyway",
            )
            eventually(
                lambda: "short-wait" not in _topics(broker.bootstrap), budget_s=15, what="gone"
            )
    assert shared_zk_view.exists("/brokers/topics") is not None


def test_preferred_leaders_come_back_by_election(zookeeper, tmp_path, zk_view):
    overrides = {
        **FAST_SESSION,
        "controlled.shutdown.retry.backoff.ms": "200",
        "leader.imbalance.check.interval.seconds": "1",
    }
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=3, overrides=overrides) as cluster:
        all_see(cluster.brokers)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("pref", 6, 3)])["pref"].result()
        preferred = {p: s["leader"] for p, s in _states(zk_view, "pref").items()}
        led_by_2 = sorted(p for p, leader in preferred.items() if leader == 2)
        cluster.brokers[2].stop()  # controlled shutdown moves its leaderships away
        others = {n: b for n, b in cluster.brokers.items() if n != 2}
        all_see(others, live=[1, 3])
        for p in led_by_2:
            assert _states(zk_view, "pref")[p]["leader"] != 2

        # ElectLeaders while broker 2 is down and out of the ISRs: not available, nothing
        # changes. (Once it runs again, it rejoins the ISRs by itself as soon as it has
        # caught up: the leaders see its fetches.)
        controller = cluster.brokers[zk_view.controller()]
        ctl_admin = AdminClient({"bootstrap.servers": controller.bootstrap})
        partitions = [TopicPartition("pref", p) for p in led_by_2]
        result = ctl_admin.elect_leaders(ElectionType.PREFERRED, partitions).result()
        assert {tp.partition: e.code() for tp, e in result.items()} == dict.fromkeys(
            led_by_2, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        )
        assert all(2 not in _states(zk_view, "pref")[p]["isr"] for p in led_by_2)
        # Back, it catches up and its leaders add it to the ISRs; then the automatic
        # rebalance (every second here) makes it the leader of its partitions again.
        cluster.brokers[2].restart()
        all_see(cluster.brokers)
        eventually(
            lambda: all(_states(zk_view, "pref")[p]["leader"] == 2 for p in led_by_2),
            budget_s=15,
            what="preferred leaders back",
        )
        result = ctl_admin.elect_leaders(ElectionType.PREFERRED, partitions).result()
        assert {tp.partition: e.code() for tp, e in result.items()} == dict.fromkeys(
            led_by_2, ErrorCode.ELECTION_NOT_NEEDED
        )
        for b in cluster.brokers.values():
            eventually(
                lambda b=b: all(
                    p.leader_id == preferred[p.partition_index]
                    for t in metadata(b.bootstrap).topics
                    for p in t.partitions
                ),
                budget_s=10,
                what=f"{b.bootstrap} describes the preferred leaders",
            )


def test_producer_ids_come_in_blocks_from_zookeeper(shared_cluster, shared_zk_view):
    brokers = shared_cluster.brokers
    all_see(brokers)

    def init_producer_id(bootstrap: str) -> list[int]:
        host, port = bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            answer = roundtrip(
                sock,
                request_of(22, transactional_id=None, transaction_timeout_ms=60000),
                2,
            )
        # COORDINATOR_LOAD_IN_PROGRESS until the broker's first block came from ZooKeeper.
        return answer.error_code == 0 and [answer.producer_id]

    ids = {}
    for node_id, broker in brokers.items():
        ids[node_id] = [
            eventually(lambda b=broker: init_producer_id(b.bootstrap), budget_s=10, what="pid")[0]
            for _ in range(3)
        ]
    every = [pid for pids in ids.values() for pid in pids]
    assert len(set(every)) == 9  # unique across the cluster
    for pids in ids.values():
        # Consecutive ids from one block of 1000 per broker, blocks apart.
        assert pids == list(range(pids[0], pids[0] + 3))
        assert pids[0] % 1000 == 0
    latest = shared_zk_view.json("/latest_producer_id_block")
    assert latest["version"] == 1
    assert int(latest["block_end"]) - int(latest["block_start"]) == 999
    assert int(latest["block_end"]) >= max(every)


def test_topic_configs_altered_on_one_broker_reach_every_broker(shared_cluster, shared_zk_view):
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    brokers = shared_cluster.brokers
    all_see(brokers)
    admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
    admin.create_topics([NewTopic("tuned", 1, 3, config={"retention.ms": "100000"})])[
        "tuned"
    ].result()
    resource = ConfigResource(
        ResourceType.TOPIC,
        "tuned",
        incremental_configs=[
            ConfigEntry("min.insync.replicas", "2", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    for f in admin.incremental_alter_configs([resource]).values():
        f.result()
    # In ZooKeeper when the call returns: the config, and a change notification.
    assert shared_zk_view.json("/config/topics/tuned")["config"] == {"min.insync.replicas": "2"}
    changes = shared_zk_view.client.get_children(shared_zk_view.root + "/config/changes")
    assert any(
        shared_zk_view.json(f"/config/changes/{c}") == {"version": 2, "entity_path": "topics/tuned"}
        for c in changes
    )

    def described(bootstrap: str) -> dict[str, str]:
        other = AdminClient({"bootstrap.servers": bootstrap})
        (future,) = other.describe_configs([ConfigResource(ResourceType.TOPIC, "tuned")]).values()
        entries = future.result()
        return {k: entries[k].value for k in ("min.insync.replicas", "retention.ms")}

    for b in brokers.values():
        eventually(
            lambda b=b: (
                described(b.bootstrap) == {"min.insync.replicas": "2", "retention.ms": "604800000"}
            ),
            budget_s=10,
            what=f"{b.bootstrap} describes the new configs",
        )


def test_a_deletion_waits_for_a_replica_whose_broker_is_down(zookeeper, tmp_path, zk_view):
    overrides = {**FAST_SESSION, "controlled.shutdown.enable": "false"}
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=3, overrides=overrides) as cluster:
        all_see(cluster.brokers)
        admin = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
        admin.create_topics([NewTopic("half", 1, replica_assignment=[[2, 3]])])["half"].result()
        down = cluster.brokers[3]
        down.stop()
        all_see({1: cluster.brokers[1], 2: cluster.brokers[2]}, live=[1, 2])
        admin.delete_topics(["half"], operation_timeout=15)["half"].result()
        # Gone for clients at once; in ZooKeeper until broker 3 deleted its replica too.
        assert "half" not in _topics(cluster.brokers[2].bootstrap)
        time.sleep(1)  # ample for the controller to finish, were it not waiting
        for path in ("/brokers/topics/half", "/admin/delete_topics/half"):
            assert zk_view.exists(path) is not None, path
        down.restart()
        for path in ("/brokers/topics/half", "/config/topics/half", "/admin/delete_topics/half"):
            eventually(lambda path=path: zk_view.exists(path) is None, budget_s=15, what=path)
