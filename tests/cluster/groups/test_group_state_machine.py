"""The group coordinator's state machine and timers, on trio's autojump clock (no sockets)."""

from __future__ import annotations

import pytest
import trio

from trio_broker.broker import Broker
from trio_broker.cluster.groups.group_metadata import GroupState
from trio_broker.config import BrokerConfig
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.heartbeat_request import HeartbeatRequest
from trio_broker.protocol._generated.join_group_request import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
)
from trio_broker.protocol._generated.sync_group_request import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)


@pytest.fixture
async def coordinator(tmp_path, nursery):
    config = BrokerConfig.from_properties(
        {
            "log.dirs": str(tmp_path),
            "offsets.topic.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "3000",
        }
    )
    broker = Broker(config)
    await nursery.start(broker.group_coordinator.run)
    yield broker.group_coordinator
    broker.log_manager.close()


def join(coordinator, member_id="", session_ms=10_000, rebalance_ms=30_000, instance=None):
    replies: list = []
    body = JoinGroupRequest(
        group_id="g",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol(name="range", metadata=b"m")],
    )
    coordinator.join_group(
        body, api_version=7, client_id="c", client_host="/h", reply=replies.append
    )
    return replies


async def joined_member(coordinator):
    first = join(coordinator)
    assert first[0].error_code == ErrorCode.MEMBER_ID_REQUIRED
    return first[0].member_id


async def test_initial_delay_then_generation_one(coordinator, autojump_clock):
    a = await joined_member(coordinator)
    replies = join(coordinator, a)
    assert replies == []  # parked through group.initial.rebalance.delay.ms
    await trio.sleep(2.9)
    assert replies == []
    await trio.sleep(0.2)
    (response,) = replies
    assert response.error_code == ErrorCode.NONE
    assert response.generation_id == 1 and response.leader == a
    assert coordinator.groups["g"].state is GroupState.COMPLETING_REBALANCE


async def test_sync_heartbeat_and_session_expiry(coordinator, autojump_clock):
    a = await joined_member(coordinator)
    join(coordinator, a)
    await trio.sleep(3.1)
    synced: list = []
    coordinator.sync_group(
        SyncGroupRequest(
            group_id="g",
            generation_id=1,
            member_id=a,
            assignments=[SyncGroupRequestAssignment(member_id=a, assignment=b"parts")],
        ),
        api_version=3,
        reply=synced.append,
    )
    assert synced[0].assignment == b"parts"
    group = coordinator.groups["g"]
    assert group.state is GroupState.STABLE
    # Heartbeats within the session timeout keep the member.
    for _ in range(5):
        await trio.sleep(8)
        hb = coordinator.heartbeat(HeartbeatRequest(group_id="g", generation_id=1, member_id=a))
        assert hb.error_code == ErrorCode.NONE
    stale = coordinator.heartbeat(HeartbeatRequest(group_id="g", generation_id=0, member_id=a))
    assert stale.error_code == ErrorCode.ILLEGAL_GENERATION
    # Silence: the session times out, the group rebalances to empty.
    await trio.sleep(10.5)
    assert group.state is GroupState.EMPTY and group.generation_id == 2
    hb = coordinator.heartbeat(HeartbeatRequest(group_id="g", generation_id=1, member_id=a))
    assert hb.error_code == ErrorCode.UNKNOWN_MEMBER_ID


async def test_second_member_triggers_rebalance(coordinator, autojump_clock):
    a = await joined_member(coordinator)
    join(coordinator, a)
    await trio.sleep(3.1)
    coordinator.sync_group(
        SyncGroupRequest(group_id="g", generation_id=1, member_id=a),
        api_version=3,
        reply=lambda r: None,
    )
    b = await joined_member(coordinator)
    b_reply = join(coordinator, b)
    assert coordinator.groups["g"].state is GroupState.PREPARING_REBALANCE
    hb = coordinator.heartbeat(HeartbeatRequest(group_id="g", generation_id=1, member_id=a))
    assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS
    a_reply = join(coordinator, a)
    # Everyone rejoined: generation 2 at once, the leader sees both members.
    assert a_reply[0].generation_id == b_reply[0].generation_id == 2
    assert {m.member_id for m in a_reply[0].members} == {a, b}
    assert b_reply[0].members == []


async def test_member_not_rejoining_is_dropped_after_rebalance_timeout(coordinator, autojump_clock):
    a = await joined_member(coordinator)
    join(coordinator, a, rebalance_ms=20_000, session_ms=60_000)
    await trio.sleep(3.1)
    coordinator.sync_group(
        SyncGroupRequest(group_id="g", generation_id=1, member_id=a),
        api_version=3,
        reply=lambda r: None,
    )
    b = await joined_member(coordinator)
    b_reply = join(coordinator, b, rebalance_ms=20_000, session_ms=60_000)
    await trio.sleep(19)
    assert b_reply == []
    await trio.sleep(2)
    assert b_reply[0].generation_id == 2 and b_reply[0].leader == b
    assert list(coordinator.groups["g"].members) == [b]


