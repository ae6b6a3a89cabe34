"""In a cluster, ACLs are in ZooKeeper under Kafka's paths: made through one broker, they
hold on every broker, and a broker started later loads them."""

from __future__ import annotations

import json
import time

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kazoo.client import KazooClient

from trio_broker.testing import KafkaCluster

ANY = AclBindingFilter(
    ResourceType.ANY,
    None,
    ResourcePatternType.ANY,
    None,
    None,
    AclOperation.ANY,
    AclPermissionType.ANY,
)


def listed(admin):
    return sorted(
        (b.restype, b.name, b.resource_pattern_type, b.principal, b.operation)
        for b in admin.describe_acls(ANY).result(30)
    )


def eventually(check, expected, timeout_s=20):
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value == expected or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_acls_in_zookeeper_hold_on_every_broker(zookeeper, tmp_path):
    overrides = {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        # The PLAINTEXT clients (and the brokers themselves) are ANONYMOUS.
        "super.users": "User:ANONYMOUS",
    }
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=2, overrides=overrides) as cluster:
        first = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
        second = AdminClient({"bootstrap.servers": cluster.brokers[2].bootstrap})
        bindings = [
            AclBinding(
                ResourceType.TOPIC,
                "orders",
                ResourcePatternType.LITERAL,
                "User:alice",
                "*",
                AclOperation.READ,
                AclPermissionType.ALLOW,
            ),
            AclBinding(
                ResourceType.TOPIC,
                "p-",
                ResourcePatternType.PREFIXED,
                "User:alice",
                "*",
                AclOperation.WRITE,
                AclPermissionType.ALLOW,
            ),
            AclBinding(
                ResourceType.GROUP,
                "g",
                ResourcePatternType.LITERAL,
                "User:bob",
                "*",
                AclOperation.ALL,
                AclPermissionType.DENY,
            ),
        ]
        for future in first.create_acls(bindings).values():
            future.result(30)
        expected = listed(first)
        assert len(expected) == 3
        assert eventually(lambda: listed(second), expected) == expected
        zk = KazooClient(hosts=zookeeper.connect)
        zk.start()
        try:
            data, _ = zk.get("/kafka/kafka-acl/Topic/orders")
            assert json.loads(data)["acls"] == [
                {
                    "principal": "User:alice",
                    "permissionType": "Allow",
                    "operation": "Read",
                    "host": "*",
                }
            ]
            data, _ = zk.get("/kafka/kafka-acl-extended/prefixed/Topic/p-")
            assert json.loads(data)["acls"][0]["operation"] == "Write"
            data, _ = zk.get("/kafka/kafka-acl/Group/g")
            assert json.loads(data)["acls"][0]["permissionType"] == "Deny"
            assert zk.get_children("/kafka/kafka-acl-changes")
            assert zk.get_children("/kafka/kafka-acl-extended-changes")
        finally:
            zk.stop()
        assert not list(tmp_path.rglob("acls.json"))
        # Deleted through the second broker, gone on the first.
        deleting = AclBindingFilter(
            ResourceType.TOPIC,
            None,
            ResourcePatternType.ANY,
            "User:alice",
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        assert len(list(second.delete_acls([deleting]).values())[0].result(30)) == 2
        remaining = [e for e in expected if e[1] == "g"]
        assert eventually(lambda: listed(first), remaining) == remaining
        third = cluster.add_broker(3)
        assert listed(AdminClient({"bootstrap.servers": third.bootstrap})) == remaining
