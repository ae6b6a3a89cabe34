"""In a cluster, SCRAM credentials are in ZooKeeper's /config/users (Kafka's layout): made
through one broker, they authenticate on every broker, and no file holds them."""

from __future__ import annotations

import json
import time

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kazoo.client import KazooClient
from scram_client import scram_login

from trio_broker.errors import ErrorCode
from trio_broker.testing import KafkaCluster

JAAS = 'PlainLoginModule required user_admin="admin-pw";'
# SASL for clients (EXTERNAL), plaintext between brokers (INTERNAL).
OVERRIDES = {
    "listeners": "EXTERNAL://127.0.0.1:0,INTERNAL://127.0.0.1:0",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
    "sasl.jaas.config": JAAS,
}


def eventually(check, timeout_s=20):
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.1)


def test_credentials_in_zookeeper_work_on_every_broker(zookeeper, tmp_path):
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=2, overrides=OVERRIDES) as cluster:
        first, second = cluster.brokers[1], cluster.brokers[2]
        admin = AdminClient({"bootstrap.servers": "{}:{}".format(*first.addresses[1][:2])})
        upsert = UserScramCredentialUpsertion(
            "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"carol-pw"
        )
        admin.alter_user_scram_credentials([upsert])["carol"].result(30)
        zk = KazooClient(hosts=zookeeper.connect)
        zk.start()
        try:
            data, _ = zk.get("/kafka/config/users/carol")
            config = json.loads(data)["config"]
            assert set(config) == {"SCRAM-SHA-512"}
            assert "iterations=8192" in config["SCRAM-SHA-512"]
            assert "carol-pw" not in data.decode()
            changes = zk.get_children("/kafka/config/changes")
            assert any(c.startswith("config_change_") for c in changes)
            registration = json.loads(zk.get("/kafka/brokers/ids/2")[0])
            assert registration["listener_security_protocol_map"] == {
                "INTERNAL": "PLAINTEXT",
                "EXTERNAL": "SASL_PLAINTEXT",
            }
        finally:
            zk.stop()
        for broker in (first, second):
            sasl = broker.addresses[0][:2]
            assert eventually(
                lambda sasl=sasl: scram_login(sasl, "SCRAM-SHA-512", "carol", "carol-pw") == 0
            )
            assert (
                scram_login(sasl, "SCRAM-SHA-512", "carol", "wrong")
                == ErrorCode.SASL_AUTHENTICATION_FAILED
            )
        assert not list(tmp_path.rglob("scram-credentials"))
        # Metadata on the SASL listener gives every broker's SASL address.
        client = Producer(
            {
                "bootstrap.servers": "{}:{}".format(*first.addresses[0][:2]),
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "admin",
                "sasl.password": "admin-pw",
            }
        )
        brokers = client.list_topics(timeout=10).brokers
        # (and on INTERNAL, every broker's INTERNAL address)
        internal = AdminClient({"bootstrap.servers": "{}:{}".format(*first.addresses[1][:2])})
        assert sorted(
            (b.host, b.port) for b in internal.list_topics(timeout=10).brokers.values()
        ) == sorted([first.addresses[1][:2], second.addresses[1][:2]])
        assert sorted((b.host, b.port) for b in brokers.values()) == sorted(
            [first.addresses[0][:2], second.addresses[0][:2]]
        )
        # A deletion through the second broker reaches the first.
        admin2 = AdminClient({"bootstrap.servers": "{}:{}".format(*second.addresses[1][:2])})
        deletion = UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)
        admin2.alter_user_scram_credentials([deletion])["carol"].result(30)
        sasl = first.addresses[0][:2]
        assert eventually(
            lambda: (
                scram_login(sasl, "SCRAM-SHA-512", "carol", "carol-pw")
                == ErrorCode.SASL_AUTHENTICATION_FAILED
            )
        )
        # A broker started later loads what is there.
        admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"dave-pw"
                )
            ]
        )["dave"].result(30)
        third = cluster.add_broker(3)
        assert scram_login(third.addresses[0][:2], "SCRAM-SHA-256", "dave", "dave-pw") == 0


def test_a_user_name_with_a_slash_is_an_url_encoded_znode(zookeeper, tmp_path):
    user = "svc/orders"
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=2, overrides=OVERRIDES) as cluster:
        first, second = cluster.brokers[1], cluster.brokers[2]
        admin = AdminClient({"bootstrap.servers": "{}:{}".format(*first.addresses[1][:2])})
        upsert = UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"orders-pw"
        )
        admin.alter_user_scram_credentials([upsert])[user].result(30)
        zk = KazooClient(hosts=zookeeper.connect)
        zk.start()
        try:
            assert zk.get_children("/kafka/config/users") == ["svc%2Forders"]
        finally:
            zk.stop()
        sasl = second.addresses[0][:2]
        assert eventually(lambda: scram_login(sasl, "SCRAM-SHA-256", user, "orders-pw") == 0)