async def test_unknown_member_and_bad_session_timeout(coordinator, autojump_clock):
    assert join(coordinator, "nobody")[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert join(coordinator, session_ms=10)[0].error_code == ErrorCode.INVALID_SESSION_TIMEOUT


async def stable_group(coordinator, *, session_ms=10_000, instance=None) -> str:
    """One member through the initial delay and SyncGroup: its member id."""
    if instance is None:
        member_id = await joined_member(coordinator)
        replies = join(coordinator, member_id, session_ms=session_ms)
    else:
        replies = join(coordinator, session_ms=session_ms, instance=instance)
    await trio.sleep(3.1)
    (joined,) = replies
    synced: list = []
    coordinator.sync_group(
        SyncGroupRequest(group_id="g", generation_id=1, member_id=joined.member_id),
        api_version=3,
        reply=synced.append,
    )
    assert synced[0].error_code == ErrorCode.NONE
    return joined.member_id


async def test_session_expires_exactly_a_timeout_after_the_last_heartbeat(
    coordinator, autojump_clock
):
    a = await stable_group(coordinator)
    group = coordinator.groups["g"]
    # Many heartbeats, each pushing the deadline back: only the last one counts.
    for _ in range(25):
        await trio.sleep(0.4)
        hb = coordinator.heartbeat(HeartbeatRequest(group_id="g", generation_id=1, member_id=a))
        assert hb.error_code == ErrorCode.NONE
    await trio.sleep(9.9)
    assert a in group.members and group.state is GroupState.STABLE
    await trio.sleep(0.2)
    assert a not in group.members and group.state is GroupState.EMPTY


async def test_static_member_rejoining_with_a_shorter_session_expires_on_it(
    coordinator, autojump_clock
):
    await stable_group(coordinator, session_ms=60_000, instance="i-1")
    group = coordinator.groups["g"]
    # Back with a new member id and a 10 s session: same subscription, no rebalance.
    (rejoined,) = join(coordinator, session_ms=10_000, instance="i-1")
    assert rejoined.error_code == ErrorCode.NONE
    assert group.state is GroupState.STABLE
    await trio.sleep(9.9)
    assert list(group.members) == [rejoined.member_id]
    await trio.sleep(0.2)
    assert group.members == {} and group.state is GroupState.EMPTY


async def test_replaced_static_member_is_fenced_on_every_request(coordinator, autojump_clock):
    """KIP-345: the static identity is checked before the member id (Kafka's validateMember),
    so the replaced instance hears FENCED_INSTANCE_ID, not UNKNOWN_MEMBER_ID."""
    from trio_broker.protocol._generated.leave_group_request import (
        LeaveGroupRequest,
        MemberIdentity,
    )
    from trio_broker.protocol._generated.offset_commit_request import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )

    old = await stable_group(coordinator, instance="i-1")
    (rejoined,) = join(coordinator, instance="i-1")
    assert rejoined.error_code == ErrorCode.NONE and rejoined.member_id != old
    fenced = ErrorCode.FENCED_INSTANCE_ID
    hb = HeartbeatRequest(group_id="g", generation_id=1, member_id=old, group_instance_id="i-1")
    assert coordinator.heartbeat(hb).error_code == fenced
    synced: list = []
    coordinator.sync_group(
        SyncGroupRequest(group_id="g", generation_id=1, member_id=old, group_instance_id="i-1"),
        api_version=3,
        reply=synced.append,
    )
    assert synced[0].error_code == fenced
    assert join(coordinator, old, instance="i-1")[0].error_code == fenced
    commit = OffsetCommitRequest(
        group_id="g",
        generation_id_or_member_epoch=1,
        member_id=old,
        group_instance_id="i-1",
        topics=[
            OffsetCommitRequestTopic(
                name="t",
                partitions=[OffsetCommitRequestPartition(partition_index=0, committed_offset=5)],
            )
        ],
    )
    answer = coordinator.offsets.commit_offsets(commit, api_version=7)
    assert answer.topics[0].partitions[0].error_code == fenced
    leave = LeaveGroupRequest(
        group_id="g", members=[MemberIdentity(member_id=old, group_instance_id="i-1")]
    )
    left = coordinator.leave_group(leave, api_version=3)
    assert left.members[0].error_code == fenced
    # The new instance is untouched by all of it.
    hb = HeartbeatRequest(
        group_id="g", generation_id=1, member_id=rejoined.member_id, group_instance_id="i-1"
    )
    assert coordinator.heartbeat(hb).error_code == ErrorCode.NONE
    assert coordinator.groups["g"].state is GroupState.STABLE
