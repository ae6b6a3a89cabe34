"""Brokers talk to each other over their secured inter-broker listener: a 3-broker cluster
whose only listener is SSL (mutual TLS required), and one whose only listener is SASL_SSL
with SCRAM-SHA-512, each replicating an RF-3 topic (min.insync.replicas=3, so nothing is
acknowledged until both followers fetched it) to byte-identical follower logs."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
import trio
from confluent_kafka import Producer as CKProducer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as CKNewTopic
from kazoo.client import KazooClient
from security_pki import make_pki

from trio_broker.client import Consumer, Producer, TopicPartition
from trio_broker.client.admin import Admin
from trio_broker.client.admin_types import NewTopic
from trio_broker.config import BrokerConfig, ConfigError
from trio_broker.security.inter_broker import inter_broker_client_config, inter_broker_listener
from trio_broker.security.sasl import scram_credential
from trio_broker.testing import KafkaCluster

PARTITIONS = 3


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def segment_bytes(log_dir: Path, topic: str, partition: int) -> bytes:
    directory = log_dir / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def assert_replicas_identical(cluster: KafkaCluster, topic: str, budget_s: float = 30) -> None:
    """Every partition's log is the same bytes on all three brokers (and not empty)."""
    deadline = time.monotonic() + budget_s
    while True:
        logs = {
            p: [segment_bytes(b.log_dir, topic, p) for b in cluster.brokers.values()]
            for p in range(PARTITIONS)
        }
        same = all(copies[0] and len(set(copies)) == 1 for copies in logs.values())
        if same or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for p, copies in logs.items():
        assert copies[0], f"partition {p} is empty on broker 1"
        assert len(set(copies)) == 1, f"partition {p}: {[len(c) for c in copies]} bytes"


def ssl_overrides(pki) -> dict[str, str]:
    return {
        "ssl.keystore.location": str(pki.server),
        "ssl.truststore.location": str(pki.ca),
        "zookeeper.session.timeout.ms": "6000",
        "offsets.topic.replication.factor": "1",
    }


def test_ssl_only_cluster_replicates(zookeeper, tmp_path, pki):
    overrides = {
        **ssl_overrides(pki),
        "listeners": "SSL://127.0.0.1:0",
        "listener.security.protocol.map": "SSL:SSL",
        "inter.broker.listener.name": "SSL",
        "ssl.client.auth": "required",  # brokers must show their own certificate
    }
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=3, overrides=overrides) as cluster:
        client = {
            "bootstrap.servers": cluster.bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca),
            "ssl.certificate.location": str(pki.client_cert),
            "ssl.key.location": str(pki.client_key),
        }
        admin = AdminClient(client)
        topic = CKNewTopic("rep", PARTITIONS, 3, config={"min.insync.replicas": "3"})
        admin.create_topics([topic])["rep"].result(30)
        producer = CKProducer({**client, "acks": "all", "linger.ms": 5})
        errors = []
        for i in range(600):
            producer.produce(
                "rep",
                value=os.urandom(100) + b"%d" % i,
                key=b"k%d" % i,
                on_delivery=lambda err, _msg: err and errors.append(err),
            )
            if i % 100 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
        assert errors == []
        assert_replicas_identical(cluster, "rep")


SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="broker" password="broker-secret";'
)


def seed_scram_users(zookeeper, users: dict[str, str]) -> None:
    """As Kafka's operators do (kafka-configs --zookeeper) before the brokers start: the
    inter-broker user must exist for the brokers to reach each other."""
    zk = KazooClient(hosts=zookeeper.connect)
    zk.start()
    try:
        for user, password in users.items():
            salt = os.urandom(16)
            salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 4096)
            credential = scram_credential("SCRAM-SHA-512", salted, salt, 4096)
            doc = {"version": 1, "config": {"SCRAM-SHA-512": credential.to_text()}}
            zk.create(f"/kafka/config/users/{user}", json.dumps(doc).encode(), makepath=True)
    finally:
        zk.stop()


def test_sasl_ssl_scram_cluster_replicates_with_our_client(zookeeper, tmp_path, pki):
    seed_scram_users(zookeeper, {"broker": "broker-secret", "alice": "alice-secret"})
    overrides = {
        **ssl_overrides(pki),
        "listeners": "SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
    }
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=3, overrides=overrides) as cluster:
        config = {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pki.ca),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
        sent, got = trio.run(produce_and_consume, cluster.bootstrap, config)
        assert len(set(sent)) == 600
        assert sorted(got) == sorted(sent)
        assert_replicas_identical(cluster, "rep")


async def produce_and_consume(bootstrap: str, config: dict) -> tuple[list, list]:
    """Our client: an RF-3 topic, 600 records with acks=all, read back from offset 0."""
    async with Admin(bootstrap, config=config) as admin:
        await admin.create_topics(
            [NewTopic("rep", PARTITIONS, 3, configs={"min.insync.replicas": "3"})]
        )
    sent = []
    with trio.fail_after(60):
        async with Producer(bootstrap, config=config, acks="all") as producer:
            handles = [
                await producer.send_soon("rep", b"v%d" % i, key=b"k%d" % i) for i in range(600)
            ]
            for handle in handles:
                meta = await handle.wait()
                sent.append((meta.partition, meta.offset))
    got = []
    with trio.fail_after(30):
        async with Consumer(bootstrap, config=config) as consumer:
            consumer.assign([TopicPartition("rep", p) for p in range(PARTITIONS)])
            for p in range(PARTITIONS):
                consumer.seek(TopicPartition("rep", p), 0)
            while len(got) < 600:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend((r.partition, r.offset) for r in records)
    return sent, got


def test_inter_broker_client_config():
    plain = inter_broker_client_config(
        BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0"}), client_id="x"
    )
    assert (plain.security_protocol, plain.client_id) == ("PLAINTEXT", "x")
    props = {
        "listeners": "EXTERNAL://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "EXTERNAL:SSL,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.location": "/broker.pem",
        "listener.name.internal.ssl.truststore.location": "/internal-ca.pem",
        "ssl.truststore.location": "/ca.pem",
        "ssl.endpoint.identification.algorithm": "",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "listener.name.internal.scram-sha-256.sasl.jaas.config": (
            'ScramLoginModule required username="b" password="s";'
        ),
    }
    config = inter_broker_client_config(BrokerConfig.from_properties(props))
    assert config.security_protocol == "SASL_SSL"
    assert (config.ssl_cafile, config.ssl_certfile) == ("/internal-ca.pem", "/broker.pem")
    assert config.ssl_check_hostname is False
    assert (config.sasl_mechanism, config.sasl_username, config.sasl_password) == (
        "SCRAM-SHA-256",
        "b",
        "s",
    )
    del props["listener.name.internal.scram-sha-256.sasl.jaas.config"]
    with pytest.raises(ConfigError, match="scram-sha-256.sasl.jaas.config"):
        inter_broker_client_config(BrokerConfig.from_properties(props))
    # Without inter.broker.listener.name: the listener security.inter.broker.protocol names.
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "security.inter.broker.protocol": "SSL",
    }
    assert inter_broker_listener(BrokerConfig.from_properties(props)) == "SSL"
    del props["security.inter.broker.protocol"]
    assert inter_broker_listener(BrokerConfig.from_properties(props)) == "PLAINTEXT"
