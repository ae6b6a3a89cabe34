"""Replication quotas (Kafka's KIP-73), driven as operators drive them: `trio-broker reassign
execute --throttle` (kafka-reassign-partitions' option) sets the throttled replica lists on
the topic and the rates on the brokers; the new replica then copies at that pace; `verify`
clears it all once done, and `cancel` stops a throttled reassignment half-way. A throttle
never holds back a replica that is in sync. Three brokers and a real ZooKeeper; checked by
the configs the brokers describe, the bytes the new replicas hold, and the records."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

from cli_run import run_cli as cli
from clustertest_helpers import eventually
from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from failover_helpers import (
    admin,
    create_topic,
    high_watermarks,
    log_bytes,
    partitions,
    read_all,
    wait_for_leaders,
)
from prometheus_client.parser import text_string_to_metric_families

from trio_broker.testing import KafkaCluster, free_port

OVERRIDES = {"auto.leader.rebalance.enable": "false", "offsets.topic.replication.factor": "1"}
RECORD = b"x" * 1000
THROTTLE_KEYS = (
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
)
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


def fill(bootstrap: str, topic: str, n: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "compression.type": "none"}
    )
    for i in range(n):
        producer.produce(topic, RECORD + b"%d" % i, partition=0)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def replica_bytes(broker, topic: str) -> bytes:
    return log_bytes(Path(broker.config.log_dirs[0]), topic, 0)


def configs(bootstrap: str, kind: int, name: str, keys) -> dict[str, str | None]:
    """The values of `keys` the resource describes (None: not set, the default)."""
    resource = ConfigResource(kind, name)
    client = admin(bootstrap)  # kept alive until the answer (a dropped client cancels it)
    entries = client.describe_configs([resource])[resource].result(30)
    out = {}
    for key in keys:
        entry = entries.get(key)
        out[key] = None if entry is None or entry.is_default else entry.value
    return out


def topic_throttles(bootstrap: str, topic: str) -> dict[str, str | None]:
    return configs(bootstrap, ConfigResource.Type.TOPIC, topic, THROTTLE_KEYS)


def broker_rates(cluster, node: int) -> dict[str, str | None]:
    broker = cluster.brokers[node]
    return configs(broker.bootstrap, ConfigResource.Type.BROKER, str(node), RATE_KEYS)


def scrape(url: str) -> dict[str, float]:
    """The broker's Prometheus metrics without labels, by sample name."""
    with urllib.request.urlopen(url, timeout=30) as answer:
        text = answer.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


