"""A leader's log dir fails under load, in a 3-broker cluster (Kafka's log dir failure
handling, KIP-112, ZooKeeper era).

The fault is real: the leader's process gets a file size limit (RLIMIT_FSIZE, with
prlimit) just above its segment, so its next append fails with EFBIG, an error the log
cannot undo; the log dir goes offline. The broker tells the controller through
/log_dir_event_notification, the controller learns from LeaderAndIsr answers
(KAFKA_STORAGE_ERROR) which replicas are on the offline dir, elects a new leader from the
rest of the ISR and reports the replica offline. Idempotent acks=all producers carry on,
and nothing acknowledged is lost. After a restart with the limit lifted the broker catches
up and its replica is byte-identical to the new leader's again.
"""

from __future__ import annotations

import resource
import socket
import time

import pytest
from clustertest_helpers import FAST_SESSION, eventually, metadata
from failover_helpers import (
    CountingProducer,
    assert_every_ack_read_once,
    create_topic,
    high_watermarks,
    log_bytes,
    read_all,
    wait_for_leaders,
)
from wire import request_of, roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    TopicProduceData,
)
from trio_broker.protocol.record_codec import build_batch
from trio_broker.testing import KafkaCluster

TOPIC = "disk"


def _partition(bootstrap: str, topic: str = TOPIC, index: int = 0):
    for t in metadata(bootstrap).topics:
        if t.name == topic:
            for p in t.partitions:
                if p.partition_index == index:
                    return p
    return None


def _when(bootstrap: str, check, what: str, budget_s: float = 15):
    """The topic's partition 0 as `bootstrap` describes it, once `check(partition)` holds."""

    def ready():
        p = _partition(bootstrap)
        return p if p is not None and check(p) else None

    return eventually(ready, budget_s=budget_s, what=what)


def _raw_produce(port: int, value: bytes) -> int:
    batch = build_batch([(None, value, (), int(time.time() * 1000))])
    data = [
        TopicProduceData(name=TOPIC, partition_data=[PartitionProduceData(index=0, records=batch)])
    ]
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        response = roundtrip(sock, request_of(0, acks=-1, timeout_ms=5000, topic_data=data), 9)
    return response.responses[0].partition_responses[0].error_code


# Broker 1, the first to start, is the controller: the failing leader is another broker,
# or the controller itself.
@pytest.mark.parametrize("node", [2, 1], ids=["leader", "leader-and-controller"])
def test_a_leaders_failed_log_dir_moves_leadership_and_loses_no_acknowledged_record(
    zookeeper, tmp_path, node
):
    overrides = {**FAST_SESSION, "replica.lag.time.max.ms": "3000"}
    with KafkaCluster(
        zookeeper, base_dir=tmp_path, size=3, overrides=overrides, processes=True
    ) as cluster:
        bootstrap = cluster.bootstrap
        create_topic(
            bootstrap,
            TOPIC,
            config={"min.insync.replicas": "2"},
            replica_assignment=[[node, *(n for n in (3, 2, 1) if n != node)]],
        )
        wait_for_leaders(bootstrap, TOPIC, 1, isr_size=3)
        failing = cluster.brokers[node]
        other = cluster.brokers[3]
        # Broker 3's metadata cache hears of the new topic a moment after the others may.
        eventually(
            lambda: getattr(_partition(other.bootstrap), "leader_id", None) == node,
            budget_s=15,
            what=f"broker 3 knows {node} leads the new partition",
        )
        with CountingProducer(bootstrap, TOPIC) as producer:
            eventually(lambda: len(producer.acked) > 300, budget_s=30, what="first acks")
            segment = max(
                (failing.log_dir / f"{TOPIC}-0").glob("*.log"), key=lambda p: p.stat().st_size
            )
            hard = resource.prlimit(failing.proc.pid, resource.RLIMIT_FSIZE)[1]
            limit = segment.stat().st_size + 50_000
            resource.prlimit(failing.proc.pid, resource.RLIMIT_FSIZE, (limit, hard))
            failed_at = time.monotonic()

            after = _when(
                other.bootstrap,
                lambda p: p.leader_id not in (node, -1),
                "a new leader",
                budget_s=30,
            )
            moved_at = time.monotonic()
            producer.wait_for_acks_after(moved_at, budget_s=30, what="acks from the new leader")
            # The failed replica is out of the ISR and reported offline, by every live broker.
            for b in cluster.brokers.values():
                p = _when(
                    b.bootstrap,
                    lambda p: node in p.offline_replicas,
                    f"{b.bootstrap} reports replica {node} offline",
                )
                assert node not in p.isr_nodes and node in p.replica_nodes
            eventually(lambda: len(producer.acked) > 300 + 2000, budget_s=60, what="more acks")
        assert not producer.errors, producer.errors[:3]
        print(
            f"leadership moved {moved_at - failed_at:.2f} s after the limit; "
            f"new leader {after.leader_id}, {len(producer.acked)} records acknowledged"
        )
        # On the failed broker the partition is offline: its own error, not a leader's.
        assert _raw_produce(failing.port, b"x") == ErrorCode.KAFKA_STORAGE_ERROR
        assert any("offline" in line for line in failing.lines)
        assert not any("Traceback" in line for line in failing.lines), "".join(failing.lines)

        hw = high_watermarks(other.bootstrap, TOPIC, [0])
        assert_every_ack_read_once(producer.acked, read_all(other.bootstrap, TOPIC, hw))

        # Lift the limit and restart: the replica comes back, catches up and rejoins.
        resource.prlimit(failing.proc.pid, resource.RLIMIT_FSIZE, (hard, hard))
        assert failing.stop() == 0
        failing.start_again()
        _when(
            other.bootstrap,
            lambda p: sorted(p.isr_nodes) == [1, 2, 3],
            "the restarted replica back in the ISR",
            budget_s=30,
        )
        assert _partition(other.bootstrap).offline_replicas == []

        def identical() -> bool:
            copies = {log_bytes(b.log_dir, TOPIC, 0) for b in cluster.brokers.values()}
            return len(copies) == 1

        eventually(identical, budget_s=20, what="identical replicas")
