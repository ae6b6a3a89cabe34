"""ACLs on share groups (KIP-932) as Kafka 4.2 checks them: a user with READ on the group
and the topic works a queue with confluent-kafka's ShareConsumer; anyone else is refused
with the error code Kafka answers, for the whole request or partition by partition."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import KafkaError, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from plain_sasl import USERS, Raw, start

from trio_broker.errors import ErrorCode

GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


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


def _poll_error(consumer: ShareConsumer, seconds: float = 30) -> int | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            for m in consumer.poll(0.5):
                if m.error() is not None:
                    return m.error().code()
        except KafkaException as exc:
            return exc.args[0].code()
    return None


def test_share_group_acls(kafka_broker_factory):
    broker = start(
        kafka_broker_factory,
        **{"offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0"},
    )
    admin = AdminClient(conf(broker, "admin"))
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in ("jobs", "secret")]).values():
        future.result(30)
    producer = Producer(conf(broker, "admin"))
    for i in range(6):
        producer.produce("jobs", f"job-{i}".encode())
    assert producer.flush(30) == 0
    entry = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, "crew", incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    acls = [
        allow("User:alice", ResourceType.GROUP, "crew", AclOperation.READ),
        allow("User:alice", ResourceType.TOPIC, "jobs", AclOperation.READ),
        allow("User:alice", ResourceType.TOPIC, "secret", AclOperation.DESCRIBE),
    ]
    for future in admin.create_acls(acls).values():
        future.result(30)

    # alice, with READ on the group and the topic, works the queue.
    consumer = ShareConsumer(conf(broker, "alice", **{"group.id": "crew"}))
    consumer.subscribe(["jobs"])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < 6 and time.monotonic() < deadline:
        for m in consumer.poll(0.5):
            assert m.error() is None, m.error()
            got.append(m.value())
    consumer.commit_sync()
    consumer.close()
    assert sorted(got) == [f"job-{i}".encode() for i in range(6)]

    # bob may not use the group; alice may describe "secret" but not read it.
    for user, topic, code in (
        ("bob", "jobs", KafkaError.GROUP_AUTHORIZATION_FAILED),
        ("alice", "secret", KafkaError.TOPIC_AUTHORIZATION_FAILED),  # ShareFetch's, for p0
    ):
        refused = ShareConsumer(conf(broker, user, **{"group.id": "crew"}))
        refused.subscribe([topic])
        try:
            assert _poll_error(refused) == code, (user, topic)
        finally:
            refused.close()

    raw = Raw(broker, "alice")
    ids = {t.name: t.topic_id for t in raw(3, 12, topics=None).topics}
    assert set(ids) == {"jobs", "secret"}  # what she may describe
    # Heartbeats: the group needs READ, each subscribed topic DESCRIBE.
    member = str(uuid.uuid4())
    beat = raw(76, 1, group_id="other", member_id=member, subscribed_topic_names=["jobs"])
    assert beat.error_code == GROUP_DENIED
    beat = raw(76, 1, group_id="crew", member_id=member, subscribed_topic_names=["jobs", "x"])
    assert beat.error_code == TOPIC_DENIED
    beat = raw(76, 1, group_id="crew", member_id=member, subscribed_topic_names=["jobs", "secret"])
    assert beat.error_code == 0
    # ShareFetch: the group needs READ; each topic READ, partition by partition.
    both = [_fetch_topic(ids["jobs"]), _fetch_topic(ids["secret"])]
    denied = raw(78, 1, group_id="other", member_id=member, topics=both, max_records=10)
    assert denied.error_code == GROUP_DENIED
    fetched = raw(78, 1, group_id="crew", member_id=member, topics=both, max_records=10)
    assert fetched.error_code == 0
    codes = {
        (t.topic_id, p.partition_index): p.error_code
        for t in fetched.responses
        for p in t.partitions
    }
    assert codes[(ids["secret"], 0)] == TOPIC_DENIED
    assert codes.get((ids["jobs"], 0), 0) == 0
    # ShareAcknowledge of the refused topic's records: refused for that partition.
    from trio_broker.protocol._generated import share_acknowledge_request as ack

    acked = raw(
        79,
        1,
        group_id="crew",
        member_id=member,
        share_session_epoch=1,
        topics=[
            ack.AcknowledgeTopic(
                topic_id=ids["secret"],
                partitions=[
                    ack.AcknowledgePartition(
                        partition_index=0,
                        acknowledgement_batches=[
                            ack.AcknowledgementBatch(
                                first_offset=0, last_offset=0, acknowledge_types=[1]
                            )
                        ],
                    )
                ],
            )
        ],
    )
    assert acked.error_code == 0
    assert [(p.partition_index, p.error_code) for t in acked.responses for p in t.partitions] == [
        (0, TOPIC_DENIED)
    ]
    # ShareGroupDescribe: DESCRIBE on each group.
    described = raw(77, 1, group_ids=["crew", "other"], include_authorized_operations=True)
    by_group = {g.group_id: g for g in described.groups}
    assert by_group["other"].error_code == GROUP_DENIED
    assert by_group["crew"].error_code == 0
    assert by_group["crew"].authorized_operations == 1 << 3 | 1 << 8  # READ (and DESCRIBE)
    # The group's members leave; the admin APIs' checks.
    raw(76, 1, group_id="crew", member_id=member, member_epoch=-1)
    from trio_broker.protocol._generated import alter_share_group_offsets_request as alt
    from trio_broker.protocol._generated import delete_share_group_offsets_request as dlt
    from trio_broker.protocol._generated import describe_share_group_offsets_request as dsc

    offsets = raw(
        90,
        0,
        groups=[
            dsc.DescribeShareGroupOffsetsRequestGroup(
                group_id="crew",
                topics=[
                    dsc.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=[0])
                    for t in ("jobs", "hidden")
                ],
            ),
            dsc.DescribeShareGroupOffsetsRequestGroup(group_id="other", topics=None),
        ],
    )
    assert [(g.group_id, g.error_code) for g in offsets.groups] == [
        ("crew", 0),
        ("other", GROUP_DENIED),
    ]
    starts = {
        t.topic_name: [(p.start_offset, p.error_code) for p in t.partitions]
        for t in offsets.groups[0].topics
    }
    assert starts == {"jobs": [(6, 0)], "hidden": [(-1, TOPIC_DENIED)]}
    altered = raw(
        91,
        0,
        group_id="crew",
        topics=[
            alt.AlterShareGroupOffsetsRequestTopic(
                topic_name=t,
                partitions=[alt.AlterShareGroupOffsetsRequestPartition(start_offset=2)],
            )
            for t in ("jobs", "secret")
        ],
    )
    assert altered.error_code == 0
    assert {t.topic_name: t.partitions[0].error_code for t in altered.responses} == {
        "jobs": 0,
        "secret": TOPIC_DENIED,
    }
    deleted = raw(
        92, 0, group_id="crew", topics=[dlt.DeleteShareGroupOffsetsRequestTopic(topic_name="jobs")]
    )
    assert deleted.error_code == GROUP_DENIED  # DELETE on the group
    # The share coordinator's APIs are for brokers (CLUSTER_ACTION).
    from trio_broker.protocol._generated import read_share_group_state_request as rd

    state = raw(
        84,
        0,
        group_id="crew",
        topics=[rd.ReadStateData(topic_id=ids["jobs"], partitions=[rd.PartitionData(partition=0)])],
    )
    assert [p.error_code for t in state.results for p in t.partitions] == [CLUSTER_DENIED]
    key = f"crew:{ids['jobs']}:0"
    found = raw(10, 6, key_type=2, coordinator_keys=[key])
    assert [(c.key, c.error_code) for c in found.coordinators] == [(key, CLUSTER_DENIED)]
    raw.sock.close()


def _fetch_topic(topic_id):
    from trio_broker.protocol._generated import share_fetch_request as sf

    return sf.FetchTopic(topic_id=topic_id, partitions=[sf.FetchPartition(partition_index=0)])