def write_plan(tmp_path: Path, topic: str, replicas: list[int]) -> str:
    path = tmp_path / f"{topic}.json"
    plan = {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": replicas}]}
    path.write_text(json.dumps(plan))
    return str(path)


def test_a_throttled_reassignment_copies_at_its_pace_and_verify_clears_the_throttle(
    zookeeper, tmp_path
):
    metrics = {}
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=0, overrides=OVERRIDES) as cluster:
        for node in (1, 2, 3):
            port = free_port()
            metrics[node] = f"http://127.0.0.1:{port}/metrics"
            cluster.add_broker(node, {"metrics.listener": f"http://127.0.0.1:{port}"})
        cluster.wait_all_see()
        boot = cluster.brokers[1].bootstrap
        create_topic(boot, "slow", replica_assignment=[[1]])
        wait_for_leaders(boot, "slow", 1)
        fill(boot, "slow", 4000)  # ~4 MB on broker 1
        size = len(replica_bytes(cluster.brokers[1], "slow"))
        assert size > 4_000_000

        plan = write_plan(tmp_path, "slow", [1, 2])
        rate = 400_000
        started = time.monotonic()
        out = cli(boot, "reassign", "execute", plan, "--throttle", str(rate))
        assert f"The inter-broker throttle limit was set to {rate} B/s on brokers 1,2" in out.stdout
        assert "You must run `reassign verify` periodically" in out.stdout
        # What kafka-reassign-partitions sets: the current replica throttled as leader, the
        # new one as follower, the rate on both brokers.
        assert topic_throttles(boot, "slow") == {
            "leader.replication.throttled.replicas": "0:1",
            "follower.replication.throttled.replicas": "0:2",
        }
        for node in (1, 2):
            assert broker_rates(cluster, node) == dict.fromkeys(RATE_KEYS, str(rate))
        assert broker_rates(cluster, 3) == dict.fromkeys(RATE_KEYS)

        # Two seconds in, the new replica has some of the log, not all of it (unthrottled,
        # 4 MB over loopback takes a fraction of a second).
        eventually(
            lambda: len(replica_bytes(cluster.brokers[2], "slow")) > 0,
            budget_s=20,
            what="broker 2 to start copying",
        )
        time.sleep(max(0.0, started + 2 - time.monotonic()))
        copied = len(replica_bytes(cluster.brokers[2], "slow"))
        assert 0 < copied < size
        waiting = cli(boot, "reassign", "verify", plan, check=False)
        assert waiting.returncode == 1
        assert "Reassignment of partition slow-0 is still in progress." in waiting.stdout
        assert "Clearing" not in waiting.stdout  # the throttle stays while it copies
        # The quotas' byte-rate metrics (Kafka's LeaderReplication / FollowerReplication).
        assert scrape(metrics[1])["kafka_server_leaderreplication_byte_rate"] > 0
        assert scrape(metrics[2])["kafka_server_followerreplication_byte_rate"] > 0
        assert topic_throttles(boot, "slow")["follower.replication.throttled.replicas"] == "0:2"

        eventually(
            lambda: (
                replica_bytes(cluster.brokers[2], "slow")
                == replica_bytes(cluster.brokers[1], "slow")
            ),
            budget_s=60,
            what="broker 2's copy to match the leader's",
        )
        took = time.monotonic() - started
        # Every byte the new replica copied counted against both quotas.
        assert scrape(metrics[1])["kafka_server_leaderreplication_throttled_bytes_total"] >= size
        assert scrape(metrics[2])["kafka_server_followerreplication_throttled_bytes_total"] >= size
        assert (
            scrape(metrics[3]).get("kafka_server_leaderreplication_throttled_bytes_total", 0) == 0
        )
        # At 400 KB/s after a first window's worth, 4 MB takes about 9 s; a lower bound
        # only (a slower machine takes longer, never shorter).
        assert took > (size - 2 * 1_048_576) / rate, took
        eventually(
            lambda: len(partitions(boot, "slow")[0].isrs) == 2,
            budget_s=30,
            what="broker 2 in the ISR",
        )
        done = cli(boot, "reassign", "verify", plan)
        assert "Reassignment of partition slow-0 is completed." in done.stdout
        assert "Clearing broker-level throttles on brokers 1,2,3" in done.stdout
        assert "Clearing topic-level throttles on topics slow" in done.stdout
        assert topic_throttles(boot, "slow") == dict.fromkeys(THROTTLE_KEYS)
        for node in (1, 2, 3):
            assert broker_rates(cluster, node) == dict.fromkeys(RATE_KEYS)
        hw = high_watermarks(boot, "slow", [0])
        assert hw == {0: 4000}
        values = [v for _, v in read_all(boot, "slow", hw)[0]]
        assert values == [RECORD + b"%d" % i for i in range(4000)]


