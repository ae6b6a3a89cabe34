"""Committed offsets expire after `offsets.retention.minutes`, as in Kafka's cleanupGroupMetadata.

Kafka's rule (GroupMetadata.removeExpiredOffsets): offsets of an Empty group expire
retention after the group became Empty (its state timestamp), not after their commit; a
Stable consumer group keeps the offsets of the topics it subscribes to (KIP-496) and loses
the others retention after their commit; standalone commits (no group management) expire
retention after the commit; an OffsetCommit v2-4 retention time sets an explicit expire
timestamp that wins. An Empty group left without offsets goes Dead and is removed, and the
expiry is written as tombstones to `__consumer_offsets`, so a restart does not bring it back.

Kafka expires nothing of a group in the middle of a rebalance (PreparingRebalance,
CompletingRebalance), and writes no GroupMetadata tombstone for a group that never had a
generation (commits only), since it never wrote a GroupMetadata record.

The coordinator is driven in-process on trio's autojump clock, as in
test_group_state_machine.py, with its periodic expiry task running. It is given a wall
clock (`now_ms`) that follows trio's virtual time. Raw sockets with autojump are avoided on
purpose: a flush in a worker thread lets the clock jump past the deadlines under test.

One check with real clients at the end needs no hour: OffsetCommit v2 with a retention time
of seconds, against a broker whose expiry task runs every 100 ms.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest
import trio

from trio_broker.broker import Broker
from trio_broker.cluster.groups.group_coordinator import GroupCoordinator
from trio_broker.cluster.groups.group_metadata import GroupState
from trio_broker.cluster.groups.records import (
    OFFSETS_TOPIC,
    group_metadata_key,
    offset_commit_key,
)
from trio_broker.config import BrokerConfig
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
)
from trio_broker.protocol._generated.delete_groups_request import DeleteGroupsRequest
from trio_broker.protocol._generated.describe_groups_request import DescribeGroupsRequest
from trio_broker.protocol._generated.heartbeat_request import HeartbeatRequest
from trio_broker.protocol._generated.join_group_request import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
)
from trio_broker.protocol._generated.leave_group_request import LeaveGroupRequest
from trio_broker.protocol._generated.list_groups_request import ListGroupsRequest
from trio_broker.protocol._generated.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from trio_broker.protocol._generated.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
)
from trio_broker.protocol._generated.sync_group_request import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from trio_broker.protocol.record_codec import iter_records
from trio_broker.protocol.records import iter_batches

MINUTE = 60.0
RETENTION_MIN = 60
CHECK_INTERVAL_S = 10.0
SESSION_MS = 1_800_000  # group.max.session.timeout.ms: heartbeats every 10 virtual minutes do


def props(log_dir) -> dict[str, str]:
    return {
        "log.dirs": str(log_dir),
        "offsets.topic.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "0",
        "offsets.retention.minutes": str(RETENTION_MIN),
        "offsets.retention.check.interval.ms": str(int(CHECK_INTERVAL_S * 1000)),
    }


def virtual_wall_clock():
    """A wall clock, in ms, moved by trio's (autojump) clock."""
    base_ms = int(time.time() * 1000)

    def now_ms() -> int:
        return base_ms + int(trio.current_time() * 1000)

    return now_ms


