"""A share group (KIP-932) through a partition leader's kill -9 in a 3-broker cluster: the
new leader reads the share-partition's state from its share coordinator (the leader of the
key's `__share_group_state` partition), so no record whose acceptance the consumer saw
committed is delivered again, and none is lost (those acquired on the dead leader come back
as available)."""

from __future__ import annotations

import socket
import time

from clustertest_helpers import FAST_SESSION
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from failover_helpers import admin, create_topic, wait_for_leaders
from wire import request_of, roundtrip

from trio_broker.protocol._generated.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
)
from trio_broker.testing import KafkaCluster


def _group_configs_everywhere(cluster, group: str, **configs: str) -> None:
    # Group configs are shared through ZooKeeper; each broker is told all the same, so
    # that each has them before the consumers start (a change notification may lag).
    resource = AlterConfigsResource(
        resource_type=32,
        resource_name=group,
        configs=[
            AlterableConfig(name=k.replace("_", "."), config_operation=0, value=v)
            for k, v in configs.items()
        ],
    )
    for broker in cluster.brokers.values():
        host, port = broker.bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            response = roundtrip(sock, request_of(44, resources=[resource]), 1)
        assert response.responses[0].error_code == 0


def test_partition_leader_killed_no_accepted_record_again_none_lost(zookeeper, tmp_path):
    overrides = {
        **FAST_SESSION,
        "zookeeper.session.timeout.ms": "3000",
        "offsets.topic.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "0",
        "group.share.min.record.lock.duration.ms": "1000",
        # At most 100 records of a partition in flight: it is read a little at a time.
        "group.share.partition.max.record.locks": "100",
    }
    with KafkaCluster(
        zookeeper, base_dir=tmp_path, size=3, overrides=overrides, processes=True
    ) as cluster:
        bootstrap = cluster.bootstrap
        create_topic(bootstrap, "jobs", 3, 3, config={"min.insync.replicas": "2"})
        leaders = wait_for_leaders(bootstrap, "jobs", 3, isr_size=3)
        _group_configs_everywhere(
            cluster,
            "workers",
            share_auto_offset_reset="earliest",
            share_record_lock_duration_ms="3000",
        )
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "batch.num.messages": 20,  # small batches: acquisitions of about 100
            }
        )
        total = 1500
        for i in range(total):
            producer.produce("jobs", b"j-%d" % i, partition=i % 3)
        assert producer.flush(60) == 0
        consumer = ShareConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "workers",
                "share.acknowledgement.mode": "explicit",
            }
        )
        consumer.subscribe(["jobs"])
        counted: dict[bytes, int] = {}
        per_partition = [0, 0, 0]  # records counted, by partition
        killed = victim = None
        deadline = time.monotonic() + 150
        try:
            while len(counted) < total:
                assert time.monotonic() < deadline, f"{len(counted)} of {total} counted"
                batch = [m for m in consumer.poll(0.5) if m.error() is None]
                for m in batch:
                    consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                if not batch:
                    continue
                results = consumer.commit_sync(30)
                for m in batch:
                    outcome = results.get(_tp(m))
                    if outcome is None and _tp(m) in _keys(results):
                        counted[m.value()] = counted.get(m.value(), 0) + 1
                        per_partition[m.partition()] += 1
                # Kill the leader of a partition half read: its share-partition's state
                # (what was accepted) must come from the share coordinator.
                half = [p for p in range(3) if 100 <= per_partition[p] <= total // 3 - 100]
                if killed is None and half:
                    victim = half[0]
                    killed = leaders[victim].leader
                    cluster.brokers[killed].kill()
        finally:
            consumer.close()
        assert killed is not None
        described = admin(bootstrap).list_topics("jobs", timeout=30).topics["jobs"]
        assert described.partitions[victim].leader != killed  # the partition moved
        dupes = {v: n for v, n in counted.items() if n > 1}
        assert not dupes, f"{len(dupes)} accepted records delivered again: {list(dupes)[:5]}"
        assert len(counted) == total


def _tp(m):
    from confluent_kafka import TopicPartition

    return TopicPartition(m.topic(), m.partition())


def _keys(results) -> set:
    return set(results)
