"""KIP-848 consumer groups with real clients: confluent-kafka (librdkafka) consumers with
`group.protocol=consumer` against a lone broker, checked as a user would check them: who
owns which partition, which records came back, which offsets were committed."""

from __future__ import annotations

import socket
import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from grouptest_helpers import Watch, create_topic
from grouptest_helpers import kip848_consumer as _consumer
from test_groups_clients import produce_numbered


def _commit_consumed(consumer: Consumer) -> None:
    """Commit what `consumer` read; one that has read nothing yet has nothing to commit."""
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._NO_OFFSET:
            raise


def test_three_members_share_six_partitions_and_one_leaves(broker):
    create_topic(broker.bootstrap, "kip848", 6)
    produce_numbered(broker.bootstrap, "kip848", 6, 600)
    consumers = [_consumer(broker.bootstrap, "g848") for _ in range(3)]
    for c in consumers:
        c.subscribe(["kip848"])
    watch = Watch(consumers)
    # Each member has read everything of its partitions (see Watch.read_by_owner).
    watch.poll(lambda: [len(p) for p in watch.owned()] == [2, 2, 2] and watch.read_by_owner(100))
    owned = watch.owned()
    assert sorted(p for parts in owned for p in parts) == list(range(6))
    assert [len(parts) for parts in owned] == [2, 2, 2]
    # Every record. (While the members join, a
    # partition moves from the first to a later one, which reads it again from the last
    # commit: none yet, so possibly twice. At least once, as in Kafka.)
    assert set(watch.records) == {(i % 6, b"%d" % i) for i in range(600)}
    # (Who read what is not compared with the final assignment: a member read partitions
    # it owned before they moved on. That no partition is owned twice is checked at every
    # poll, by Watch.)

    # The third member commits and leaves; the other two take its partitions (from its
    # commits: nothing read twice) and keep their own.
    leaver = consumers.pop()
    leaver.commit(asynchronous=False)
    leaver.close()
    watch.consumers = consumers
    seen = len(watch.records)
    before = owned[:2]
    watch.poll(lambda: sorted(p for parts in watch.owned() for p in parts) == list(range(6)))
    after = watch.owned()
    assert not watch.records[seen:], "the leaver's committed records came again"
    assert before[0] <= after[0] and before[1] <= after[1]
    assert [len(parts) for parts in after] == [3, 3]
    # And they consume what is produced next on all six partitions.
    produce_numbered(broker.bootstrap, "kip848", 6, 60)
    watch.records.clear()
    watch.poll(lambda: len(watch.records) >= 60)
    assert sorted(watch.records) == sorted((i % 6, b"%d" % i) for i in range(60))
    for c in consumers:
        c.close()


def test_committed_offsets_are_resumed_by_a_new_member(broker):
    create_topic(broker.bootstrap, "resume848", 2)
    produce_numbered(broker.bootstrap, "resume848", 2, 100)
    first = _consumer(broker.bootstrap, "resume-g")
    first.subscribe(["resume848"])
    watch = Watch([first])
    watch.poll(lambda: len(watch.records) >= 40)
    consumed = list(watch.records)
    # Commit exactly what was consumed, with the member's epoch (OffsetCommit v9).
    positions: dict[int, int] = {}
    for p in (0, 1):
        positions[p] = sum(1 for q, _ in consumed if q == p)
    first.commit(
        offsets=[TopicPartition("resume848", p, n) for p, n in positions.items()],
        asynchronous=False,
    )
    first.close()
    second = _consumer(broker.bootstrap, "resume-g")
    second.subscribe(["resume848"])
    watch = Watch([second])
    watch.poll(lambda: len(watch.records) >= 100 - len(consumed))
    # Nothing consumed twice, nothing skipped.
    assert sorted(consumed + watch.records) == sorted((i % 2, b"%d" % i) for i in range(100))
    committed = second.committed([TopicPartition("resume848", p) for p in (0, 1)], timeout=10)
    assert {tp.partition: tp.offset for tp in committed} == positions
    second.close()


def test_static_member_restart_keeps_its_partitions(broker):
    create_topic(broker.bootstrap, "static848", 4)
    a = _consumer(broker.bootstrap, "static-g", **{"group.instance.id": "a"})
    b = _consumer(broker.bootstrap, "static-g", **{"group.instance.id": "b"})
    for c in (a, b):
        c.subscribe(["static848"])
    watch = Watch([a, b])
    watch.poll(lambda: [len(p) for p in watch.owned()] == [2, 2])
    a_parts = watch.owned()[0]
    b_parts = watch.owned()[1]
    a.close()  # a static member leaves with epoch -2: its partitions wait for it
    a2 = _consumer(broker.bootstrap, "static-g", **{"group.instance.id": "a"})
    a2.subscribe(["static848"])
    watch.consumers = [a2, b]
    watch.poll(lambda: watch.owned()[0] == a_parts)
    assert watch.owned()[1] == b_parts
    a2.close()
    b.close()