def test_cancelling_a_throttled_reassignment_half_way(zookeeper, tmp_path):
    with KafkaCluster(zookeeper, base_dir=tmp_path, overrides=OVERRIDES) as cluster:
        cluster.wait_all_see()
        boot = cluster.brokers[1].bootstrap
        create_topic(boot, "undo", replica_assignment=[[1]])
        wait_for_leaders(boot, "undo", 1)
        fill(boot, "undo", 3000)
        before = replica_bytes(cluster.brokers[1], "undo")

        # Move the partition to broker 3 alone, slowly: 3 joins, copies, and would then
        # become the only replica.
        plan = write_plan(tmp_path, "undo", [3])
        cli(boot, "reassign", "execute", plan, "--throttle", "200000")
        assert topic_throttles(boot, "undo") == {
            "leader.replication.throttled.replicas": "0:1",
            "follower.replication.throttled.replicas": "0:3",
        }
        eventually(
            lambda: len(replica_bytes(cluster.brokers[3], "undo")) > 0,
            budget_s=20,
            what="broker 3 to start copying",
        )
        listed = cli(boot, "reassign", "list").stdout
        assert "undo" in listed
        # Another reassignment meanwhile only with --additional, as Kafka's tool has it.
        create_topic(boot, "other", replica_assignment=[[2]])
        other = write_plan(tmp_path, "other", [2, 1])
        refused = cli(boot, "reassign", "execute", other, check=False)
        assert refused.returncode == 1
        assert "Use --additional" in refused.stderr
        cli(boot, "reassign", "execute", other, "--additional")
        eventually(
            lambda: list(partitions(boot, "other")[0].replicas) == [2, 1],
            budget_s=30,
            what="the additional reassignment",
        )
        assert len(replica_bytes(cluster.brokers[3], "undo")) < len(before)

        out = cli(boot, "reassign", "cancel", plan)
        assert "Successfully cancelled partition reassignments for: undo-0" in out.stdout
        assert "Clearing topic-level throttles on topics undo" in out.stdout
        # Back where it was: broker 1 alone, and broker 3's partial copy deleted.
        eventually(
            lambda: list(partitions(boot, "undo")[0].replicas) == [1],
            budget_s=30,
            what="the replicas to go back to [1]",
        )
        assert cli(boot, "reassign", "list").stdout.strip() == "No partition reassignments found."
        undo_dir = Path(cluster.brokers[3].config.log_dirs[0]) / "undo-0"
        eventually(lambda: not undo_dir.exists(), budget_s=30, what="broker 3's copy deleted")
        assert topic_throttles(boot, "undo") == dict.fromkeys(THROTTLE_KEYS)
        for node in (1, 2, 3):
            assert broker_rates(cluster, node) == dict.fromkeys(RATE_KEYS)
        assert replica_bytes(cluster.brokers[1], "undo") == before
        hw = high_watermarks(boot, "undo", [0])
        assert hw == {0: 3000}
        assert len(read_all(boot, "undo", hw)[0]) == 3000


def test_a_throttle_never_holds_back_replicas_in_sync(zookeeper, tmp_path):
    with KafkaCluster(zookeeper, base_dir=tmp_path, overrides=OVERRIDES) as cluster:
        cluster.wait_all_see()
        boot = cluster.brokers[1].bootstrap
        create_topic(
            boot,
            "steady",
            replica_assignment=[[1, 2, 3]],
            config={
                "min.insync.replicas": "3",
                # Every replica of the topic throttled, on both sides, at 10 KB/s.
                "leader.replication.throttled.replicas": "*",
                "follower.replication.throttled.replicas": "*",
            },
        )
        wait_for_leaders(boot, "steady", 1, isr_size=3)
        client = admin(boot)
        for node in (1, 2, 3):
            resource = ConfigResource(
                ConfigResource.Type.BROKER,
                str(node),
                incremental_configs=[
                    ConfigEntry(key, "10000", incremental_operation=AlterConfigOpType.SET)
                    for key in RATE_KEYS
                ],
            )
            client.incremental_alter_configs([resource])[resource].result(30)
        for node in (1, 2, 3):
            eventually(
                lambda node=node: broker_rates(cluster, node) == dict.fromkeys(RATE_KEYS, "10000"),
                budget_s=20,
                what=f"broker {node}'s rates",
            )
        # 3 MB with acks=all and min.insync.replicas=3: throttled, this would take five
        # minutes; the followers are in sync, so it is not.
        fill(boot, "steady", 3000)
        parts = partitions(boot, "steady")
        assert sorted(parts[0].isrs) == [1, 2, 3]
        leader = replica_bytes(cluster.brokers[1], "steady")
        for node in (2, 3):
            eventually(
                lambda node=node: replica_bytes(cluster.brokers[node], "steady") == leader,
                budget_s=20,
                what=f"broker {node}'s copy",
            )
