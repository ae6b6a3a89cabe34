"""Brokers join a cluster through ZooKeeper: registration, cluster id, Metadata everywhere."""

from __future__ import annotations

import subprocess
import sys
import time

from clustertest_helpers import FAST_SESSION, eventually, view
from confluent_kafka.admin import AdminClient

from trio_broker.log.checkpoints import read_meta_properties, write_meta_properties
from trio_broker.testing import KafkaCluster


def test_three_brokers_agree_on_brokers_controller_and_cluster_id(kafka_cluster, zk_view, kcat):
    brokers = kafka_cluster.brokers
    expected = sorted((n, "127.0.0.1", b.port) for n, b in brokers.items())
    cluster_id = zk_view.json("/cluster/id")["id"]
    controller = zk_view.controller()
    assert controller in brokers

    # Every broker's own Metadata answer lists all three, the same controller and cluster id.
    for broker in brokers.values():
        eventually(
            lambda b=broker: view(b.bootstrap) == (cluster_id, controller, expected),
            budget_s=10,
            what=f"Metadata of {broker.bootstrap}",
        )

    # A real client sees the same.
    md = AdminClient({"bootstrap.servers": brokers[2].bootstrap}).list_topics(timeout=10)
    assert md.cluster_id == cluster_id
    assert md.controller_id == controller
    assert sorted((b.id, b.host, b.port) for b in md.brokers.values()) == expected

    # kcat -L on any broker lists all brokers and marks the controller.
    out = subprocess.run(
        [kcat, "-L", "-b", brokers[3].bootstrap], capture_output=True, text=True, timeout=30
    ).stdout
    assert " 3 brokers:" in out
    for node_id, host, port in expected:
        line = f"broker {node_id} at {host}:{port}"
        assert (line + " (controller)" if node_id == controller else line) in out

    # Kafka's layout in ZooKeeper: the registration JSON (version 5), the persistent paths.
    for node_id, host, port in expected:
        reg = zk_view.json(f"/brokers/ids/{node_id}")
        assert reg["version"] == 5
        assert reg["endpoints"] == [f"PLAINTEXT://{host}:{port}"]
        assert reg["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
        assert (reg["host"], reg["port"], reg["jmx_port"], reg["features"]) == (host, port, -1, {})
        assert int(reg["timestamp"]) > 0 and "rack" not in reg
        assert zk_view.owner(f"/brokers/ids/{node_id}") != 0  # ephemeral
    assert zk_view.owner("/controller") != 0
    assert zk_view.json("/controller")["version"] == 1
    assert zk_view.controller_epoch() == 1
    assert zk_view.json("/cluster/id")["version"] == "1"
    for path in (
        "/brokers/topics",
        "/config/topics",
        "/config/changes",
        "/admin/delete_topics",
        "/isr_change_notification",
        "/latest_producer_id_block",
    ):
        assert zk_view.exists(path) is not None, path

    # Each log dir now belongs to that cluster.
    for broker in brokers.values():
        assert read_meta_properties(broker.log_dir)["cluster.id"] == cluster_id


def test_rack_is_registered_and_reported(zookeeper, tmp_path, zk_view):
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=0) as cluster:
        broker = cluster.add_broker(7, {"broker.rack": "rack-a"})
        assert zk_view.json("/brokers/ids/7")["rack"] == "rack-a"
        m = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
        assert m.controller_id == 7 and list(m.brokers) == [7]


def _serve(cluster: KafkaCluster, node_id: int, overrides=None) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "trio_broker", "serve"]
    for key, value in cluster.broker_config(node_id, overrides).items():
        args += ["--override", f"{key}={value}"]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def test_a_duplicate_node_id_exits_with_a_clear_message(zookeeper, tmp_path, zk_view):
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=1) as cluster:
        owner = zk_view.owner("/brokers/ids/1")
        # It waits for the registration to go (it might be its own, from before a
        # crash) for its session timeout and a margin, 3 + 2 s here, then gives up.
        started = time.monotonic()
        done = _serve(
            cluster,
            1,
            {"log.dirs": str(tmp_path / "another"), "zookeeper.session.timeout.ms": "3000"},
        )
        assert done.returncode == 1, done.stderr[-2000:]
        assert time.monotonic() - started >= 5
        assert "node.id 1 is already registered in ZooKeeper" in done.stderr
        assert "still there after 5.0 s" in done.stderr
        assert "Traceback" not in done.stderr
        # The broker that holds the id is untouched and still the whole cluster.
        assert zk_view.owner("/brokers/ids/1") == owner
        assert view(cluster.brokers[1].bootstrap)[1:] == (
            1,
            [(1, "127.0.0.1", cluster.brokers[1].port)],
        )


