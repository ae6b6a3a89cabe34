"""Replication end to end: a 3-broker cluster (real ZooKeeper, real brokers), real clients.

Topics with replication factor 3 made by two admin clients, acks=all from three clients,
replicas byte-identical to their leader; then the faults: a leader killed (kill -9) again and
again under idempotent acks=all load with nothing acknowledged lost, followers frozen
(SIGSTOP) out of and back into the ISR, the controller killed, a leader stopped with SIGTERM
(controlled shutdown).
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from clustertest_helpers import FAST_SESSION, eventually, isr_held
from failover_helpers import (
    CountingProducer,
    admin,
    assert_every_ack_read_once,
    create_topic,
    high_watermarks,
    leader_of,
    log_bytes,
    partitions,
    read_all,
    wait_for_leaders,
)
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic as KpNewTopic
from kafka.errors import NotEnoughReplicasAfterAppendError, NotEnoughReplicasError

from trio_broker.testing import KafkaCluster

# Kafka's own figure is 10 rounds; TRIO_BROKER_KILL_ROUNDS lowers it for a quick local look.
KILL_ROUNDS = int(os.environ.get("TRIO_BROKER_KILL_ROUNDS", "10"))


def test_replicated_topics_with_three_clients_and_identical_replicas(kafka_cluster, tmp_path):
    cluster = kafka_cluster
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, "rf3-a", num_partitions=6, replication_factor=3)
    kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    kp_admin.create_topics([KpNewTopic("rf3-b", 3, 3)], timeout_ms=30_000)
    kp_admin.close()
    a = wait_for_leaders(bootstrap, "rf3-a", 6, isr_size=3)
    wait_for_leaders(bootstrap, "rf3-b", 3, isr_size=3)
    # Leaders spread over the brokers (Kafka's round-robin assignment: two each).
    assert sorted(p.leader for p in a.values()) == [1, 1, 2, 2, 3, 3]
    for p in a.values():
        assert sorted(p.replicas) == [1, 2, 3] and sorted(p.isrs) == [1, 2, 3]
    # Every broker describes the same leaders.
    for broker in cluster.brokers.values():
        seen = eventually(
            lambda b=broker: {i: p.leader for i, p in partitions(b.bootstrap, "rf3-a").items()},
            budget_s=10,
            what="metadata on every broker",
        )
        assert seen == {i: p.leader for i, p in a.items()}

    # acks=all from confluent-kafka, kafka-python and aiokafka.
    with CountingProducer(bootstrap, "rf3-a") as producer:
        eventually(lambda: len(producer.acked) >= 3000, budget_s=60, what="3000 acks")
    assert not producer.errors
    kp = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    kp_offsets = [kp.send("rf3-b", b"kp-%d" % i, partition=i % 3).get(30) for i in range(300)]
    kp.close()

    async def aio() -> list:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            return [
                await producer.send_and_wait("rf3-b", b"aio-%d" % i, partition=i % 3)
                for i in range(300)
            ]
        finally:
            await producer.stop()

    aio_offsets = asyncio.run(aio())

    # Everything acknowledged is read back at its offset.
    hw_a = high_watermarks(bootstrap, "rf3-a", range(6))
    assert_every_ack_read_once(producer.acked, read_all(bootstrap, "rf3-a", hw_a))
    hw_b = high_watermarks(bootstrap, "rf3-b", range(3))
    read_b = read_all(bootstrap, "rf3-b", hw_b)
    at = {(p, o): v for p, rs in read_b.items() for o, v in rs}
    for i, md in enumerate(kp_offsets):
        assert at[(md.partition, md.offset)] == b"kp-%d" % i
    for i, md in enumerate(aio_offsets):
        assert at[(md.partition, md.offset)] == b"aio-%d" % i
    assert sum(hw_b.values()) == 600

    # Every replica holds the leader's batches, byte for byte.
    for topic, count in (("rf3-a", 6), ("rf3-b", 3)):
        for p in range(count):

            def same(topic=topic, p=p) -> bool:
                copies = {log_bytes(b.log_dir, topic, p) for b in cluster.brokers.values()}
                return len(copies) == 1

            eventually(same, budget_s=20, what=f"identical replicas of {topic}-{p}")
            assert log_bytes(cluster.brokers[1].log_dir, topic, p)


def test_leader_killed_again_and_again_loses_no_acknowledged_record(zookeeper, tmp_path):
    overrides = {**FAST_SESSION, "zookeeper.session.timeout.ms": "3000"}
    with KafkaCluster(
        zookeeper, base_dir=tmp_path, size=3, overrides=overrides, processes=True
    ) as cluster:
        bootstrap = cluster.bootstrap
        create_topic(bootstrap, "kills", 1, 3, config={"min.insync.replicas": "2"})
        wait_for_leaders(bootstrap, "kills", 1, isr_size=3)
        failover_s = []
        with CountingProducer(bootstrap, "kills") as producer:
            eventually(lambda: len(producer.acked) > 200, budget_s=30, what="first acks")
            for _round in range(KILL_ROUNDS):
                live = next(b for b in cluster.brokers.values() if b.alive)
                leader = leader_of(live.bootstrap, "kills")
                killed_at = time.monotonic()
                cluster.brokers[leader].kill()
                # A new leader first (once the session expired: only then may the broker
                # register again); acks timed after the kill may still be the old leader's,
                # read by the client a moment late.
                survivor = next(b for n, b in cluster.brokers.items() if n != leader)
                eventually(
                    lambda s=survivor, old=leader: leader_of(s.bootstrap, "kills") not in (old, -1),
                    budget_s=30,
                    what="a new leader",
                )
                moved_at = time.monotonic()
                failover_s.append(
                    moved_at
                    - killed_at
                    + producer.wait_for_acks_after(
                        moved_at, budget_s=30, what="acks from the new leader"
                    )
                )
                cluster.brokers[leader].start_again()
                # Back in the ISR before the next round, so two live replicas remain.
                wait_for_leaders(bootstrap, "kills", 1, isr_size=3, budget_s=60)
            eventually(lambda: len(producer.acked) > 1000, budget_s=30, what="more acks")
        assert not producer.errors, producer.errors[:5]
        hw = high_watermarks(bootstrap, "kills", [0])
        assert_every_ack_read_once(producer.acked, read_all(bootstrap, "kills", hw))
        print(f"failover after kill -9 (s): {sorted(round(x, 2) for x in failover_s)}")


def test_frozen_followers_leave_the_isr_and_come_back(zookeeper, tmp_path, zk_view):
    overrides = {
        # Sessions outlive the freeze: the leader, not the controller, shrinks the ISR.
        "zookeeper.session.timeout.ms": "30000",
        "replica.lag.time.max.ms": "2000",
    }
    with KafkaCluster(
        zookeeper, base_dir=tmp_path, size=3, overrides=overrides, processes=True
    ) as cluster:
        b1 = cluster.brokers[1]
        eventually(lambda: zk_view.controller() is not None, budget_s=10, what="controller")
        leader = zk_view.controller()  # the frozen ones must not be the controller
        others = [n for n in (1, 2, 3) if n != leader]
        create_topic(
            b1.bootstrap,
            "frozen",
            replica_assignment=[[leader, *others]],
            config={"min.insync.replicas": "2"},
        )
        wait_for_leaders(b1.bootstrap, "frozen", 1, isr_size=3)
        lead = cluster.brokers[leader].bootstrap
        kp = KafkaProducer(bootstrap_servers=lead, acks="all", retries=0, request_timeout_ms=15000)
        kp.send("frozen", b"before").get(20)

        def isr() -> list[int]:
            return sorted(zk_view.json("/brokers/topics/frozen/partitions/0/state")["isr"])

        # As in Kafka, a follower out of touch leaves the ISR once it is behind for
        # replica.lag.time.max.ms: this acks=all produce waits for that, then succeeds
        # (min.insync.replicas=2 is still met).
        cluster.brokers[others[0]].pause()
        kp.send("frozen", b"one frozen").get(20)
        eventually(lambda: isr() == sorted([leader, others[1]]), budget_s=20, what="shrink")

        # The second follower frozen: the append waits, the ISR shrinks to the leader alone,
        # and the produce fails NOT_ENOUGH_REPLICAS_AFTER_APPEND (the record is in the log);
        # the next one is refused before the append.
        cluster.brokers[others[1]].pause()
        expected = [b"before", b"one frozen"]
        try:
            kp.send("frozen", b"two frozen").get(20)
        except NotEnoughReplicasAfterAppendError:
            expected.append(b"two frozen")
        except NotEnoughReplicasError:
            pass  # the ISR shrank before the append
        else:
            raise AssertionError("acks=all succeeded with one in-sync replica")
        # The leader's own ISR too (the znode shows its write before it takes it): the
        # next produce must meet the ISR of one.
        eventually(
            lambda: isr() == isr_held(lead, "frozen", 0) == [leader],
            budget_s=20,
            what="shrink to the leader",
        )
        with pytest.raises(NotEnoughReplicasError):
            kp.send("frozen", b"refused").get(20)

        cluster.brokers[others[0]].resume()
        cluster.brokers[others[1]].resume()
        eventually(lambda: isr() == [1, 2, 3], budget_s=30, what="ISR grows back")
        kp.send("frozen", b"after").get(20)
        kp.close()
        expected.append(b"after")
        hw = high_watermarks(lead, "frozen", [0])
        values = [v for _, v in read_all(lead, "frozen", hw)[0]]
        assert values == expected


def test_the_controller_killed_another_takes_over_and_creates_topics(zookeeper, tmp_path, zk_view):
    with KafkaCluster(
        zookeeper, base_dir=tmp_path, size=3, overrides=FAST_SESSION, processes=True
    ) as cluster:
        eventually(lambda: zk_view.controller() is not None, budget_s=10, what="controller")
        first = zk_view.controller()
        epoch = zk_view.controller_epoch()
        cluster.brokers[first].kill()
        new = eventually(
            lambda: zk_view.controller() not in (None, first) and zk_view.controller(),
            budget_s=20,
            what="a new controller",
        )
        assert zk_view.controller_epoch() == epoch + 1
        live = cluster.brokers[new].bootstrap
        create_topic(live, "after-controller", 4, 2)
        parts = wait_for_leaders(live, "after-controller", 4, isr_size=2)
        assert all(first not in p.replicas for p in parts.values())


def test_sigterm_moves_leadership_before_the_broker_stops(zookeeper, tmp_path):
    # A long grace period: a produce left parked on the stopping leader would hold its
    # exit that long (the controller sends it no LeaderAndIsr for what it moved).
    overrides = {
        **FAST_SESSION,
        "zookeeper.session.timeout.ms": "10000",
        "shutdown.grace.period.ms": "20000",
    }
    with KafkaCluster(
        zookeeper, base_dir=tmp_path, size=3, overrides=overrides, processes=True
    ) as cluster:
        bootstrap = cluster.bootstrap
        create_topic(bootstrap, "sigterm", 1, 3, config={"min.insync.replicas": "2"})
        wait_for_leaders(bootstrap, "sigterm", 1, isr_size=3)
        with CountingProducer(bootstrap, "sigterm") as producer:
            eventually(lambda: len(producer.acked) > 200, budget_s=30, what="first acks")
            leader = leader_of(bootstrap, "sigterm")
            stopped_at = time.monotonic()
            assert cluster.brokers[leader].stop() == 0
            stop_s = time.monotonic() - stopped_at
            # It resigned what the controller moved: waiting acks=all produces were answered
            # NOT_LEADER_OR_FOLLOWER (the client retried on the new leader) rather than
            # parked until the grace period ended.
            lines = "".join(cluster.brokers[leader].lines)
            assert "resigned the leadership of sigterm-0" in lines
            assert stop_s < 15, stop_s
            # Controlled shutdown: another broker leads, without waiting out the session.
            live = next(b for n, b in cluster.brokers.items() if n != leader)
            new_leader = leader_of(live.bootstrap, "sigterm")
            assert new_leader not in (leader, -1)
            moved_s = producer.wait_for_acks_after(stopped_at, budget_s=10, what="new leader")
        assert not producer.errors, producer.errors[:5]
        hw = high_watermarks(live.bootstrap, "sigterm", [0])
        assert_every_ack_read_once(producer.acked, read_all(live.bootstrap, "sigterm", hw))
        print(f"SIGTERM: stopped in {stop_s:.2f} s, first ack on the successor {moved_s:.2f} s")


def test_group_coordinator_killed_the_group_resumes_from_its_commits(zookeeper, tmp_path):
    """A consumer group with synchronous commits, its coordinator's broker killed midway: the
    group moves to the new leader of its __consumer_offsets partition and resumes from the
    committed offsets; every record counts exactly once (a value counts once a commit
    covering it succeeds)."""
    from confluent_kafka import Consumer, KafkaException
    from confluent_kafka import Producer as CProducer

    overrides = {**FAST_SESSION, "zookeeper.session.timeout.ms": "3000"}
    with KafkaCluster(
        zookeeper, base_dir=tmp_path, size=3, overrides=overrides, processes=True
    ) as cluster:
        bootstrap = cluster.bootstrap
        create_topic(bootstrap, "orders", 6, 3, config={"min.insync.replicas": "2"})
        wait_for_leaders(bootstrap, "orders", 6, isr_size=3)
        producer = CProducer({"bootstrap.servers": bootstrap, "acks": "all"})
        total = 3000
        for i in range(total):
            producer.produce("orders", b"o-%d" % i, key=b"%d" % i)
            producer.poll(0)
        assert producer.flush(60) == 0

        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "g",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10000,
            }
        )
        consumer.subscribe(["orders"])
        counted: dict[bytes, int] = {}
        pending: list[bytes] = []
        killed = None
        deadline = time.monotonic() + 120
        try:
            while len(counted) < total and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    pending.append(msg.value())
                if pending and (len(pending) >= 100 or msg is None):
                    try:
                        consumer.commit(asynchronous=False)
                    except KafkaException:
                        continue  # not committed: these values stay pending
                    for v in pending:
                        counted[v] = counted.get(v, 0) + 1
                    pending.clear()
                if killed is None and len(counted) >= total // 3:
                    client = admin(bootstrap)  # alive until the answer
                    groups = client.describe_consumer_groups(["g"])
                    killed = groups["g"].result(30).coordinator.id
                    cluster.brokers[killed].kill()
        finally:
            consumer.close()
        assert killed is not None
        assert len(counted) == total, f"{total - len(counted)} records never committed"
        dupes = {v: n for v, n in counted.items() if n > 1}
        assert not dupes, f"{len(dupes)} records counted twice: {list(dupes)[:5]}"