def test_classic_and_consumer_groups_side_by_side(broker):
    create_topic(broker.bootstrap, "both848", 3)
    produce_numbered(broker.bootstrap, "both848", 3, 90)
    modern = _consumer(broker.bootstrap, "modern-g")
    classic = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "classic-g",
            "auto.offset.reset": "earliest",
        }
    )
    for c in (modern, classic):
        c.subscribe(["both848"])
    got: dict[str, list] = {"modern": [], "classic": []}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and min(len(v) for v in got.values()) < 90:
        for name, c in (("modern", modern), ("classic", classic)):
            msg = c.poll(0.05)
            if msg is not None and not msg.error():
                got[name].append((msg.partition(), msg.value()))
    expected = sorted((i % 3, b"%d" % i) for i in range(90))
    assert sorted(got["modern"]) == expected and sorted(got["classic"]) == expected

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = admin.list_consumer_groups(request_timeout=10).result()
    types = {g.group_id: g.type for g in listed.valid}
    assert types["modern-g"] == ConsumerGroupType.CONSUMER
    assert types["classic-g"] == ConsumerGroupType.CLASSIC
    modern.close()
    classic.close()


def test_describe_consumer_group_through_the_admin_client(broker):
    create_topic(broker.bootstrap, "describe848", 4)
    consumers = [
        _consumer(broker.bootstrap, "describe-g", **{"client.id": f"c{i}"}) for i in range(2)
    ]
    for c in consumers:
        c.subscribe(["describe848"])
    watch = Watch(consumers)
    watch.poll(lambda: [len(p) for p in watch.owned()] == [2, 2])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_consumer_groups(["describe-g"], request_timeout=10)
    group = described["describe-g"].result()
    assert group.type == ConsumerGroupType.CONSUMER
    assert str(group.state).endswith("STABLE")
    assert sorted(m.client_id for m in group.members) == ["c0", "c1"]
    assigned = sorted(tp.partition for m in group.members for tp in m.assignment.topic_partitions)
    assert assigned == [0, 1, 2, 3]
    for c in consumers:
        c.close()


@pytest.mark.parametrize("assignor", ["range", "uniform"])
def test_client_chooses_the_server_assignor(broker, assignor):
    create_topic(broker.bootstrap, f"assignor-{assignor}", 5)
    consumers = [
        _consumer(broker.bootstrap, f"assignor-g-{assignor}", **{"group.remote.assignor": assignor})
        for _ in range(2)
    ]
    for c in consumers:
        c.subscribe([f"assignor-{assignor}"])
    watch = Watch(consumers)
    # Both members in: until the second joins, the first owns all five.
    watch.poll(
        lambda: (
            sorted(p for parts in watch.owned() for p in parts) == list(range(5))
            and all(watch.owned())
        )
    )
    sizes = sorted(len(p) for p in watch.owned())
    assert sizes == [2, 3]
    if assignor == "range":
        assert sorted(map(sorted, watch.owned())) == [[0, 1, 2], [3, 4]]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    group = admin.describe_consumer_groups([f"assignor-g-{assignor}"])[
        f"assignor-g-{assignor}"
    ].result()
    assert group.partition_assignor == assignor
    for c in consumers:
        c.close()


def _describe(bootstrap: str, group_id: str):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group_id], request_timeout=10)[group_id].result()


def _epochs(broker, group_id: str) -> tuple[int, int, dict[str, int]]:
    """(group epoch, assignment epoch, member epochs) by ConsumerGroupDescribe v0."""
    from wire import roundtrip

    from trio_broker.protocol._generated.consumer_group_describe_request import (
        ConsumerGroupDescribeRequest,
    )

    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        (group,) = roundtrip(sock, ConsumerGroupDescribeRequest(group_ids=[group_id]), 0).groups
    assert group.error_code == 0, group
    return (
        group.group_epoch,
        group.assignment_epoch,
        {m.member_id: m.member_epoch for m in group.members},
    )