def test_a_broker_restarted_at_once_after_kill_9_registers_and_leads_again(
    zookeeper, tmp_path, zk_view
):
    """Started again before its old session timed out, the broker finds its old
    registration in ZooKeeper: it waits for that session to expire instead of exiting."""
    from failover_helpers import create_topic, read_all, wait_for_leaders
    from kafka import KafkaProducer

    overrides = {**FAST_SESSION, "zookeeper.session.timeout.ms": "3000"}
    with KafkaCluster(
        zookeeper, base_dir=tmp_path, size=3, overrides=overrides, processes=True
    ) as cluster:
        b3 = cluster.brokers[3]
        create_topic(b3.bootstrap, "solo", replica_assignment=[[3]])
        create_topic(b3.bootstrap, "trio", replica_assignment=[[3, 1, 2]])
        wait_for_leaders(cluster.bootstrap, "solo", 1)
        wait_for_leaders(cluster.bootstrap, "trio", 1, isr_size=3)
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        producer.send("solo", b"before").get(30)
        old_owner = zk_view.owner("/brokers/ids/3")

        b3.kill()
        assert zk_view.owner("/brokers/ids/3") == old_owner  # its session lives on
        killed_at = time.monotonic()
        b3.start_again()  # returns once it registered
        print(f"restarted at once: registered {time.monotonic() - killed_at:.1f} s after kill -9")
        new_owner = zk_view.owner("/brokers/ids/3")
        assert new_owner not in (None, old_owner)
        lines = "".join(b3.lines)
        assert "is registered by another session" in lines, lines[-3000:]
        assert "already registered" not in lines

        # It leads its partition again, with what it had, and rejoins the other's ISR.
        parts = wait_for_leaders(cluster.bootstrap, "solo", 1, budget_s=30)
        assert parts[0].leader == 3
        producer.send("solo", b"after").get(30)
        producer.close()
        assert [v for _, v in read_all(b3.bootstrap, "solo", {0: 2})[0]] == [b"before", b"after"]
        wait_for_leaders(cluster.bootstrap, "trio", 1, isr_size=3, budget_s=30)


def test_a_log_dir_of_another_cluster_is_refused(zookeeper, tmp_path, zk_view):
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=1) as cluster:
        cluster_id = zk_view.json("/cluster/id")["id"]
        stray = tmp_path / "broker-2"
        stray.mkdir()
        write_meta_properties(
            stray, {"version": "1", "node.id": "2", "cluster.id": "AAAAAAAAAAAAAAAAAAAAAA"}
        )
        done = _serve(cluster, 2)
        assert done.returncode == 1, done.stderr[-2000:]
        assert (
            f"The cluster id {cluster_id} (from ZooKeeper at {cluster.zookeeper_connect}) "
            "doesn't match cluster.id=AAAAAAAAAAAAAAAAAAAAAA stored in"
        ) in done.stderr
        assert "trying to join the wrong cluster" in done.stderr
        # Refused before registering, and the log dir is as it was.
        assert zk_view.broker_ids() == [1]
        assert read_meta_properties(stray)["cluster.id"] == "AAAAAAAAAAAAAAAAAAAAAA"

        # A configured cluster.id that is not ZooKeeper's is refused the same way.
        done = _serve(cluster, 3, {"cluster.id": "BBBBBBBBBBBBBBBBBBBBBB"})
        assert done.returncode == 1
        assert f"cluster id {cluster_id} in ZooKeeper doesn't match cluster.id=BBBB" in (
            done.stderr
        )
        assert zk_view.broker_ids() == [1]


def test_the_first_broker_writes_a_configured_cluster_id(zookeeper, tmp_path, zk_view):
    overrides = {"cluster.id": "CCCCCCCCCCCCCCCCCCCCCC"}
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=2, overrides=overrides) as cluster:
        assert zk_view.json("/cluster/id")["id"] == "CCCCCCCCCCCCCCCCCCCCCC"
        for broker in cluster.brokers.values():
            assert view(broker.bootstrap)[0] == "CCCCCCCCCCCCCCCCCCCCCC"