class Node:
    """One broker's coordinator in a cancel scope of the test's nursery, restartable."""

    def __init__(self, log_dir, nursery: trio.Nursery) -> None:
        self.config = BrokerConfig.from_properties(props(log_dir))
        self.nursery = nursery
        self.now_ms = virtual_wall_clock()
        self.broker: Broker | None = None
        self.scope: trio.CancelScope | None = None

    @property
    def coordinator(self):
        assert self.broker is not None
        return self.broker.group_coordinator

    async def start(self) -> None:
        self.broker = Broker(self.config)
        # Only the coordinator runs here: the one on the virtual clock replaces the broker's.
        GroupCoordinator(self.broker, now_ms=self.now_ms)
        self.scope = await self.nursery.start(self._run, self.broker)

    async def _run(self, broker: Broker, task_status=trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            await broker.group_coordinator.run()

    async def restart(self) -> None:
        self.stop()
        await trio.sleep(0)
        await self.start()

    def stop(self) -> None:
        if self.scope is not None:
            self.scope.cancel()
            self.scope = None
        if self.broker is not None:
            self.broker.log_manager.close()
            self.broker = None


@pytest.fixture
async def node(tmp_path, nursery):
    n = Node(tmp_path, nursery)
    await n.start()
    n.broker.topics.create_topic("orders", 2, 1)
    n.broker.topics.create_topic("old-orders", 1, 1)
    yield n
    n.stop()


# -- requests, as a client sends them -------------------------------------------------------


def subscription(*topics: str) -> bytes:
    body = ConsumerProtocolSubscription(topics=list(topics))
    return bytes(body.encode(1, bytearray(struct.pack(">h", 1))))


def join(coordinator, group: str, member_id: str, *topics: str, rebalance_ms: int = 60_000) -> list:
    """JoinGroup v7 of a consumer subscribed to `topics`: the replies so far (none if parked)."""
    replies: list = []
    coordinator.join_group(
        JoinGroupRequest(
            group_id=group,
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=rebalance_ms,
            member_id=member_id,
            protocol_type="consumer",
            protocols=[JoinGroupRequestProtocol(name="range", metadata=subscription(*topics))],
        ),
        api_version=7,
        client_id="c",
        client_host="/127.0.0.1",
        reply=replies.append,
    )
    return replies


def new_member_id(coordinator, group: str, *topics: str) -> str:
    (first,) = join(coordinator, group, "", *topics)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    return first.member_id


def sync_as_leader(coordinator, group: str, member_id: str, generation: int) -> None:
    synced: list = []
    coordinator.sync_group(
        SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            assignments=[SyncGroupRequestAssignment(member_id=member_id, assignment=b"")],
        ),
        api_version=3,
        reply=synced.append,
    )
    assert synced[0].error_code == ErrorCode.NONE


async def stable_member(
    coordinator, group: str, *topics: str, rebalance_ms: int = 60_000
) -> tuple[str, int]:
    """A consumer that joins `group`, subscribed to `topics`, and syncs: (member id, generation)."""
    member_id = new_member_id(coordinator, group, *topics)
    replies = join(coordinator, group, member_id, *topics, rebalance_ms=rebalance_ms)
    await trio.sleep(0.1)  # group.initial.rebalance.delay.ms=0 still goes through its timer
    (joined,) = replies
    assert joined.error_code == ErrorCode.NONE
    sync_as_leader(coordinator, group, joined.member_id, joined.generation_id)
    assert coordinator.groups[group].state is GroupState.STABLE
    return joined.member_id, joined.generation_id


def commit(
    coordinator,
    group: str,
    offsets: dict[tuple[str, int], int],
    *,
    member_id: str = "",
    generation: int = -1,
    api_version: int = 7,
    retention_ms: int = -1,
) -> None:
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            OffsetCommitRequestPartition(partition_index=partition, committed_offset=offset)
        )
    response = coordinator.offsets.commit_offsets(
        OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            retention_time_ms=retention_ms,
            topics=[OffsetCommitRequestTopic(name=t, partitions=p) for t, p in by_topic.items()],
        ),
        api_version=api_version,
    )
    codes = {p.error_code for t in response.topics for p in t.partitions}
    assert codes == {ErrorCode.NONE}


