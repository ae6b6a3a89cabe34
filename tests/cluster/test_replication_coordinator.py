"""Coordinators move with leadership of their internal topic's partition, and StopReplica
(the test is the controller)."""

from __future__ import annotations

import trio
from replication_helpers import (
    NO_CONTROLLED_SHUTDOWN,
    ControllerStub,
    eventually,
    produce,
    raw,
    segment_bytes,
    take_controller,
)
from wire import request_of

from trio_broker.client.config import ClientConfig
from trio_broker.client.network_client import NetworkClient
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.stop_replica_request import (
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaTopicState,
)
from trio_broker.testing import KafkaCluster

OVERRIDES = NO_CONTROLLED_SHUTDOWN | {
    "auto.create.topics.enable": "false",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
}


def _coordinator(bootstrap: str, group: str) -> tuple[int, int]:
    answer = raw(bootstrap, request_of(10, key=group, key_type=0), 3)
    return answer.error_code, answer.node_id


def _consume(bootstrap: str, group: str, count: int, after_commit=None) -> list[bytes]:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["data"])
    got: list[bytes] = []

    def enough() -> bool:
        for m in consumer.consume(count, timeout=0.5):
            if m.error() is None:
                got.append(m.value())
        return len(got) >= count

    eventually(enough, budget_s=30, what=f"{count} records for {group}")
    consumer.commit(asynchronous=False)
    if after_commit is not None:
        after_commit()
    consumer.close()
    return got


def test_group_coordinator_moves_with_offsets_leadership_and_stop_replica(
    zookeeper, tmp_path, zk_view
):
    take_controller(zk_view)
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=2, overrides=OVERRIDES) as cluster:
        b1, b2 = cluster.brokers[1], cluster.brokers[2]
        ctl = ControllerStub(cluster, zk_view)
        ctl.create_topic("__consumer_offsets", {0: [1, 2]}, {"cleanup.policy": "compact"})
        ctl.create_topic("data", {0: [2, 1]})
        ctl.send([("__consumer_offsets", 0), ("data", 0)])
        assert _coordinator(b2.bootstrap, "cg") == (0, 1)

        assert (
            produce(b2.bootstrap, "data", 0, [f"r{i}".encode() for i in range(20)]).error_code == 0
        )

        def replicated() -> None:
            # The synchronous commit was answered once the follower had it (acks=-1).
            offsets_bytes = segment_bytes(b1.log_dir, "__consumer_offsets", 0)
            assert offsets_bytes
            assert segment_bytes(b2.log_dir, "__consumer_offsets", 0) == offsets_bytes

        consumed = _consume(cluster.bootstrap, "cg", 20, after_commit=replicated)
        assert consumed == [f"r{i}".encode() for i in range(20)]
        eventually(
            lambda: (
                segment_bytes(b2.log_dir, "__consumer_offsets", 0)
                == segment_bytes(b1.log_dir, "__consumer_offsets", 0)
            ),
            budget_s=20,
            what="the group's leave replicated too",
        )

        # Leadership of __consumer_offsets-0 moves to broker 2: broker 1 unloads the group
        # (NOT_COORDINATOR), broker 2 loads it, FindCoordinator names broker 2 everywhere.
        ctl.elect("__consumer_offsets", 0, 2, [1, 2])
        ctl.send([("__consumer_offsets", 0)])
        assert _coordinator(b1.bootstrap, "cg") == (0, 2)
        assert _coordinator(b2.bootstrap, "cg") == (0, 2)
        fetch = request_of(9, group_id="cg", topics=None)
        assert raw(b1.bootstrap, fetch, 5).error_code == ErrorCode.NOT_COORDINATOR
        eventually(lambda: raw(b2.bootstrap, fetch, 5).error_code == 0, budget_s=10, what="loaded")
        committed = raw(b2.bootstrap, fetch, 5).topics[0].partitions[0]
        assert committed.committed_offset == 20

        # The group resumes from its committed offsets on the new coordinator.
        assert produce(b2.bootstrap, "data", 0, [b"s0", b"s1", b"s2"]).error_code == 0
        assert _consume(cluster.bootstrap, "cg", 3) == [b"s0", b"s1", b"s2"]

        # StopReplica with delete: broker 1 stops following data-0 and deletes its log.
        assert (b1.log_dir / "data-0").exists()
        request = StopReplicaRequest(
            controller_id=zk_view.controller() or 1,
            controller_epoch=ctl.epoch,
            topic_states=[
                StopReplicaTopicState(
                    topic_name="data",
                    partition_states=[
                        StopReplicaPartitionState(
                            partition_index=0, leader_epoch=0, delete_partition=True
                        )
                    ],
                )
            ],
        )
        answers = []

        async def send() -> None:
            async with NetworkClient(ClientConfig.build(bootstrap_servers=b1.bootstrap)) as c:
                answers.append(await c.send(b1.bootstrap, request, 3))

        trio.run(send)
        assert answers[0].error_code == 0
        assert [e.error_code for e in answers[0].partition_errors] == [0]
        assert not (b1.log_dir / "data-0").exists()
        # The leader goes on (acks=1: the ISR still names the stopped replica).
        assert produce(b2.bootstrap, "data", 0, [b"t"], acks=1).error_code == 0


def test_transaction_coordinator_moves_with_transaction_state_leadership(
    zookeeper, tmp_path, zk_view
):
    take_controller(zk_view)
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=2, overrides=OVERRIDES) as cluster:
        b1, b2 = cluster.brokers[1], cluster.brokers[2]
        ctl = ControllerStub(cluster, zk_view)
        ctl.create_topic("__transaction_state", {0: [1, 2]}, {"cleanup.policy": "compact"})
        ctl.send([("__transaction_state", 0)])
        find = request_of(10, key="tx", key_type=1)
        assert (raw(b2.bootstrap, find, 3).error_code, raw(b2.bootstrap, find, 3).node_id) == (0, 1)
        init = request_of(22, transactional_id="tx", transaction_timeout_ms=60000)
        first = raw(b1.bootstrap, init, 3)
        assert (first.error_code, first.producer_epoch) == (0, 0)
        assert raw(b2.bootstrap, init, 3).error_code == ErrorCode.NOT_COORDINATOR
        state = segment_bytes(b1.log_dir, "__transaction_state", 0)
        eventually(
            lambda: segment_bytes(b2.log_dir, "__transaction_state", 0) == state,
            budget_s=20,
            what="transaction state replicated",
        )

        ctl.elect("__transaction_state", 0, 2, [1, 2])
        ctl.send([("__transaction_state", 0)])
        assert raw(b1.bootstrap, find, 3).node_id == 2
        assert raw(b1.bootstrap, init, 3).error_code == ErrorCode.NOT_COORDINATOR
        # The new coordinator loaded the transactional id: the same producer id, fenced
        # to the next epoch (a coordinator without the state would start a new one).
        again = eventually(
            lambda: (r := raw(b2.bootstrap, init, 3)).error_code == 0 and r,
            budget_s=10,
            what="InitProducerId on the new coordinator",
        )
        assert (again.producer_id, again.producer_epoch) == (first.producer_id, 1)
