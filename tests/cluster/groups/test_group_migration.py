"""Moving a live group between the classic and the consumer protocol (Kafka 3.8+'s online
migration, `group.consumer.migration.policy`), with librdkafka consumers of both protocols
against a lone broker: a rolling upgrade of a classic group, member by member, to
`group.protocol=consumer`; the way back when the last member of the new protocol leaves;
and a broker whose policy is `disabled`, which keeps the two kinds apart. Throughout, no
partition is owned by two members at once (checked after every poll) and every record
comes back."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from grouptest_helpers import FAST, Watch, create_topic, kip848_consumer

HEARTBEATS = {
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
}


def classic_consumer(bootstrap: str, group: str, strategy: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "classic",
            "partition.assignment.strategy": strategy,
            "heartbeat.interval.ms": 500,
            "session.timeout.ms": 10000,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


def produce(bootstrap: str, topic: str, partitions: int, start: int, count: int) -> set:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, value=b"%d" % i, partition=i % partitions)
    assert producer.flush(30) == 0
    return {(i % partitions, b"%d" % i) for i in range(start, start + count)}


def group_type(bootstrap: str, group: str) -> ConsumerGroupType:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the answer
    listed = admin.list_consumer_groups().result(30)
    return {g.group_id: g.type for g in listed.valid}[group]


def commit(consumer: Consumer) -> None:
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._NO_OFFSET:
            raise


def covers(watch: Watch, partitions: int) -> bool:
    owned = watch.owned()
    return all(owned) and sorted(p for o in owned for p in o) == list(range(partitions))


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
def test_rolling_upgrade_of_a_classic_group(kafka_broker_factory, strategy):
    broker = kafka_broker_factory({**FAST, **HEARTBEATS})
    bootstrap, topic, group = broker.bootstrap, f"upgrade-{strategy}", f"ug-{strategy}"
    create_topic(bootstrap, topic, 4)
    expected = produce(bootstrap, topic, 4, 0, 400)
    c1, c2 = (classic_consumer(bootstrap, group, strategy) for _ in range(2))
    for c in (c1, c2):
        c.subscribe([topic])
    watch = Watch([c1, c2])
    watch.poll(lambda: expected <= set(watch.records) and [len(o) for o in watch.owned()] == [2, 2])
    for c in (c1, c2):
        commit(c)
    assert group_type(bootstrap, group) == ConsumerGroupType.CLASSIC

    # A member of the new protocol joins: the group becomes a consumer group, the classic
    # members stay in it, and the three share the partitions.
    m1 = kip848_consumer(bootstrap, group)
    m1.subscribe([topic])
    watch.consumers.append(m1)
    watch.poll(lambda: covers(watch, 4))
    assert group_type(bootstrap, group) == ConsumerGroupType.CONSUMER
    more = produce(bootstrap, topic, 4, 400, 120)
    watch.records.clear()
    watch.poll(lambda: more <= set(watch.records) and covers(watch, 4))

    # The classic members roll over to the new protocol, one at a time.
    for c in (c1, c2):
        commit(c)
        watch.consumers.remove(c)
        c.close()
        watch.poll(lambda: covers(watch, 4))
    m2 = kip848_consumer(bootstrap, group)
    m2.subscribe([topic])
    watch.consumers.append(m2)
    watch.poll(lambda: [len(o) for o in watch.owned()] == [2, 2])
    assert group_type(bootstrap, group) == ConsumerGroupType.CONSUMER
    last = produce(bootstrap, topic, 4, 520, 80)
    watch.records.clear()
    watch.poll(lambda: last <= set(watch.records))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(30)
    assert described.type == ConsumerGroupType.CONSUMER
    assert len(described.members) == 2
    for c in watch.consumers:
        c.close()


def test_downgrade_when_the_last_new_member_leaves(kafka_broker_factory):
    broker = kafka_broker_factory({**FAST, **HEARTBEATS})
    bootstrap, topic, group = broker.bootstrap, "downgrade", "dg"
    create_topic(bootstrap, topic, 4)
    expected = produce(bootstrap, topic, 4, 0, 200)
    modern = kip848_consumer(bootstrap, group)
    modern.subscribe([topic])
    watch = Watch([modern])
    watch.poll(lambda: len(watch.owned()[0]) == 4)
    # Classic members join the live consumer group as classic members.
    c1, c2 = (classic_consumer(bootstrap, group, "cooperative-sticky") for _ in range(2))
    for c in (c1, c2):
        c.subscribe([topic])
        watch.consumers.append(c)
    watch.poll(lambda: expected <= set(watch.records) and covers(watch, 4))
    assert group_type(bootstrap, group) == ConsumerGroupType.CONSUMER
    for c in watch.consumers:
        commit(c)

    # The only member of the new protocol leaves: a classic group again, whose members
    # rebalance among themselves and take every partition.
    watch.consumers.remove(modern)
    modern.close()
    watch.poll(lambda: covers(watch, 4))
    assert group_type(bootstrap, group) == ConsumerGroupType.CLASSIC
    more = produce(bootstrap, topic, 4, 200, 80)
    watch.records.clear()
    watch.poll(lambda: more <= set(watch.records))
    for c in watch.consumers:
        c.close()


def test_migration_disabled_keeps_the_protocols_apart(kafka_broker_factory):
    broker = kafka_broker_factory({**FAST, "group.consumer.migration.policy": "disabled"})
    create_topic(broker.bootstrap, "apart", 2)
    modern = kip848_consumer(broker.bootstrap, "apart-g")
    modern.subscribe(["apart"])
    watch = Watch([modern])
    watch.poll(lambda: len(watch.owned()[0]) == 2)
    classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "apart-g"})
    classic.subscribe(["apart"])
    errors = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not errors:
        msg = classic.poll(0.1)
        modern.poll(0.01)
        if msg is not None and msg.error():
            errors.append(msg.error())
    assert errors and errors[0].code() == KafkaError.INCONSISTENT_GROUP_PROTOCOL, errors
    assert len(watch.owned()[0]) == 2  # the consumer group is untouched
    classic.close()
    modern.close()
