"""KIP-848 consumer groups at the coordinator, heartbeat by heartbeat (no sockets): epochs,
revoke-before-assign, fencing, static members, offsets with member epochs."""

from __future__ import annotations

import pytest
import trio

from trio_broker.broker import Broker
from trio_broker.cluster.groups.consumer.assignors import range_assign, uniform_assign
from trio_broker.config import BrokerConfig
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.consumer_group_describe_request import (
    ConsumerGroupDescribeRequest,
)
from trio_broker.protocol._generated.consumer_group_heartbeat_request import (
    ConsumerGroupHeartbeatRequest as Heartbeat,
)
from trio_broker.protocol._generated.consumer_group_heartbeat_request import TopicPartitions
from trio_broker.protocol._generated.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)


@pytest.fixture
async def broker(tmp_path, nursery):
    config = BrokerConfig.from_properties(
        {
            "log.dirs": str(tmp_path),
            "offsets.topic.num.partitions": "3",
            "group.consumer.heartbeat.interval.ms": "1000",
            "group.consumer.session.timeout.ms": "10000",
            "group.consumer.max.size": "3",
        }
    )
    broker = Broker(config)
    await nursery.start(broker.group_coordinator.run)
    broker.topics.create_topic("t", 4, 1)
    yield broker
    broker.log_manager.close()


def hb(broker, member_id, epoch, owned=None, **fields):
    """One heartbeat; `owned` is {topic: partitions} or None (not reported)."""
    topics = broker.metadata.topics
    body = Heartbeat(
        group_id="g",
        member_id=member_id,
        member_epoch=epoch,
        rebalance_timeout_ms=fields.pop("rebalance_timeout_ms", 5000 if epoch == 0 else -1),
        subscribed_topic_names=fields.pop("topics", ["t"] if epoch == 0 else None),
        topic_partitions=None
        if owned is None
        else [
            TopicPartitions(topic_id=topics[t].topic_id, partitions=sorted(ps))
            for t, ps in owned.items()
        ],
        **fields,
    )
    return broker.group_coordinator.consumer.heartbeat(body, client_id="c", client_host="/h")


def parts(response) -> set[int]:
    assert response.assignment is not None
    return {p for tp in response.assignment.topic_partitions for p in tp.partitions}


def owners(broker) -> dict[tuple[str, int], str]:
    return dict(broker.group_coordinator.consumer.group("g").owners)


async def test_join_then_second_member_gets_partitions_only_once_revoked(broker, autojump_clock):
    a = hb(broker, "a", 0)
    assert a.error_code == ErrorCode.NONE and a.member_epoch == 1
    assert parts(a) == {0, 1, 2, 3} and a.heartbeat_interval_ms == 1000
    b = hb(broker, "b", 0)
    # Group epoch 2; b's target is two of a's partitions, still owned by a: b waits.
    assert b.member_epoch == 2 and parts(b) == set()
    group = broker.group_coordinator.consumer.group("g")
    assert group.group_epoch == 2 and group.assignment_epoch == 2
    b_target = {p for ps in group.target["b"].values() for p in ps}
    assert len(b_target) == 2
    # a is told to give them up, its epoch unchanged until it has.
    a = hb(broker, "a", 1, owned={"t": {0, 1, 2, 3}})
    assert a.member_epoch == 1 and parts(a) == {0, 1, 2, 3} - b_target
    # b heartbeats again before a acknowledged: still nothing for b.
    assert parts(hb(broker, "b", 2, owned={"t": {0}})) == set()
    assert all(owner == "a" for owner in owners(broker).values())
    # a acknowledges (owns only what it keeps): epoch 2; then b gets the released ones.
    a = hb(broker, "a", 1, owned={"t": {0, 1, 2, 3} - b_target})
    assert a.member_epoch == 2
    b = hb(broker, "b", 2, owned={})
    assert parts(b) == b_target and b.member_epoch == 2
    assert sorted(owners(broker).values()).count("b") == 2
    assert group.state.value == "Stable"