def fetch(coordinator, group: str, *tps: tuple[str, int]) -> dict[tuple[str, int], int]:
    """OffsetFetch v7 for these partitions: {(topic, partition): committed offset or -1}."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, []).append(partition)
    response = coordinator.offsets.fetch_offsets(
        OffsetFetchRequest(
            group_id=group,
            topics=[
                OffsetFetchRequestTopic(name=t, partition_indexes=p) for t, p in by_topic.items()
            ],
        ),
        api_version=7,
    )
    assert response.error_code == ErrorCode.NONE
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in response.topics
        for p in t.partitions
    }


def heartbeat(
    coordinator, group: str, member_id: str, generation: int, expect: ErrorCode = ErrorCode.NONE
) -> None:
    response = coordinator.heartbeat(
        HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id)
    )
    assert response.error_code == expect


async def stay_alive(
    coordinator,
    group: str,
    member_id: str,
    generation: int,
    minutes: float,
    expect: ErrorCode = ErrorCode.NONE,
):
    """Heartbeat every 10 virtual minutes (the session is 30) for `minutes`."""
    left = minutes
    while left > 0:
        step = min(10.0, left)
        await trio.sleep(step * MINUTE)
        heartbeat(coordinator, group, member_id, generation, expect)
        left -= step


def leave(coordinator, group: str, member_id: str) -> None:
    response = coordinator.leave_group(
        LeaveGroupRequest(group_id=group, member_id=member_id), api_version=1
    )
    assert response.error_code == ErrorCode.NONE


def described_state(coordinator, group: str) -> str:
    (described,) = coordinator.offsets.describe_groups(DescribeGroupsRequest(groups=[group])).groups
    assert described.error_code == ErrorCode.NONE
    return described.group_state


def listed(coordinator) -> set[str]:
    response = coordinator.offsets.list_groups(ListGroupsRequest(), api_version=4)
    return {g.group_id for g in response.groups}


def last_values(broker: Broker, group: str) -> dict[bytes, bytes | None]:
    """The last value of every key of `group`'s `__consumer_offsets` partition, read from disk."""
    partition = broker.group_coordinator.store.partition_for(group)
    log = broker.topics.get_log(OFFSETS_TOPIC, partition)
    out: dict[bytes, bytes | None] = {}
    for segment in log.segments:
        data = memoryview(segment.log_path.read_bytes())
        for pos, header in iter_batches(data):
            for record in iter_records(data[pos : pos + header.size]):
                out[bytes(record.key)] = None if record.value is None else bytes(record.value)
    return out


ORDERS = [("orders", 0), ("orders", 1)]


# -- Empty groups ------------------------------------------------------------------------------


async def test_empty_group_keeps_offsets_for_retention_after_it_became_empty(node, autojump_clock):
    c = node.coordinator
    member, gen = await stable_member(c, "billing", "orders")
    commit(c, "billing", {ORDERS[0]: 5, ORDERS[1]: 9}, member_id=member, generation=gen)
    # Stable for 50 minutes after the commit: the clock Kafka uses starts only when it empties.
    await stay_alive(c, "billing", member, gen, 50)
    leave(c, "billing", member)
    assert c.groups["billing"].state is GroupState.EMPTY

    # 70 minutes after the commit, 20 after becoming Empty: still there.
    await trio.sleep(20 * MINUTE)
    assert fetch(c, "billing", *ORDERS) == {ORDERS[0]: 5, ORDERS[1]: 9}
    await trio.sleep((RETENTION_MIN - 20) * MINUTE - 2 * CHECK_INTERVAL_S)
    assert fetch(c, "billing", *ORDERS) == {ORDERS[0]: 5, ORDERS[1]: 9}
    assert described_state(c, "billing") == "Empty"
    assert "billing" in listed(c)

    # Past retention (and one check interval): gone, and the group with them.
    await trio.sleep(3 * CHECK_INTERVAL_S)
    assert fetch(c, "billing", *ORDERS) == {ORDERS[0]: -1, ORDERS[1]: -1}
    assert "billing" not in c.groups
    assert described_state(c, "billing") == "Dead"
    assert "billing" not in listed(c)


