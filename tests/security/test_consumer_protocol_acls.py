"""ACLs on KIP-848 consumer groups, as Kafka 4.x checks them: ConsumerGroupHeartbeat needs
READ on the group and DESCRIBE on every subscribed topic, ConsumerGroupDescribe DESCRIBE on
the group and on the topics its members are (to be) assigned. A librdkafka consumer with
`group.protocol=consumer` and READ on its group and topic reads its records; others are
refused with Kafka's error codes."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from plain_sasl import USERS, Raw, start

from trio_broker.errors import ErrorCode


def conf(broker, user: str, **extra) -> dict:
    return {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
        **extra,
    }


def allow(principal: str, rtype, name: str, op) -> AclBinding:
    return AclBinding(
        rtype, name, ResourcePatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW
    )


def consumer(broker, user: str, group: str) -> Consumer:
    return Consumer(
        conf(
            broker,
            user,
            **{
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
            },
        )
    )


def first_error(c: Consumer, seconds: float = 30) -> int | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            m = c.poll(0.5)
        except KafkaException as exc:
            return exc.args[0].code()
        if m is not None and m.error() is not None:
            return m.error().code()
    return None


def test_consumer_protocol_groups_under_acls(kafka_broker_factory):
    broker = start(kafka_broker_factory, **{"offsets.topic.num.partitions": "1"})
    admin = AdminClient(conf(broker, "admin"))
    for future in admin.create_topics([NewTopic(n, 2, 1) for n in ("orders", "secret")]).values():
        future.result(30)
    producer = Producer(conf(broker, "admin"))
    for i in range(8):
        producer.produce("orders", f"order-{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    acls = [
        allow("User:alice", ResourceType.GROUP, "billing", AclOperation.READ),
        allow("User:alice", ResourceType.TOPIC, "orders", AclOperation.READ),
    ]
    for future in admin.create_acls(acls).values():
        future.result(30)

    # alice, with READ on the group and the topic, reads every record (before the fix the
    # heartbeat needed CLUSTER_ACTION and she was refused).
    c = consumer(broker, "alice", "billing")
    c.subscribe(["orders"])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < 8 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None:
            assert m.error() is None, m.error()
            got.append(m.value())
    c.close()
    assert sorted(got) == [f"order-{i}".encode() for i in range(8)]

    # bob may not use the group; alice may not describe "secret".
    for user, topic, code in (
        ("bob", "orders", KafkaError.GROUP_AUTHORIZATION_FAILED),
        ("alice", "secret", KafkaError.TOPIC_AUTHORIZATION_FAILED),
    ):
        refused = consumer(broker, user, "billing")
        refused.subscribe([topic])
        try:
            assert first_error(refused) == code, (user, topic)
        finally:
            refused.close()

    raw = Raw(broker, "alice")
    member = str(uuid.uuid4())
    beat = raw(68, 0, group_id="other", member_id=member, subscribed_topic_names=["orders"])
    assert beat.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    beat = raw(
        68,
        0,
        group_id="billing",
        member_id=member,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=["orders"],
        topic_partitions=[],
    )
    assert beat.error_code == 0 and beat.member_epoch > 0
    # ConsumerGroupDescribe: DESCRIBE on each group (READ implies it).
    described = raw(69, 0, group_ids=["billing", "other"], include_authorized_operations=True)
    by_group = {g.group_id: g for g in described.groups}
    assert by_group["other"].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert by_group["billing"].error_code == 0
    assert member in {m.member_id for m in by_group["billing"].members}
    # A group whose members are assigned a topic she may not describe is refused whole.
    raw_admin = Raw(broker, "admin")
    other = str(uuid.uuid4())
    beat = raw_admin(
        68,
        0,
        group_id="billing",
        member_id=other,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=["secret"],
        topic_partitions=[],
    )
    assert beat.error_code == 0
    described = raw(69, 0, group_ids=["billing"])
    assert described.groups[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert described.groups[0].members == []
