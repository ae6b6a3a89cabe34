"""In a cluster, client quotas are in ZooKeeper's /config (Kafka's layout): set through one
broker, every broker enforces and describes them."""

from __future__ import annotations

import json
import time

from kazoo.client import KazooClient
from test_quotas import alter, describe

from trio_broker.testing import KafkaCluster


def eventually(check, expected, timeout_s=20):
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value == expected or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_quotas_in_zookeeper_reach_every_broker(zookeeper, tmp_path):
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=2) as cluster:
        first, second = cluster.brokers[1], cluster.brokers[2]
        assert alter(first, [("user", "alice")], [("producer_byte_rate", 1024.0)]) == (0, None)
        assert (
            alter(first, [("client-id", "c1"), ("user", None)], [("consumer_byte_rate", 5e5)])[0]
            == 0
        )
        expected = [
            ((("client-id", "c1"), ("user", None)), {"consumer_byte_rate": 5e5}),
            ((("user", "alice"),), {"producer_byte_rate": 1024.0}),
        ]
        assert eventually(lambda: describe(second, []), expected) == expected
        zk = KazooClient(hosts=zookeeper.connect)
        zk.start()
        try:
            config = json.loads(zk.get("/kafka/config/users/alice")[0])["config"]
            assert float(config["producer_byte_rate"]) == 1024.0
            path = "/kafka/config/users/<default>/clients/c1"
            assert float(json.loads(zk.get(path)[0])["config"]["consumer_byte_rate"]) == 5e5
        finally:
            zk.stop()
        assert not list(tmp_path.rglob("client-quotas.json"))
        # Removed through the second broker, gone on the first; a new broker loads the rest.
        assert alter(second, [("user", "alice")], [("producer_byte_rate", None)]) == (0, None)
        assert eventually(lambda: describe(first, []), expected[:1]) == expected[:1]
        third = cluster.add_broker(3)
        assert describe(third, []) == expected[:1]


def test_names_any_character_become_kafkas_url_encoded_znodes(zookeeper, tmp_path):
    # A `/` in a user name would otherwise make a path of two znodes (or fail).
    user, client = "CN=svc/orders,O=corp", "app 1*"
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=2) as cluster:
        first, second = cluster.brokers[1], cluster.brokers[2]
        entity = [("user", user), ("client-id", client)]
        assert alter(first, entity, [("producer_byte_rate", 2048.0)]) == (0, None)
        expected = [((("client-id", client), ("user", user)), {"producer_byte_rate": 2048.0})]
        assert eventually(lambda: describe(second, []), expected) == expected
        zk = KazooClient(hosts=zookeeper.connect)
        zk.start()
        try:
            assert zk.get_children("/kafka/config/users") == ["CN%3Dsvc%2Forders%2CO%3Dcorp"]
            path = "/kafka/config/users/CN%3Dsvc%2Forders%2CO%3Dcorp/clients/app%201%2A"
            assert float(json.loads(zk.get(path)[0])["config"]["producer_byte_rate"]) == 2048.0
        finally:
            zk.stop()
        # A broker started later reads the encoded names back as the names.
        third = cluster.add_broker(3)
        assert describe(third, []) == expected