async def test_expiry_is_written_as_tombstones_and_survives_restart(node, autojump_clock):
    c = node.coordinator
    member, gen = await stable_member(c, "billing", "orders")
    commit(c, "billing", {ORDERS[0]: 5, ORDERS[1]: 9}, member_id=member, generation=gen)
    leave(c, "billing", member)
    # A second group, Empty later, outlives the first: a restart must not lose it either.
    other, other_gen = await stable_member(c, "audit", "orders")
    commit(c, "audit", {ORDERS[0]: 3}, member_id=other, generation=other_gen)
    await stay_alive(c, "audit", other, other_gen, 30)
    leave(c, "audit", other)

    await trio.sleep((RETENTION_MIN - 30) * MINUTE + 2 * CHECK_INTERVAL_S)
    assert "billing" not in c.groups
    on_disk = last_values(node.broker, "billing")
    for tp in ORDERS:
        assert on_disk[offset_commit_key("billing", *tp)] is None
    assert on_disk[group_metadata_key("billing")] is None

    await node.restart()
    c = node.coordinator
    await trio.sleep(0.1)  # loading the partitions
    assert fetch(c, "billing", *ORDERS) == {ORDERS[0]: -1, ORDERS[1]: -1}
    assert "billing" not in c.groups
    assert described_state(c, "billing") == "Dead"
    # The other group came back Empty with its offset, and keeps its own deadline.
    assert fetch(c, "audit", ORDERS[0]) == {ORDERS[0]: 3}
    assert described_state(c, "audit") == "Empty"
    await trio.sleep(30 * MINUTE - 4 * CHECK_INTERVAL_S)
    assert fetch(c, "audit", ORDERS[0]) == {ORDERS[0]: 3}
    await trio.sleep(6 * CHECK_INTERVAL_S)
    assert fetch(c, "audit", ORDERS[0]) == {ORDERS[0]: -1}
    assert "audit" not in c.groups


# -- live groups -------------------------------------------------------------------------------


async def test_stable_group_keeps_offsets_of_subscribed_topics(node, autojump_clock):
    c = node.coordinator
    member, gen = await stable_member(c, "billing", "orders")
    commit(
        c,
        "billing",
        {ORDERS[0]: 5, ORDERS[1]: 9, ("old-orders", 0): 7},
        member_id=member,
        generation=gen,
    )
    await stay_alive(c, "billing", member, gen, RETENTION_MIN - 10)
    assert fetch(c, "billing", *ORDERS, ("old-orders", 0)) == {
        ORDERS[0]: 5,
        ORDERS[1]: 9,
        ("old-orders", 0): 7,
    }
    # Three retention periods later the subscribed topic's offsets are all still there;
    # the topic it no longer subscribes to lost its offset retention after the commit.
    await stay_alive(c, "billing", member, gen, 2 * RETENTION_MIN + 10)
    assert fetch(c, "billing", *ORDERS, ("old-orders", 0)) == {
        ORDERS[0]: 5,
        ORDERS[1]: 9,
        ("old-orders", 0): -1,
    }
    assert c.groups["billing"].state is GroupState.STABLE
    assert described_state(c, "billing") == "Stable"


# -- commits outside group management ----------------------------------------------------------


async def test_standalone_and_v2_retention_time_expire_from_the_commit(node, autojump_clock):
    c = node.coordinator
    # assign() consumers: no group management, expiry counts from the commit.
    commit(c, "manual", {ORDERS[0]: 11})
    # OffsetCommit v2 with a retention time of 5 minutes: an explicit expire timestamp.
    commit(c, "legacy", {ORDERS[1]: 12}, api_version=2, retention_ms=5 * 60_000)

    await trio.sleep(5 * MINUTE - 2 * CHECK_INTERVAL_S)
    assert fetch(c, "legacy", ORDERS[1]) == {ORDERS[1]: 12}
    await trio.sleep(3 * CHECK_INTERVAL_S)
    assert fetch(c, "legacy", ORDERS[1]) == {ORDERS[1]: -1}
    assert "legacy" not in c.groups

    await trio.sleep((RETENTION_MIN - 5) * MINUTE - 3 * CHECK_INTERVAL_S)
    assert fetch(c, "manual", ORDERS[0]) == {ORDERS[0]: 11}
    await trio.sleep(3 * CHECK_INTERVAL_S)
    assert fetch(c, "manual", ORDERS[0]) == {ORDERS[0]: -1}
    assert "manual" not in c.groups


