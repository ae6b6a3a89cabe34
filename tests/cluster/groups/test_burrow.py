"""Burrow (LinkedIn's consumer lag checker, Debian's `burrow`) watching a trio-broker: it
reads the groups' commits out of `__consumer_offsets` itself, decoding Kafka's record
format with its own code, and the partitions' end offsets with ListOffsets v0. The lag it
reports through its HTTP API is the one the test made: produced minus committed."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from trio_broker.testing import KafkaCluster, free_port

TIMEOUT = 30


def get(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v3/kafka/local{path}", timeout=10) as r:
        return json.loads(r.read())


def wait_for(check, budget_s: float, what: str):
    deadline = time.monotonic() + budget_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except OSError as exc:  # Burrow's HTTP server not up yet
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {budget_s} s (last: {last!r})")


def produce(bootstrap: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        producer.produce("lagged", b"v%d" % i, partition=i % 2)
    assert producer.flush(TIMEOUT) == 0


def commit(bootstrap: str, offsets: dict[int, int]) -> None:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "billing", "enable.auto.commit": False}
    )
    consumer.commit(
        offsets=[TopicPartition("lagged", p, o) for p, o in offsets.items()], asynchronous=False
    )
    consumer.close()


def lag_of(port: int) -> dict[int, int] | None:
    status = get(port, "/consumer/billing/lag")["status"]
    if status["status"] == "NOTFOUND":
        return None
    return {p["partition"]: p["current_lag"] for p in status["partitions"]}


@pytest.mark.parametrize("where", ["lone broker", "cluster"])
def test_burrow_reports_the_lag_of_a_group(kafka_broker_factory, zookeeper, tmp_path, where):
    burrow = shutil.which("Burrow")
    if burrow is None:
        pytest.skip("Burrow is not installed (apt-get install burrow; .ci/run installs it)")
    with contextlib.ExitStack() as stack:
        if where == "cluster":
            # Three brokers on the same ZooKeeper (Burrow keeps to /burrow): the commits
            # and the end offsets come from each partition's leader.
            cluster = stack.enter_context(
                KafkaCluster(zookeeper, base_dir=tmp_path / "cluster", chroot="/kafka")
            )
            bootstrap = cluster.bootstrap
            replicas = 3
        else:
            bootstrap = kafka_broker_factory().bootstrap
            replicas = 1
        check_lag(burrow, bootstrap, replicas, zookeeper, tmp_path)


def check_lag(burrow: str, bootstrap: str, replicas: int, zookeeper, tmp_path) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("lagged", 2, replicas)])["lagged"].result(TIMEOUT)
    # Burrow reads __consumer_offsets from its start, and gives up if it is not there yet
    # (as against a new Kafka cluster): a first commit creates it.
    commit(bootstrap, {0: 0, 1: 0})
    wait_for(
        lambda: all(
            p.leader >= 0
            for p in admin.list_topics("__consumer_offsets", timeout=10)
            .topics["__consumer_offsets"]
            .partitions.values()
        ),
        budget_s=30,
        what="__consumer_offsets",
    )
    produce(bootstrap, 1000)  # 500 a partition

    port = free_port()
    (tmp_path / "burrow.toml").write_text(
        f"""
[general]
pidfile="{tmp_path}/burrow.pid"
[logging]
level="info"
[zookeeper]
servers=["{zookeeper.connect}"]
timeout=6
root-path="/burrow"
[client-profile.test]
client-id="burrow-test"
kafka-version="1.0.0"
[cluster.local]
class-name="kafka"
servers={json.dumps(bootstrap.split(","))}
client-profile="test"
topic-refresh=1
offset-refresh=1
[consumer.local]
class-name="kafka"
cluster="local"
servers={json.dumps(bootstrap.split(","))}
client-profile="test"
[httpserver.default]
address="127.0.0.1:{port}"
[evaluator.default]
class-name="caching"
expire-cache=1
[storage.default]
class-name="inmemory"
workers=2
intervals=10
expire-group=604800
min-distance=1
"""
    )
    log = open(tmp_path / "burrow.out", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [burrow, "--config-dir", str(tmp_path)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        # Its cluster module knows the topic (Metadata) and the partitions' end offsets
        # (ListOffsets v0) before the commits arrive, or it drops them as unknown.
        wait_for(lambda: "lagged" in get(port, "/topic")["topics"], budget_s=30, what="the topic")
        wait_for(
            lambda: get(port, "/topic/lagged")["offsets"] == [500, 500],
            budget_s=30,
            what="the end offsets",
        )
        commit(bootstrap, {0: 300, 1: 450})
        assert wait_for(
            lambda: lag_of(port) == {0: 200, 1: 50} and lag_of(port),
            budget_s=30,
            what="Burrow's lag of billing",
        ) == {0: 200, 1: 50}
        assert "billing" in get(port, "/consumer")["consumers"]
        # The consumer catches up: lag 0.
        commit(bootstrap, {0: 500, 1: 500})
        wait_for(lambda: lag_of(port) == {0: 0, 1: 0}, budget_s=30, what="no lag")
    finally:
        proc.kill()  # it takes 10 s over a SIGTERM, and holds nothing worth a clean stop
        proc.wait(10)
        log.close()
    text = (tmp_path / "burrow.out").read_text()
    # Nothing of ours it could not read, but the group metadata records (Kafka 2.3+'s
    # version 3, newer than this Burrow knows; Kafka's own brokers write the same).
    failures = [
        line
        for line in text.splitlines()
        if '"failed to decode"' in line and '"message_type":"metadata"' not in line
    ]
    assert not failures, failures[:3]
    assert "failed to fetch offsets" not in text
