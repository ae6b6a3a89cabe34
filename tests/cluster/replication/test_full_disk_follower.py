"""A follower's disk fills up under acks=all load, in a 3-broker cluster.

Broker 3's log dir is a small tmpfs. Once it is full, broker 3's appends of what it
fetches fail with ENOSPC. The log undoes each one, and the dir stays online (the
documented full-disk rule, README "When a disk fills up"). The follower falls behind,
and the leader takes it out of the ISR after `replica.lag.time.max.ms`. With
`min.insync.replicas=2` the producer goes on. Once space is freed, the follower catches
up without a restart and rejoins the ISR. Its copy is then the leader's, byte for byte,
and every acknowledged record is read back once.
"""

from __future__ import annotations

import logging

from clustertest_helpers import FAST_SESSION, eventually
from disk import fill_disk, small_tmpfs
from failover_helpers import (
    CountingProducer,
    assert_every_ack_read_once,
    create_topic,
    high_watermarks,
    log_bytes,
    partitions,
    read_all,
    wait_for_leaders,
)

from trio_broker.testing import KafkaCluster

TOPIC = "filling"


def test_a_follower_with_a_full_disk_leaves_the_isr_and_rejoins_once_freed(
    zookeeper, tmp_path, caplog
):
    caplog.set_level(logging.WARNING, logger="trio_broker")
    overrides = {
        **FAST_SESSION,
        "replica.lag.time.max.ms": "2000",
        "replica.fetch.backoff.ms": "200",
        "offsets.topic.replication.factor": "1",
    }
    with (
        small_tmpfs(tmp_path / "small", "16m") as disk,
        KafkaCluster(zookeeper, base_dir=tmp_path, size=0, overrides=overrides) as cluster,
    ):
        for n in (1, 2, 3):
            cluster.add_broker(n, {"log.dirs": str(disk / "data")} if n == 3 else None)
        cluster.wait_all_see()
        bootstrap = cluster.bootstrap
        create_topic(
            bootstrap, TOPIC, config={"min.insync.replicas": "2"}, replica_assignment=[[1, 2, 3]]
        )
        wait_for_leaders(bootstrap, TOPIC, 1, isr_size=3)
        with CountingProducer(bootstrap, TOPIC) as producer:
            eventually(lambda: len(producer.acked) > 500, budget_s=30, what="first acks")
            filler = fill_disk(disk, 64 * 1024)
            eventually(
                lambda: sorted(partitions(bootstrap, TOPIC)[0].isrs) == [1, 2],
                budget_s=30,
                what="broker 3 out of the ISR",
            )
            shrunk = len(producer.acked)
            eventually(
                lambda: len(producer.acked) > shrunk + 1000,
                budget_s=30,
                what="acks with broker 3 out of the ISR",
            )
            filler.unlink()
            eventually(
                lambda: sorted(partitions(bootstrap, TOPIC)[0].isrs) == [1, 2, 3],
                budget_s=30,
                what="broker 3 back in the ISR",
            )
            back = len(producer.acked)
            eventually(lambda: len(producer.acked) > back + 500, budget_s=30, what="more acks")
        assert not producer.errors, producer.errors[:3]
        # The fault happened where meant: the follower's appends, undone, on a full disk.
        assert any(
            r.name.endswith("replica_fetcher") and "No space left on device" in r.getMessage()
            for r in caplog.records
        )
        assert not [r.getMessage() for r in caplog.records if r.exc_info]
        hw = high_watermarks(bootstrap, TOPIC, [0])
        assert_every_ack_read_once(producer.acked, read_all(bootstrap, TOPIC, hw))

        def identical() -> bool:
            leader = log_bytes(cluster.brokers[1].log_dir, TOPIC, 0)
            return leader == log_bytes(disk / "data", TOPIC, 0) != b""

        eventually(identical, budget_s=30, what="broker 3's copy is the leader's")
        print(f"{len(producer.acked)} acknowledged; broker 3 left the ISR at {shrunk}")