async def test_stale_and_fenced_epochs(broker, autojump_clock):
    hb(broker, "a", 0)
    assert hb(broker, "a", 7).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert hb(broker, "nobody", 3).error_code == ErrorCode.UNKNOWN_MEMBER_ID

    def commit(member_id, epoch):
        body = OffsetCommitRequest(
            group_id="g",
            generation_id_or_member_epoch=epoch,
            member_id=member_id,
            topics=[
                OffsetCommitRequestTopic(
                    name="t",
                    partitions=[
                        OffsetCommitRequestPartition(partition_index=0, committed_offset=9)
                    ],
                )
            ],
        )
        answer = broker.group_coordinator.offsets.commit_offsets(body, api_version=9)
        return answer.topics[0].partitions[0].error_code

    assert commit("a", 1) == ErrorCode.NONE
    assert commit("a", 0) == ErrorCode.STALE_MEMBER_EPOCH
    assert commit("x", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert broker.group_coordinator.groups["g"].offsets[("t", 0)].offset == 9


async def test_session_expiry_and_leave_give_partitions_back(broker, autojump_clock):
    hb(broker, "a", 0)
    hb(broker, "b", 0)
    hb(broker, "a", 1, owned={"t": {0, 1, 2, 3}})
    group = broker.group_coordinator.consumer.group("g")
    a_keeps = {p for ps in group.target["a"].values() for p in ps}
    hb(broker, "a", 1, owned={"t": a_keeps})
    hb(broker, "b", 2, owned={})
    # a goes silent; b keeps heartbeating. After a's session, b owns everything.
    given = set()
    for _ in range(11):
        await trio.sleep(1)
        b = hb(broker, "b", group.members["b"].member_epoch, owned=group.members["b"].assigned)
        if b.assignment is not None:
            given = parts(b)
    assert "a" not in group.members
    assert given == {0, 1, 2, 3}
    # b leaves: the group is empty.
    left = hb(broker, "b", -1)
    assert left.error_code == ErrorCode.NONE and left.member_epoch == -1
    assert group.members == {} and owners(broker) == {}


async def test_static_member_leaves_with_minus_two_and_comes_back(broker, autojump_clock):
    a = hb(broker, "a", 0, instance_id="i-1")
    assert parts(a) == {0, 1, 2, 3}
    assert hb(broker, "a", -2, instance_id="i-1").member_epoch == -2
    group = broker.group_coordinator.consumer.group("g")
    assert group.group_epoch == 1  # no rebalance for a temporary leave
    # The instance back with a new member id: its predecessor's partitions and epoch.
    back = hb(broker, "a2", 0, instance_id="i-1")
    assert back.error_code == ErrorCode.NONE
    assert back.member_epoch == 1 and parts(back) == {0, 1, 2, 3}
    assert group.group_epoch == 1 and list(group.members) == ["a2"]
    assert set(owners(broker).values()) == {"a2"}
    # A third instance of the same id while a2 is live: refused.
    third = hb(broker, "a3", 0, instance_id="i-1")
    assert third.error_code == ErrorCode.UNRELEASED_INSTANCE_ID


async def test_unreleased_instance_id_and_max_size(broker, autojump_clock):
    hb(broker, "a", 0, instance_id="i-1")
    assert hb(broker, "a2", 0, instance_id="i-1").error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    hb(broker, "b", 0)
    hb(broker, "c", 0)
    assert hb(broker, "d", 0).error_code == ErrorCode.GROUP_MAX_SIZE_REACHED


async def test_unknown_assignor_and_describe(broker, autojump_clock):
    bad = hb(broker, "a", 0, server_assignor="sticky")
    assert bad.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    hb(broker, "a", 0, server_assignor="range")
    described = broker.group_coordinator.consumer.describe(
        ConsumerGroupDescribeRequest(group_ids=["g", "nope"])
    )
    g, nope = described.groups
    assert g.error_code == ErrorCode.NONE and g.assignor_name == "range"
    assert g.group_state == "Stable" and g.group_epoch == 1 and g.assignment_epoch == 1
    (member,) = g.members
    assert member.member_id == "a" and member.subscribed_topic_names == ["t"]
    assert member.assignment.topic_partitions[0].partitions == [0, 1, 2, 3]
    assert nope.error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_uniform_is_balanced_and_sticky():
    subs = {m: {"t"} for m in ("a", "b", "c")}
    first = uniform_assign(subs, {"t": 6}, {})
    assert sorted(len(first[m]["t"]) for m in subs) == [2, 2, 2]
    # c leaves: a and b keep theirs and split c's.
    second = uniform_assign({"a": {"t"}, "b": {"t"}}, {"t": 6}, first)
    assert first["a"]["t"] <= second["a"]["t"] and first["b"]["t"] <= second["b"]["t"]
    assert second["a"]["t"] | second["b"]["t"] == set(range(6))
    assert len(second["a"]["t"]) == len(second["b"]["t"]) == 3


def test_range_gives_contiguous_ranges():
    out = range_assign({"a": {"t"}, "b": {"t"}}, {"t": 5}, {})
    assert out == {"a": {"t": {0, 1, 2}}, "b": {"t": {3, 4}}}


async def test_group_survives_a_restart(tmp_path, nursery, autojump_clock):
    """The ConsumerGroup* records are replayed: epochs, targets and every member's
    assignment come back, and members carry on at their epochs."""
    from test_offset_expiry import Node

    node = Node(tmp_path, nursery)
    await node.start()
    node.broker.topics.create_topic("t", 4, 1)
    hb(node.broker, "a", 0, instance_id="ia")
    hb(node.broker, "b", 0)
    group = node.coordinator.consumer.group("g")
    keeps = group.target["a"]["t"]
    hb(node.broker, "a", 1, owned={"t": {0, 1, 2, 3}})
    hb(node.broker, "a", 1, owned={"t": keeps})
    hb(node.broker, "b", 2, owned={})
    # Still revoking? No: a acknowledged, b took the rest. Now a third joins and a is
    # left mid-revocation, to be restored as such.
    hb(node.broker, "c", 0)
    hb(node.broker, "a", 2, owned={"t": keeps})
    before = node.coordinator.consumer.group("g")
    snapshot = (
        before.group_epoch,
        before.assignment_epoch,
        {
            m: (x.member_epoch, x.state, x.assigned, x.pending_revocation, x.instance_id)
            for m, x in before.members.items()
        },
        before.target,
        dict(before.owners),
    )
    await node.restart()
    await trio.sleep(0.01)
    after = node.coordinator.consumer.group("g")
    assert after is not None
    assert (
        after.group_epoch,
        after.assignment_epoch,
        {
            m: (x.member_epoch, x.state, x.assigned, x.pending_revocation, x.instance_id)
            for m, x in after.members.items()
        },
        after.target,
        dict(after.owners),
    ) == snapshot
    # b heartbeats on at its epoch, unaware of the restart.
    b = hb(node.broker, "b", after.members["b"].member_epoch, owned=after.members["b"].assigned)
    assert b.error_code == ErrorCode.NONE
    # Members that never come back are removed: a, which was revoking, after its
    # rebalance timeout (5 s), c after its session (the broker's default, 45 s).
    for _ in range(46):
        await trio.sleep(1)
        hb(node.broker, "b", after.members["b"].member_epoch, owned=after.members["b"].assigned)
    assert list(after.members) == ["b"]
    assert after.members["b"].assigned == {"t": {0, 1, 2, 3}}
    node.stop()


async def test_group_config_overrides_the_broker_timeouts(broker, autojump_clock):
    broker.metadata.group_configs["g"] = {
        "consumer.heartbeat.interval.ms": "2000",
        "consumer.session.timeout.ms": "20000",
    }
    assert hb(broker, "a", 0).heartbeat_interval_ms == 2000
    group = broker.group_coordinator.consumer.group("g")
    await trio.sleep(19.9)
    assert "a" in group.members
    await trio.sleep(0.2)
    assert group.members == {}


async def test_offset_fetch_and_txn_commit_check_the_member_epoch(broker, autojump_clock):
    from trio_broker.protocol._generated.offset_fetch_request import (
        OffsetFetchRequest,
        OffsetFetchRequestGroup,
        OffsetFetchRequestTopics,
    )
    from trio_broker.protocol._generated.txn_offset_commit_request import (
        TxnOffsetCommitRequest,
        TxnOffsetCommitRequestPartition,
        TxnOffsetCommitRequestTopic,
    )

    hb(broker, "a", 0)
    offsets = broker.group_coordinator.offsets

    def fetch(member_id, epoch):
        wanted = OffsetFetchRequestGroup(
            group_id="g",
            member_id=member_id,
            member_epoch=epoch,
            topics=[OffsetFetchRequestTopics(name="t", partition_indexes=[0])],
        )
        body = OffsetFetchRequest(groups=[wanted])
        return offsets.fetch_offsets(body, api_version=9).groups[0].error_code

    assert fetch("a", 1) == ErrorCode.NONE
    assert fetch("a", 0) == ErrorCode.STALE_MEMBER_EPOCH
    assert fetch("x", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert fetch(None, -1) == ErrorCode.NONE  # an admin client's fetch

    def txn_commit(member_id, epoch):
        body = TxnOffsetCommitRequest(
            transactional_id="tx",
            group_id="g",
            producer_id=7,
            producer_epoch=0,
            generation_id=epoch,
            member_id=member_id,
            topics=[
                TxnOffsetCommitRequestTopic(
                    name="t",
                    partitions=[
                        TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=3)
                    ],
                )
            ],
        )
        answer = offsets.txn_commit_offsets(body, api_version=3)
        return answer.topics[0].partitions[0].error_code

    assert txn_commit("a", 0) == ErrorCode.STALE_MEMBER_EPOCH
    assert txn_commit("a", 1) == ErrorCode.NONE


async def test_delete_list_and_conversion_between_kinds(broker, autojump_clock):
    from trio_broker.protocol._generated.delete_groups_request import DeleteGroupsRequest
    from trio_broker.protocol._generated.describe_groups_request import DescribeGroupsRequest
    from trio_broker.protocol._generated.join_group_request import (
        JoinGroupRequest,
        JoinGroupRequestProtocol,
    )
    from trio_broker.protocol._generated.list_groups_request import ListGroupsRequest

    coordinator = broker.group_coordinator
    offsets = coordinator.offsets

    def listed(**filters):
        body = ListGroupsRequest(**filters)
        return [
            (g.group_id, g.group_type, g.group_state)
            for g in offsets.list_groups(body, api_version=5).groups
        ]

    def delete():
        body = DeleteGroupsRequest(groups_names=["g"])
        return offsets.delete_groups(body).results[0].error_code

    def classic_join():
        replies: list = []
        body = JoinGroupRequest(
            group_id="g",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            member_id="",
            protocol_type="consumer",
            protocols=[JoinGroupRequestProtocol(name="range", metadata=b"m")],
        )
        coordinator.join_group(
            body, api_version=5, client_id="c", client_host="/h", reply=replies.append
        )
        return replies

    hb(broker, "a", 0)
    assert listed() == [("g", "consumer", "Stable")]
    assert listed(types_filter=["classic"]) == []
    assert listed(states_filter=["stable"], types_filter=["consumer"]) == [
        ("g", "consumer", "Stable")
    ]
    assert delete() == ErrorCode.NON_EMPTY_GROUP
    described = offsets.describe_groups(DescribeGroupsRequest(groups=["g"])).groups[0]
    assert (described.error_code, described.group_state) == (ErrorCode.NONE, "Dead")
    assert classic_join()[0].error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    hb(broker, "a", -1)
    assert listed() == [("g", "consumer", "Empty")]
    # Empty: a classic member may take the group over, and it becomes a classic group.
    assert classic_join()[0].error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert coordinator.groups["g"].consumer is None
    # And back: a consumer member of an empty classic group makes it a consumer group.
    coordinator.groups["g"].pending_members.clear()
    assert hb(broker, "b", 0).error_code == ErrorCode.NONE
    assert listed() == [("g", "consumer", "Stable")]
    hb(broker, "b", -1)
    assert delete() == ErrorCode.NONE
    assert listed() == []
    assert coordinator.consumer.group("g") is None


async def test_regex_subscription_follows_new_topics(broker, autojump_clock):
    a = hb(broker, "a", 0, topics=None, subscribed_topic_regex="^t.*")
    assert parts(a) == {0, 1, 2, 3}
    broker.topics.create_topic("tx", 2, 1)
    broker.topics.create_topic("other", 2, 1)
    a = hb(broker, "a", 1, owned={"t": {0, 1, 2, 3}})
    group = broker.group_coordinator.consumer.group("g")
    assert group.group_epoch == 2  # the matching topics changed
    assert group.members["a"].assigned == {"t": {0, 1, 2, 3}, "tx": {0, 1}}
    bad = hb(broker, "b", 0, topics=None, subscribed_topic_regex="(")
    assert bad.error_code == ErrorCode.INVALID_REQUEST
