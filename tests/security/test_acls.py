"""ACLs with Kafka's semantics, enforced on real clients' requests, kept across restarts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from plain_sasl import USERS, start

from trio_broker.config import BrokerConfig
from trio_broker.security.acl import AclBinding as Binding
from trio_broker.security.acl import Op, Pattern, Permission, Resource
from trio_broker.security.authorizer import Authorizer


def conf(broker, user, **extra):
    return {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
        **extra,
    }


def admin_of(broker, user="admin"):
    return AdminClient(conf(broker, user))


def create_topics(admin, *names):
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(30)


def allow(principal, rtype, name, op, pattern=ResourcePatternType.LITERAL, deny=False):
    return AclBinding(
        rtype,
        name,
        pattern,
        principal,
        "*",
        op,
        AclPermissionType.DENY if deny else AclPermissionType.ALLOW,
    )


def add_acls(admin, *bindings):
    for future in admin.create_acls(list(bindings)).values():
        future.result(30)


def produce(broker, user, topic, n=5):
    producer = Producer(conf(broker, user, **{"linger.ms": 1, "message.timeout.ms": 10000}))
    errors = []
    for i in range(n):
        producer.produce(
            topic, value=f"{user}-{i}".encode(), on_delivery=lambda e, m: errors.append(e)
        )
    producer.flush(30)
    return errors


def test_read_only_principal_consumes_and_commits_but_cannot_produce(kafka_broker_factory):
    broker = start(kafka_broker_factory)
    admin = admin_of(broker)
    create_topics(admin, "orders")
    assert produce(broker, "admin", "orders", 10) == [None] * 10  # a super user
    add_acls(
        admin,
        allow("User:alice", ResourceType.TOPIC, "orders", AclOperation.READ),
        allow("User:alice", ResourceType.GROUP, "g1", AclOperation.READ),
    )
    consumer = Consumer(
        conf(
            broker,
            "alice",
            **{"group.id": "g1", "auto.offset.reset": "earliest", "enable.auto.commit": False},
        )
    )
    consumer.subscribe(["orders"])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    assert got == [f"admin-{i}".encode() for i in range(10)]
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition("orders", 0)], timeout=10)
    assert committed[0].offset == 10
    consumer.close()
    errors = produce(broker, "alice", "orders", 3)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3
    # Another group is not hers.
    other = Consumer(conf(broker, "alice", **{"group.id": "g2", "auto.offset.reset": "earliest"}))
    other.subscribe(["orders"])
    error = None
    deadline = time.monotonic() + 20
    while error is None and time.monotonic() < deadline:
        msg = other.poll(0.5)
        if msg is not None and msg.error():
            error = msg.error()
    other.close()
    assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_prefixed_deny_metadata_filtering_and_auto_create(kafka_broker_factory):
    broker = start(kafka_broker_factory)
    admin = admin_of(broker)
    create_topics(admin, "logs-app", "logs-secret", "hidden")
    add_acls(
        admin,
        allow(
            "User:alice",
            ResourceType.TOPIC,
            "logs-",
            AclOperation.WRITE,
            ResourcePatternType.PREFIXED,
        ),
        allow("User:alice", ResourceType.TOPIC, "logs-secret", AclOperation.ALL, deny=True),
    )
    assert produce(broker, "alice", "logs-app") == [None] * 5
    denied = produce(broker, "alice", "logs-secret")
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 5
    denied = produce(broker, "alice", "hidden")
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 5
    # Metadata for all topics shows only what alice may describe (WRITE implies DESCRIBE).
    topics = Producer(conf(broker, "alice")).list_topics(timeout=10).topics
    assert sorted(topics) == ["logs-app"]
    assert "hidden" in admin.list_topics(timeout=10).topics
    assert sorted(Producer(conf(broker, "bob")).list_topics(timeout=10).topics) == []
    # Auto-creation needs CREATE: alice may write logs-new, but not create it...
    denied = produce(broker, "alice", "logs-new", 1)
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert "logs-new" not in admin.list_topics(timeout=10).topics
    # ...until she may.
    add_acls(
        admin,
        allow(
            "User:alice",
            ResourceType.TOPIC,
            "logs-",
            AclOperation.CREATE,
            ResourcePatternType.PREFIXED,
        ),
    )
    assert produce(broker, "alice", "logs-new", 1) == [None]
    assert "logs-new" in admin.list_topics(timeout=10).topics
    # Administration needs its own permissions.
    alice_admin = admin_of(broker, "alice")
    with pytest.raises(KafkaException, match="AUTHORIZATION|uthoriz"):
        create_topics(admin_of(broker, "bob"), "bobs")
    with pytest.raises(KafkaException, match="AUTHORIZATION|uthoriz"):
        add_acls(alice_admin, allow("User:alice", ResourceType.TOPIC, "x", AclOperation.ALL))
    # What each may do, as DescribeCluster and Metadata report it.
    ops = alice_admin.describe_cluster(include_authorized_operations=True).result(30)
    assert not ops.authorized_operations  # she may not even describe the cluster
    add_acls(
        admin, allow("User:alice", ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)
    )
    ops = alice_admin.describe_cluster(include_authorized_operations=True).result(30)
    assert ops.authorized_operations == [AclOperation.DESCRIBE]
    ops = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert AclOperation.ALTER in ops.authorized_operations  # a super user
    described = alice_admin.describe_topics(
        TopicCollection(["logs-app"]), include_authorized_operations=True
    )["logs-app"].result(30)
    assert set(described.authorized_operations) == {
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
    }


def test_acls_survive_a_restart_and_kafka_python_lists_them(kafka_broker_factory):
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ACLResourcePatternType as KPattern
    from kafka.admin import ResourceType as KType

    broker = start(kafka_broker_factory)
    admin = admin_of(broker)
    create_topics(admin, "orders")
    add_acls(
        admin,
        allow("User:alice", ResourceType.TOPIC, "orders", AclOperation.READ),
        allow(
            "User:alice",
            ResourceType.TOPIC,
            "pre-",
            AclOperation.WRITE,
            ResourcePatternType.PREFIXED,
        ),
        allow("User:bob", ResourceType.GROUP, "*", AclOperation.READ, deny=True),
    )
    log_dir = broker.log_dir
    broker.stop()
    broker = start(kafka_broker_factory, **{"log.dirs": str(log_dir)})
    assert produce(broker, "alice", "orders", 1)[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    any_filter = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    listed = (admin := admin_of(broker)).describe_acls(any_filter).result(30)
    assert sorted((b.principal, b.name, b.operation, b.permission_type) for b in listed) == [
        ("User:alice", "orders", AclOperation.READ, AclPermissionType.ALLOW),
        ("User:alice", "pre-", AclOperation.WRITE, AclPermissionType.ALLOW),
        ("User:bob", "*", AclOperation.READ, AclPermissionType.DENY),
    ]
    kadmin = KafkaAdminClient(
        bootstrap_servers=broker.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="admin",
        sasl_plain_password="admin-pw",
    )
    acls, error = kadmin.describe_acls(
        ACLFilter(
            principal=None,
            host="*",
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(KType.TOPIC, None, KPattern.ANY),
        )
    )
    assert error is KafkaError.NO_ERROR or getattr(error, "errno", 0) == 0
    assert sorted((a.principal, a.resource_pattern.resource_name) for a in acls) == [
        ("User:alice", "orders"),
        ("User:alice", "pre-"),
    ]
    # Deleting through the filter removes them, for good.
    deleted = admin.delete_acls(
        [
            AclBindingFilter(
                ResourceType.TOPIC,
                None,
                ResourcePatternType.ANY,
                "User:alice",
                None,
                AclOperation.ANY,
                AclPermissionType.ANY,
            )
        ]
    )
    assert len(list(deleted.values())[0].result(30)) == 2
    kadmin.close()
    broker.stop()
    broker = start(kafka_broker_factory, **{"log.dirs": str(log_dir)})
    listed = (admin := admin_of(broker)).describe_acls(any_filter).result(30)
    assert [(b.principal, b.name) for b in listed] == [("User:bob", "*")]


def test_without_an_authorizer_acl_apis_are_disabled(kafka_broker):
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    with pytest.raises(KafkaException, match="SECURITY_DISABLED|No Authorizer"):
        for future in admin.create_acls(
            [allow("User:x", ResourceType.TOPIC, "t", AclOperation.READ)]
        ).values():
            future.result(30)


def test_bad_acl_is_refused(kafka_broker_factory):
    broker = start(kafka_broker_factory)
    with pytest.raises(KafkaException, match="INVALID_REQUEST|kafka-cluster|Invalid"):
        add_acls(
            admin_of(broker),
            allow("User:x", ResourceType.BROKER, "not-the-cluster", AclOperation.ALTER),
        )


# --- the authorizer's rules, directly --------------------------------------------------


def make_authorizer(tmp_path: Path, *bindings, **config) -> Authorizer:
    tmp_path.mkdir(exist_ok=True)
    cfg = BrokerConfig.from_properties({"log.dirs": str(tmp_path), **config})
    az = Authorizer(cfg, tmp_path)
    az.store.add(bindings)
    return az


def b(
    name,
    op,
    principal="User:alice",
    pattern=Pattern.LITERAL,
    deny=False,
    rtype=Resource.TOPIC,
    host="*",
):
    return Binding(
        resource_type=rtype,
        resource_name=name,
        pattern_type=pattern,
        principal=principal,
        host=host,
        operation=op,
        permission=Permission.DENY if deny else Permission.ALLOW,
    )


def test_authorizer_semantics(tmp_path):
    az = make_authorizer(
        tmp_path,
        b("t", Op.READ),
        b("pre", Op.WRITE, pattern=Pattern.PREFIXED),
        b("pre-x", Op.ALL, deny=True),
        b("*", Op.DESCRIBE, principal="User:*"),
        b("c", Op.ALTER_CONFIGS, host="10.0.0.1"),
        b("g", Op.DESCRIBE, deny=True, rtype=Resource.GROUP),
        b("g", Op.READ, rtype=Resource.GROUP),
        **{"super.users": "User:root"},
    )
    auth = az.authorize
    assert auth("User:alice", "1.2.3.4", Op.READ, Resource.TOPIC, "t")
    assert auth("User:alice", "1.2.3.4", Op.DESCRIBE, Resource.TOPIC, "t")  # implied
    assert not auth("User:alice", "1.2.3.4", Op.WRITE, Resource.TOPIC, "t")
    assert auth("User:alice", "1.2.3.4", Op.WRITE, Resource.TOPIC, "prefix-ok")
    assert not auth("User:alice", "1.2.3.4", Op.WRITE, Resource.TOPIC, "pre-x")  # DENY wins
    assert not auth("User:alice", "1.2.3.4", Op.DESCRIBE, Resource.TOPIC, "pre-x")
    assert auth("User:bob", "1.2.3.4", Op.DESCRIBE, Resource.TOPIC, "anything")  # wildcards
    assert not auth("User:bob", "1.2.3.4", Op.READ, Resource.TOPIC, "anything")
    assert auth("User:alice", "10.0.0.1", Op.DESCRIBE_CONFIGS, Resource.TOPIC, "c")
    assert not auth("User:alice", "10.0.0.2", Op.ALTER_CONFIGS, Resource.TOPIC, "c")
    # A DENY of DESCRIBE does not deny READ; READ still implies DESCRIBE unless denied.
    assert auth("User:alice", "1.2.3.4", Op.READ, Resource.GROUP, "g")
    assert not auth("User:alice", "1.2.3.4", Op.DESCRIBE, Resource.GROUP, "g")
    assert auth("User:root", "1.2.3.4", Op.ALL, Resource.CLUSTER, "kafka-cluster")
    # No ACL applies to a group "free": closed by default...
    assert not auth("User:alice", "1.2.3.4", Op.READ, Resource.GROUP, "free")
    # ...and open with allow.everyone.if.no.acl.found.
    open_az = make_authorizer(
        tmp_path / "open", b("t", Op.READ), **{"allow.everyone.if.no.acl.found": "true"}
    )
    assert open_az.authorize("User:x", "h", Op.READ, Resource.GROUP, "free")
    assert not open_az.authorize("User:x", "h", Op.READ, Resource.TOPIC, "t")