async def test_rebalancing_group_expires_nothing(node, autojump_clock):
    c = node.coordinator
    four_hours_ms = 4 * 3_600_000
    a, gen = await stable_member(c, "billing", "orders", rebalance_ms=four_hours_ms)
    old = ("old-orders", 0)
    commit(c, "billing", {ORDERS[0]: 5, old: 7}, member_id=a, generation=gen)

    # A second consumer joins: the group waits in PreparingRebalance for `a` to rejoin (up to
    # the four-hour rebalance timeout) while `a` keeps heartbeating. Two retention periods
    # pass; the offset of the topic nobody subscribes to is kept all along.
    b = new_member_id(c, "billing", "orders")
    b_replies = join(c, "billing", b, "orders", rebalance_ms=four_hours_ms)
    assert b_replies == []
    assert c.groups["billing"].state is GroupState.PREPARING_REBALANCE
    await stay_alive(
        c, "billing", a, gen, 2 * RETENTION_MIN, expect=ErrorCode.REBALANCE_IN_PROGRESS
    )
    assert described_state(c, "billing") == "PreparingRebalance"
    assert fetch(c, "billing", ORDERS[0], old) == {ORDERS[0]: 5, old: 7}

    # `a` rejoins: CompletingRebalance until the leader syncs. Still nothing expires.
    a_replies = join(c, "billing", a, "orders", rebalance_ms=four_hours_ms)
    (joined,) = a_replies
    assert joined.error_code == ErrorCode.NONE and joined.leader == a
    assert c.groups["billing"].state is GroupState.COMPLETING_REBALANCE
    await trio.sleep(3 * CHECK_INTERVAL_S)
    assert fetch(c, "billing", ORDERS[0], old) == {ORDERS[0]: 5, old: 7}

    # Stable again: the next check removes the unsubscribed topic's offset, committed two
    # hours ago, and keeps the subscribed one.
    sync_as_leader(c, "billing", a, joined.generation_id)
    assert c.groups["billing"].state is GroupState.STABLE
    await trio.sleep(2 * CHECK_INTERVAL_S)
    assert fetch(c, "billing", ORDERS[0], old) == {ORDERS[0]: 5, old: -1}
    assert group_metadata_key("billing") in last_values(node.broker, "billing")


async def test_group_without_generation_writes_no_group_metadata_tombstone(node, autojump_clock):
    c = node.coordinator
    # assign() consumers: offsets only, generation 0, no GroupMetadata record ever written.
    commit(c, "manual", {ORDERS[0]: 11})
    commit(c, "adhoc", {ORDERS[1]: 4})
    (deleted,) = c.offsets.delete_groups(DeleteGroupsRequest(groups_names=["adhoc"])).results
    assert deleted.error_code == ErrorCode.NONE
    await trio.sleep(RETENTION_MIN * MINUTE + 2 * CHECK_INTERVAL_S)
    assert "manual" not in c.groups

    # Both are gone through offset tombstones alone, with no GroupMetadata key on disk.
    for group, tp in (("manual", ORDERS[0]), ("adhoc", ORDERS[1])):
        on_disk = last_values(node.broker, group)
        assert on_disk[offset_commit_key(group, *tp)] is None
        assert group_metadata_key(group) not in on_disk

    await node.restart()
    c = node.coordinator
    await trio.sleep(0.1)  # loading the partitions
    assert fetch(c, "manual", ORDERS[0]) == {ORDERS[0]: -1}
    assert fetch(c, "adhoc", ORDERS[1]) == {ORDERS[1]: -1}
    assert described_state(c, "manual") == described_state(c, "adhoc") == "Dead"


