"""A KIP-848 consumer group (`group.protocol=consumer`) in a 3-broker cluster whose group
coordinator is killed (kill -9) midway: the group's records are replayed by the new leader of
its `__consumer_offsets` partition, the members carry on, no partition is ever owned by two
members at once, and every record counts exactly once (a value counts once a synchronous
commit covering it succeeded)."""

from __future__ import annotations

import time

from clustertest_helpers import FAST_SESSION
from failover_helpers import admin, create_topic, wait_for_leaders

from trio_broker.testing import KafkaCluster

KIP848 = {
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.session.timeout.ms": "10000",
    "group.consumer.min.session.timeout.ms": "10000",
}


def test_consumer_group_coordinator_killed_members_carry_on_from_commits(zookeeper, tmp_path):
    from confluent_kafka import Consumer, KafkaError, KafkaException
    from confluent_kafka import Producer as CProducer

    overrides = {**FAST_SESSION, "zookeeper.session.timeout.ms": "3000", **KIP848}
    with KafkaCluster(
        zookeeper, base_dir=tmp_path, size=3, overrides=overrides, processes=True
    ) as cluster:
        bootstrap = cluster.bootstrap
        create_topic(bootstrap, "orders", 6, 3, config={"min.insync.replicas": "2"})
        wait_for_leaders(bootstrap, "orders", 6, isr_size=3)
        producer = CProducer({"bootstrap.servers": bootstrap, "acks": "all"})
        total = 3000
        for i in range(total):
            producer.produce("orders", b"o-%d" % i, partition=i % 6)
            producer.poll(0)
        assert producer.flush(60) == 0

        consumers = [
            Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": "g848",
                    "group.protocol": "consumer",
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                }
            )
            for _ in range(2)
        ]
        for c in consumers:
            c.subscribe(["orders"])
        counted: dict[bytes, int] = {}
        pending: list[list[tuple[int, bytes]]] = [[], []]  # read, not yet committed
        killed = None
        deadline = time.monotonic() + 150
        try:
            while len(counted) < total:
                assert time.monotonic() < deadline, f"{len(counted)} of {total} counted"
                for i, c in enumerate(consumers):
                    msg = c.poll(0.2)
                    if msg is not None and msg.error() is None:
                        pending[i].append((msg.partition(), msg.value()))
                    owned = [{tp.partition for tp in x.assignment()} for x in consumers]
                    assert not owned[0] & owned[1], f"a partition owned twice: {owned}"
                    if pending[i] and (len(pending[i]) >= 100 or msg is None):
                        try:
                            c.commit(asynchronous=False)
                        except KafkaException as exc:
                            if exc.args[0].code() == KafkaError._NO_OFFSET:
                                pending[i].clear()  # every partition it read moved on
                            continue  # kept: the next commit covers them
                        # The commit covered the partitions the member owns; what it read
                        # of partitions that moved away is read again by their new owner.
                        for p, v in pending[i]:
                            if p in owned[i]:
                                counted[v] = counted.get(v, 0) + 1
                        pending[i].clear()
                if killed is None and len(counted) >= total // 3:
                    client = admin(bootstrap)
                    groups = client.describe_consumer_groups(["g848"])
                    described = groups["g848"].result(30)
                    assert len(described.members) == 2
                    killed = described.coordinator.id
                    cluster.brokers[killed].kill()
            # The new coordinator describes the group with both members, every partition
            # owned once.
            live = next(b for n, b in cluster.brokers.items() if n != killed)
            client = admin(live.bootstrap)
            described = client.describe_consumer_groups(["g848"])["g848"].result(30)
            assert described.coordinator.id != killed
            assert len(described.members) == 2
            owned = sorted(
                tp.partition for m in described.members for tp in m.assignment.topic_partitions
            )
            assert owned == list(range(6))
        finally:
            for c in consumers:
                c.close()
        assert killed is not None
        assert len(counted) == total, f"{total - len(counted)} records never committed"
        dupes = {v: n for v, n in counted.items() if n > 1}
        assert not dupes, f"{len(dupes)} records counted twice: {list(dupes)[:5]}"
