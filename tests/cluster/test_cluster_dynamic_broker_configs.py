"""In a cluster, dynamic broker configs live in ZooKeeper's /config/brokers (Kafka's
layout): the cluster-wide default set through one broker reaches every broker, a broker
started later included; a per-broker value stays that broker's; no log dir holds them."""

from __future__ import annotations

import json
import socket

from clustertest_helpers import FAST_SESSION, eventually
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kazoo.client import KazooClient
from wire import request_of, roundtrip

from trio_broker.protocol._generated.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
)
from trio_broker.testing import KafkaCluster


def set_default(broker, key: str, value: str | None) -> int:
    """IncrementalAlterConfigs on the cluster default "" (confluent-kafka cannot name it):
    SET `value`, or DELETE the key when it is None."""
    op = 0 if value is not None else 1
    resource = AlterConfigsResource(
        resource_type=4,
        resource_name="",
        configs=[AlterableConfig(name=key, config_operation=op, value=value)],
    )
    with socket.create_connection((broker.host, broker.port), timeout=30) as sock:
        response = roundtrip(sock, request_of(44, resources=[resource], validate_only=False), 1)
    return response.responses[0].error_code


def broker_config(broker, key: str) -> tuple[str, int]:
    """`key` as DescribeConfigs on `broker`'s own BROKER resource answers it."""
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    node_id = broker.config.node_id
    resource = ConfigResource(ResourceType.BROKER, str(node_id))
    (future,) = client.describe_configs([resource]).values()
    entry = future.result(30)[key]
    return entry.value, entry.source


def test_cluster_default_and_per_broker_configs_follow_zookeeper(zookeeper, tmp_path):
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=2, overrides=FAST_SESSION) as cluster:
        first, second = cluster.brokers[1], cluster.brokers[2]
        assert set_default(first, "log.retention.ms", "3600000") == 0
        default = ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        eventually(
            lambda: broker_config(second, "log.retention.ms") == default,
            budget_s=20,
            what="the cluster default on the second broker",
        )
        assert broker_config(first, "log.retention.ms") == default

        # A per-broker value, sent (as admin clients do) to the broker it names.
        client = AdminClient({"bootstrap.servers": second.bootstrap})
        resource = ConfigResource(
            ResourceType.BROKER,
            "2",
            incremental_configs=[
                ConfigEntry("num.io.threads", "3", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        client.incremental_alter_configs([resource])[resource].result(30)
        assert broker_config(second, "num.io.threads") == (
            "3",
            ConfigSource.DYNAMIC_BROKER_CONFIG.value,
        )
        assert broker_config(first, "num.io.threads")[1] != ConfigSource.DYNAMIC_BROKER_CONFIG.value

        zk = KazooClient(hosts=zookeeper.connect)
        zk.start()
        try:
            stored = json.loads(zk.get("/kafka/config/brokers/<default>")[0])
            assert stored == {"version": 1, "config": {"log.retention.ms": "3600000"}}
            stored = json.loads(zk.get("/kafka/config/brokers/2")[0])
            assert stored["config"] == {"num.io.threads": "3"}
        finally:
            zk.stop()
        assert not list(tmp_path.rglob("dynamic-broker-configs.json"))

        # A broker that joins later starts with the cluster default.
        third = cluster.add_broker(3)
        assert broker_config(third, "log.retention.ms") == default
        # The default removed through the new broker: gone on the first.
        assert set_default(third, "log.retention.ms", None) == 0
        eventually(
            lambda: (
                broker_config(first, "log.retention.ms")[1]
                != ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
            ),
            budget_s=20,
            what="the default's removal on the first broker",
        )