async def test_one_commit_is_one_batch_and_each_partition_gets_its_answer(node, autojump_clock):
    """Not expiry, but what expiry starts from: what a commit stores and answers."""
    c = node.coordinator
    member, gen = await stable_member(c, "billing", "orders")
    partition = c.store.partition_for("billing")
    log = node.broker.topics.get_log(OFFSETS_TOPIC, partition)
    end_before = log.log_end_offset
    response = c.offsets.commit_offsets(
        OffsetCommitRequest(
            group_id="billing",
            generation_id_or_member_epoch=gen,
            member_id=member,
            topics=[
                OffsetCommitRequestTopic(
                    name="orders",
                    partitions=[
                        OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=5, committed_metadata="m"
                        ),
                        OffsetCommitRequestPartition(partition_index=7, committed_offset=1),
                        OffsetCommitRequestPartition(
                            partition_index=1, committed_offset=9, committed_metadata="x" * 4097
                        ),
                    ],
                ),
                OffsetCommitRequestTopic(
                    name="old-orders",
                    partitions=[
                        OffsetCommitRequestPartition(partition_index=0, committed_offset=3)
                    ],
                ),
                OffsetCommitRequestTopic(
                    name="nope",
                    partitions=[
                        OffsetCommitRequestPartition(partition_index=0, committed_offset=3)
                    ],
                ),
            ],
        ),
        api_version=8,
    )
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in response.topics
    ] == [
        (
            "orders",
            [
                (0, ErrorCode.NONE),
                (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                (1, ErrorCode.OFFSET_METADATA_TOO_LARGE),
            ],
        ),
        ("old-orders", [(0, ErrorCode.NONE)]),
        ("nope", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]),
    ]
    # The two accepted offsets went to the log together, as one batch of two records.
    assert log.log_end_offset == end_before + 2
    batches = []
    for segment in log.segments:
        data = memoryview(segment.log_path.read_bytes())
        batches += [(header.base_offset, header.record_count) for _, header in iter_batches(data)]
    assert batches[-1] == (end_before, 2)
    stored = c.groups["billing"].offsets
    assert stored[("orders", 0)].offset == 5 and stored[("orders", 0)].metadata == "m"
    assert stored[("orders", 0)].record_offset == end_before
    assert stored[("old-orders", 0)].record_offset == end_before + 1
    assert ("orders", 1) not in stored
    assert fetch(c, "billing", *ORDERS, ("old-orders", 0)) == {
        ORDERS[0]: 5,
        ORDERS[1]: -1,
        ("old-orders", 0): 3,
    }


# -- a real broker and a real client, in seconds ----------------------------------------------


def test_v2_retention_time_expires_on_a_real_broker(kafka_broker_factory):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic
    from wire import roundtrip

    broker = kafka_broker_factory({"offsets.retention.check.interval.ms": "100"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(10)

    retention_ms = 3000
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        started = time.monotonic()
        committed = roundtrip(
            sock,
            OffsetCommitRequest(
                group_id="legacy",
                generation_id_or_member_epoch=-1,
                member_id="",
                retention_time_ms=retention_ms,
                topics=[
                    OffsetCommitRequestTopic(
                        name="orders",
                        partitions=[
                            OffsetCommitRequestPartition(partition_index=0, committed_offset=42)
                        ],
                    )
                ],
            ),
            2,
        )
        assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE
        fetched = roundtrip(
            sock,
            OffsetFetchRequest(
                group_id="legacy",
                topics=[OffsetFetchRequestTopic(name="orders", partition_indexes=[0])],
            ),
            2,
        )
        if time.monotonic() - started < retention_ms / 1000:
            assert fetched.topics[0].partitions[0].committed_offset == 42

    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "legacy"}
    )
    try:
        tp = confluent_kafka.TopicPartition("orders", 0)
        deadline = time.monotonic() + 30
        while True:
            (got,) = consumer.committed([tp], timeout=10)
            if got.offset == confluent_kafka.OFFSET_INVALID or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert got.offset == confluent_kafka.OFFSET_INVALID
    finally:
        consumer.close()
