"""KIP-932 share groups with confluent-kafka's ShareConsumer (librdkafka 2.16) against a
lone broker: every record accepted once across the group, released records redelivered
with their delivery count, rejected ones never again, locks that run out give the records
back, the share.* group configs, ListGroups and DeleteGroups."""

from __future__ import annotations

import base64
import socket
import threading
import time
import uuid

from confluent_kafka import AcknowledgeType, KafkaError, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from wire import request_of, roundtrip

from trio_broker.errors import ErrorCode

TIMEOUT = 30
BROKER = {
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    # Locks as short as 1 s may be configured for a group (Kafka's floor is 15 s).
    "group.share.min.record.lock.duration.ms": "1000",
}


def _admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _topic(broker, name: str, partitions: int, count: int) -> set[tuple[int, int]]:
    """A topic of `count` records spread over its partitions: their (partition, offset)s."""
    admin = _admin(broker)
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(name, f"record-{i}".encode(), partition=i % partitions)
    assert producer.flush(TIMEOUT) == 0
    per = [len(range(p, count, partitions)) for p in range(partitions)]
    return {(p, o) for p in range(partitions) for o in range(per[p])}


def _group_configs(broker, group: str, **configs: str) -> int:
    """Alter a group's configs (keys with `_` for `.`): the error code, 0 when done."""
    entries = [
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin = _admin(broker)
    (future,) = admin.incremental_alter_configs([resource]).values()
    try:
        future.result(TIMEOUT)
    except Exception as exc:
        return exc.args[0].code()
    return 0


def _delete_group(broker, group: str) -> int:
    admin = _admin(broker)
    (future,) = admin.delete_consumer_groups([group]).values()
    try:
        future.result(TIMEOUT)
    except Exception as exc:
        return exc.args[0].code()
    return 0


def _consumer(broker, group: str, topic: str, *, explicit: bool = False) -> ShareConsumer:
    config = {"bootstrap.servers": broker.bootstrap, "group.id": group}
    if explicit:
        config["share.acknowledgement.mode"] = "explicit"
    consumer = ShareConsumer(config)
    consumer.subscribe([topic])
    return consumer


def _raw(broker, api_key: int, version: int, **fields):
    with socket.create_connection((broker.host, broker.port), timeout=TIMEOUT) as sock:
        return roundtrip(sock, request_of(api_key, **fields), version)


def _poll_until(consumer, done, seconds: float = 60) -> list:
    got = []
    deadline = time.monotonic() + seconds
    while not done(got) and time.monotonic() < deadline:
        for m in consumer.poll(0.5):
            assert m.error() is None, m.error()
            got.append(m)
    return got


def test_share_configs_are_described_and_altered(kafka_broker_factory):
    broker = kafka_broker_factory(BROKER)
    for key, value in (
        ("share.auto.offset.reset", "by_duration:PT1H"),
        ("share.isolation.level", "read_committed"),
        ("share.record.lock.duration.ms", "2000"),
        ("share.delivery.count.limit", "3"),
    ):
        assert _group_configs(broker, "configured", **{key: value}) == 0
    for key, value in (
        ("share.auto.offset.reset", "sometimes"),
        ("share.auto.offset.reset", "by_duration:an hour"),
        ("share.isolation.level", "dirty"),
        ("share.record.lock.duration.ms", "500"),  # below group.share.min.record.lock...
        ("share.delivery.count.limit", "11"),  # Kafka's range is 2-10
    ):
        error = _group_configs(broker, "configured", **{key: value})
        assert error == KafkaError.INVALID_CONFIG, (key, value)
    resource = ConfigResource(ResourceType.GROUP, "configured")
    admin = _admin(broker)
    (future,) = admin.describe_configs([resource]).values()
    configs = {k: v.value for k, v in future.result(TIMEOUT).items()}
    assert configs["share.auto.offset.reset"] == "by_duration:PT1H"
    assert configs["share.isolation.level"] == "read_committed"
    assert configs["share.record.lock.duration.ms"] == "2000"
    assert configs["share.delivery.count.limit"] == "3"
    assert configs["share.session.timeout.ms"] == "45000"


def test_find_coordinator_of_a_share_partition_key(kafka_broker_factory):
    # FindCoordinator v6, key type 2: "group:topic id:partition", the topic id as Kafka
    # writes a Uuid; a lone broker is every share-partition's share coordinator.
    broker = kafka_broker_factory(BROKER)
    key = "g:" + base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=") + ":3"
    bad = ["g:3", "g:not-a-uuid:3", f"{key}x", ":" + key.split(":", 1)[1]]
    found = _raw(broker, 10, 6, key_type=2, coordinator_keys=[key, *bad]).coordinators
    assert [(c.key, c.error_code) for c in found] == [(key, 0)] + [
        (k, ErrorCode.INVALID_REQUEST) for k in bad
    ]
    assert (found[0].node_id, found[0].port) == (broker.config.node_id, broker.port)
    # Key type 2 came with v6.
    older = _raw(broker, 10, 5, key_type=2, coordinator_keys=[key]).coordinators
    assert [c.error_code for c in older] == [ErrorCode.INVALID_REQUEST]


def test_one_then_four_consumers_accept_every_record_once(kafka_broker_factory):
    broker = kafka_broker_factory(BROKER)
    records = _topic(broker, "work", 4, 4000)
    for group in ("solo", "team"):
        assert _group_configs(broker, group, share_auto_offset_reset="earliest") == 0

    # One consumer (implicit acknowledgement: each poll accepts the previous one's records).
    consumer = _consumer(broker, "solo", "work")
    got = _poll_until(consumer, lambda got: len(got) >= len(records))
    consumer.close()
    seen = [(m.partition(), m.offset()) for m in got]
    assert len(seen) == len(set(seen)) and set(seen) == records
    assert {m.delivery_count() for m in got} == {1}

    # Four consumers of another group, in threads, share the same records.
    taken: list[list] = [[] for _ in range(4)]
    consumers = [_consumer(broker, "team", "work") for _ in range(4)]
    stop = threading.Event()

    def run(i: int) -> None:
        while not stop.is_set():
            for m in consumers[i].poll(0.5):
                if m.error() is None:
                    taken[i].append((m.partition(), m.offset()))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while sum(map(len, taken)) < len(records) and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(TIMEOUT)
    # ListGroups v5 while the team is in: both share groups, typed "share".
    listed = _raw(broker, 16, 5, states_filter=[], types_filter=["share"]).groups
    assert {(g.group_id, g.group_type, g.protocol_type) for g in listed} == {
        ("solo", "share", "share"),
        ("team", "share", "share"),
    }
    assert {g.group_id: g.group_state for g in listed}["team"] == "Stable"
    described = _raw(broker, 77, 1, group_ids=["team", "nobody"]).groups
    assert described[0].error_code == 0 and len(described[0].members) == 4
    assigned = [
        p for m in described[0].members for t in m.assignment.topic_partitions for p in t.partitions
    ]
    assert sorted(assigned) == [0, 1, 2, 3]  # four members, four partitions: one each
    assert described[1].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    # A group with members is not deleted.
    assert _delete_group(broker, "team") == KafkaError.NON_EMPTY_GROUP
    for c in consumers:
        c.close()
    everything = [tp for part in taken for tp in part]
    assert len(everything) == len(set(everything)) and set(everything) == records

    assert _delete_group(broker, "team") == 0
    listed = _raw(broker, 16, 5, states_filter=[], types_filter=["share"]).groups
    assert [g.group_id for g in listed] == ["solo"]


def test_released_come_back_counted_and_rejected_never(kafka_broker_factory):
    broker = kafka_broker_factory(BROKER)
    records = _topic(broker, "jobs", 1, 300)
    assert (
        _group_configs(
            broker, "workers", share_auto_offset_reset="earliest", share_delivery_count_limit="2"
        )
        == 0
    )
    consumer = _consumer(broker, "workers", "jobs", explicit=True)
    deliveries: dict[int, list[int]] = {}

    def decide(m) -> AcknowledgeType:
        # First delivery: release every 10th, reject the next; second delivery: release
        # every 10th again, which the limit of 2 deliveries archives instead.
        if m.offset() % 10 == 0:
            return AcknowledgeType.RELEASE
        if m.offset() % 10 == 1 and m.delivery_count() == 1:
            return AcknowledgeType.REJECT
        return AcknowledgeType.ACCEPT

    deadline = time.monotonic() + 60
    accepted = set()
    quiet_until = None  # once all 240 are accepted, 2 s more in which nothing may come
    while time.monotonic() < (quiet_until or deadline):
        if quiet_until is None and len(accepted) >= 240:
            quiet_until = time.monotonic() + 2
        for m in consumer.poll(0.5):
            assert m.error() is None
            deliveries.setdefault(m.offset(), []).append(m.delivery_count())
            kind = decide(m)
            if kind == AcknowledgeType.ACCEPT:
                accepted.add(m.offset())
            consumer.acknowledge(m, kind)
        consumer.commit_sync(TIMEOUT)
    consumer.close()
    assert set(deliveries) == {o for _, o in records}
    for offset, counts in deliveries.items():
        if offset % 10 == 0:
            assert counts == [1, 2], offset  # released twice: archived at the limit
        elif offset % 10 == 1:
            assert counts == [1], offset  # rejected: never again
        else:
            assert counts == [1], offset
    assert accepted == {o for _, o in records if o % 10 > 1}


def test_records_of_a_silent_consumer_come_back_after_the_lock(kafka_broker_factory):
    broker = kafka_broker_factory(BROKER)
    _topic(broker, "tasks", 1, 50)
    error = _group_configs(
        broker, "crew", share_auto_offset_reset="earliest", share_record_lock_duration_ms="2000"
    )
    assert error == 0
    stuck = _consumer(broker, "crew", "tasks", explicit=True)
    held = _poll_until(stuck, lambda got: len(got) > 0)
    assert held and {m.delivery_count() for m in held} == {1}
    # `stuck` stops polling mid-batch without acknowledging: its member stays in the group
    # (librdkafka heartbeats on), but its locks run out after 2 s.
    other = _consumer(broker, "crew", "tasks")
    got = _poll_until(other, lambda got: len({m.offset() for m in got}) >= 50)
    redelivered = {m.offset(): m.delivery_count() for m in got}
    assert set(redelivered) == set(range(50))
    assert all(redelivered[m.offset()] == 2 for m in held)
    other.close()
    stuck.close()


def test_broker_restart_keeps_acknowledged_and_gives_back_acquired(kafka_broker_factory):
    broker = kafka_broker_factory(
        {
            **BROKER,
            "group.share.min.session.timeout.ms": "3000",
            "group.share.min.heartbeat.interval.ms": "500",
        }
    )
    records = _topic(broker, "durable", 2, 400)
    error = _group_configs(
        broker,
        "keepers",
        share_auto_offset_reset="earliest",
        share_record_lock_duration_ms="2000",
        share_session_timeout_ms="3000",
        share_heartbeat_interval_ms="500",
    )
    assert error == 0
    first = _consumer(broker, "keepers", "durable", explicit=True)
    batch = _poll_until(first, lambda got: len(got) > 0)
    # Half of the first batch accepted, the rest held unacknowledged.
    accepted = {(m.partition(), m.offset()) for m in batch[: len(batch) // 2]}
    for m in batch[: len(batch) // 2]:
        first.acknowledge(m, AcknowledgeType.ACCEPT)
    first.commit_sync(TIMEOUT)
    held_offsets = {(m.partition(), m.offset()) for m in batch[len(batch) // 2 :]}
    assert accepted and held_offsets
    # The broker stops while `first` holds records it has not acknowledged.
    broker.restart()
    # The group and its member are back from __consumer_offsets (ShareGroup* records).
    [listed] = _raw(broker, 16, 5, states_filter=[], types_filter=["share"]).groups
    assert (listed.group_id, listed.group_type, listed.group_state) == (
        "keepers",
        "share",
        "Stable",
    )
    [described] = _raw(broker, 77, 1, group_ids=["keepers"]).groups
    assert [m.subscribed_topic_names for m in described.members] == [["durable"]]
    first.close()  # its session died with the broker: nothing of it is acknowledged
    second = _consumer(broker, "keepers", "durable")
    remaining = records - accepted
    got = _poll_until(second, lambda got: {(m.partition(), m.offset()) for m in got} >= remaining)
    second.close()
    seen = {(m.partition(), m.offset()): m.delivery_count() for m in got}
    assert set(seen) == remaining  # nothing accepted before the restart comes back
    assert all(seen[tp] >= 2 for tp in held_offsets)  # the held ones, delivered again
    # Once empty, the group is deleted, and stays deleted across a restart.
    deadline = time.monotonic() + 60
    while _delete_group(broker, "keepers") == KafkaError.NON_EMPTY_GROUP:
        assert time.monotonic() < deadline  # `first`'s session, loaded above, runs out
        time.sleep(0.5)
    broker.restart()
    assert _raw(broker, 16, 5, states_filter=[], types_filter=["share"]).groups == []


def test_read_committed_share_group_skips_aborted_transactions(kafka_broker_factory):
    broker = kafka_broker_factory({**BROKER, "transaction.state.log.num.partitions": "1"})
    admin = _admin(broker)
    admin.create_topics([NewTopic("ledger", 1, 1)])["ledger"].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx"})
    producer.init_transactions(TIMEOUT)
    for outcome, values in (("commit", "abc"), ("abort", "xyz"), ("commit", "de")):
        producer.begin_transaction()
        for v in values:
            producer.produce("ledger", v.encode())
        assert producer.flush(TIMEOUT) == 0  # in the log before the abort (not purged)
        if outcome == "commit":
            producer.commit_transaction(TIMEOUT)
        else:
            producer.abort_transaction(TIMEOUT)
    for group, level, expected in (
        ("committed", "read_committed", "abcde"),
        ("everything", "read_uncommitted", "abcxyzde"),
    ):
        error = _group_configs(
            broker, group, share_auto_offset_reset="earliest", share_isolation_level=level
        )
        assert error == 0
        consumer = _consumer(broker, group, "ledger")
        wanted = len(expected)
        got = _poll_until(consumer, lambda got: len(got) >= wanted, seconds=30)  # noqa: B023
        # A little more: nothing else may come.
        got += _poll_until(consumer, lambda got: False, seconds=1)
        consumer.close()
        assert "".join(m.value().decode() for m in got) == expected, level


def test_by_duration_starts_at_the_records_of_that_long_ago(kafka_broker_factory):
    broker = kafka_broker_factory(BROKER)
    admin = _admin(broker)
    admin.create_topics([NewTopic("history", 1, 1)])["history"].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    now_ms = int(time.time() * 1000)
    for i in range(20):
        age_ms = 2 * 3600_000 if i < 10 else 60_000  # ten of two hours ago, ten of now
        producer.produce("history", b"%d" % i, timestamp=now_ms - age_ms)
    assert producer.flush(TIMEOUT) == 0
    assert _group_configs(broker, "recent", share_auto_offset_reset="by_duration:PT1H") == 0
    consumer = _consumer(broker, "recent", "history")
    got = _poll_until(consumer, lambda got: len(got) >= 10, seconds=30)
    got += _poll_until(consumer, lambda got: False, seconds=1)
    consumer.close()
    assert sorted(m.offset() for m in got) == list(range(10, 20))