def test_group_survives_a_broker_restart(broker):
    create_topic(broker.bootstrap, "restart848", 4)
    produce_numbered(broker.bootstrap, "restart848", 4, 80)
    consumers = [_consumer(broker.bootstrap, "restart-g") for _ in range(2)]
    for c in consumers:
        c.subscribe(["restart848"])
    watch = Watch(consumers)

    watch.poll(lambda: [len(p) for p in watch.owned()] == [2, 2] and watch.read_by_owner(20))
    for c in consumers:
        _commit_consumed(c)
    before = _describe(broker.bootstrap, "restart-g")
    epochs = _epochs(broker, "restart-g")
    owned = watch.owned()

    broker.restart()
    # The group was loaded back: the members carry on with their assignments (a rejoin
    # would move the group epoch), and the committed offsets hold: nothing is read again.
    produce_numbered(broker.bootstrap, "restart848", 4, 40)
    watch.records.clear()
    watch.poll(lambda: len(watch.records) >= 40)
    assert sorted(watch.records) == sorted((i % 4, b"%d" % i) for i in range(40))
    assert watch.owned() == owned
    after = _describe(broker.bootstrap, "restart-g")
    assert _epochs(broker, "restart-g") == epochs  # the same epochs: nobody rejoined
    assert sorted(m.member_id for m in after.members) == sorted(m.member_id for m in before.members)
    assert {
        m.member_id: sorted(tp.partition for tp in m.assignment.topic_partitions)
        for m in after.members
    } == {
        m.member_id: sorted(tp.partition for tp in m.assignment.topic_partitions)
        for m in before.members
    }
    for c in consumers:
        c.close()


def test_ten_members_on_sixty_partitions_and_one_leaves(kafka_broker_factory):
    """Issue 35's goal: the group settles with every partition owned exactly once, and when
    one member leaves no remaining member loses a partition at any point."""
    from grouptest_helpers import FAST

    fast = {
        **FAST,
        "group.consumer.heartbeat.interval.ms": "500",
        "group.consumer.min.heartbeat.interval.ms": "500",
    }
    broker = kafka_broker_factory(fast)
    create_topic(broker.bootstrap, "sixty", 60)
    consumers = [_consumer(broker.bootstrap, "sixty-g") for _ in range(10)]
    for c in consumers:
        c.subscribe(["sixty"])
    watch = Watch(consumers)
    # The first member to join owns all sixty until the others' heartbeats reach the
    # assignor, so wait for the balanced target, not just for full coverage; poll()
    # fails at once if any partition is ever owned twice on the way.
    watch.poll(
        lambda: (
            sorted(len(parts) for parts in watch.owned()) == [6] * 10
            and sorted(p for parts in watch.owned() for p in parts) == list(range(60))
        )
    )

    leaver = consumers.pop()
    leaver.close()
    watch.consumers = consumers
    held = watch.owned()

    def only_grows() -> bool:
        now = watch.owned()
        for before, after in zip(held, now, strict=True):
            assert before <= after, f"a remaining member lost {sorted(before - after)}"
        held[:] = now
        return sorted(p for parts in now for p in parts) == list(range(60))

    watch.poll(only_grows)
    assert sorted(len(parts) for parts in watch.owned()) == [6] * 3 + [7] * 6
    for c in consumers:
        c.close()


def _offset_delete(bootstrap: str, group: str, topics: dict[str, list[int]]) -> dict:
    """OffsetDelete (API 47) straight to the broker: {(topic, partition): error code}."""
    from wire import request_of, roundtrip

    from trio_broker.protocol._generated.offset_delete_request import (
        OffsetDeleteRequestPartition,
        OffsetDeleteRequestTopic,
    )

    host, port = bootstrap.rsplit(":", 1)
    request = request_of(
        47,
        group_id=group,
        topics=[
            OffsetDeleteRequestTopic(
                name=t, partitions=[OffsetDeleteRequestPartition(partition_index=p) for p in ps]
            )
            for t, ps in topics.items()
        ],
    )
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        answer = roundtrip(sock, request, 0)
    assert answer.error_code == 0, answer.error_code
    return {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}


def test_offset_delete_refuses_a_topic_the_members_subscribe_to(broker):
    """OffsetDelete on a live KIP-848 group: GROUP_SUBSCRIBED_TO_TOPIC for a topic its
    members subscribe to (their offsets stay), and the offsets of another topic go."""
    create_topic(broker.bootstrap, "kept848", 1)
    create_topic(broker.bootstrap, "old848", 1)
    produce_numbered(broker.bootstrap, "kept848", 1, 10)
    member = _consumer(broker.bootstrap, "delete-g")
    member.subscribe(["kept848"])
    watch = Watch([member])
    watch.poll(lambda: len(watch.records) >= 10)
    member.commit(
        offsets=[TopicPartition("kept848", 0, 10), TopicPartition("old848", 0, 3)],
        asynchronous=False,
    )
    errors = _offset_delete(broker.bootstrap, "delete-g", {"kept848": [0], "old848": [0]})
    assert errors == {
        ("kept848", 0): KafkaError.GROUP_SUBSCRIBED_TO_TOPIC,
        ("old848", 0): 0,
    }
    committed = member.committed(
        [TopicPartition("kept848", 0), TopicPartition("old848", 0)], timeout=10
    )
    assert [(tp.topic, tp.offset) for tp in committed] == [("kept848", 10), ("old848", -1001)]
    member.close()
