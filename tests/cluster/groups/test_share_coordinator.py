"""Share groups at the coordinator, heartbeat by heartbeat (no sockets, trio's autojump
clock for sessions): joining, epochs, assignments, fencing, leaving, sessions running out,
and the offsets' expiry pass leaving share groups alone."""

from __future__ import annotations

import pytest
import trio

from trio_broker.broker import Broker
from trio_broker.config import BrokerConfig
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.consumer_group_heartbeat_request import (
    ConsumerGroupHeartbeatRequest,
)
from trio_broker.protocol._generated.share_group_heartbeat_request import (
    ShareGroupHeartbeatRequest as Heartbeat,
)


@pytest.fixture
async def broker(tmp_path, nursery):
    config = BrokerConfig.from_properties(
        {
            "log.dirs": str(tmp_path),
            "offsets.topic.num.partitions": "3",
            "group.share.heartbeat.interval.ms": "1000",
            "group.share.session.timeout.ms": "45000",
        }
    )
    broker = Broker(config)
    await nursery.start(broker.group_coordinator.run)
    broker.topics.create_topic("t", 4, 1)
    yield broker
    broker.log_manager.close()


def hb(broker, member_id, epoch, topics=None, group="g"):
    body = Heartbeat(
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        subscribed_topic_names=topics if topics is not None else (["t"] if epoch == 0 else None),
    )
    return broker.group_coordinator.share.heartbeat(body, client_id="c", client_host="/h")


def assigned(response) -> list[int]:
    return sorted(p for tp in response.assignment.topic_partitions for p in tp.partitions)


async def test_members_join_get_partitions_and_leave(broker):
    a = hb(broker, "a", 0)
    assert (a.error_code, a.member_epoch, a.heartbeat_interval_ms) == (0, 1, 1000)
    assert assigned(a) == [0, 1, 2, 3]
    b = hb(broker, "b", 0)
    assert b.member_epoch == 2 and len(assigned(b)) == 2
    # a's next heartbeat (at its old epoch) takes epoch 2 and half the partitions.
    a = hb(broker, "a", 1)
    assert a.member_epoch == 2 and sorted(assigned(a) + assigned(b)) == [0, 1, 2, 3]
    # Nothing changed: no assignment sent.
    assert hb(broker, "a", 2).assignment is None
    # A stale epoch is fenced; an unknown member is told so.
    # a's previous epoch is still allowed (a lost answer), not an older one nor a newer.
    assert hb(broker, "a", 1).error_code == ErrorCode.NONE
    assert hb(broker, "b", 1).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert hb(broker, "a", 7).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert hb(broker, "z", 2).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    left = hb(broker, "b", -1)
    assert (left.error_code, left.member_epoch) == (0, -1)
    a = hb(broker, "a", 2)
    assert a.member_epoch == 3 and assigned(a) == [0, 1, 2, 3]
    # A share group with members is no consumer group: a KIP-848 member is refused.
    consumer = ConsumerGroupHeartbeatRequest(
        group_id="g",
        member_id="k",
        member_epoch=0,
        rebalance_timeout_ms=5000,
        subscribed_topic_names=["t"],
    )
    answer = broker.group_coordinator.consumer.heartbeat(consumer, client_id="c", client_host="/h")
    assert answer.error_code == ErrorCode.GROUP_ID_NOT_FOUND


async def test_a_silent_member_is_removed_after_its_session(broker, autojump_clock):
    epoch = hb(broker, "a", 0).member_epoch
    b = hb(broker, "b", 0)
    assert b.member_epoch == 2
    for _ in range(10):  # a heartbeats; b says nothing
        await trio.sleep(5)
        a = hb(broker, "a", epoch)
        assert a.error_code == 0
        epoch = a.member_epoch
    group = broker.group_coordinator.share.group("g")
    assert list(group.members) == ["a"] and group.group_epoch == 3
    assert hb(broker, "b", 2).error_code == ErrorCode.UNKNOWN_MEMBER_ID


async def test_bad_heartbeats_get_error_codes(broker):
    assert hb(broker, "a", 0, group="").error_code == ErrorCode.INVALID_REQUEST
    assert hb(broker, "a", -5).error_code == ErrorCode.INVALID_REQUEST
    body = Heartbeat(group_id="g", member_id="a", member_epoch=0, subscribed_topic_names=None)
    answer = broker.group_coordinator.share.heartbeat(body, client_id="c", client_host="/h")
    assert answer.error_code == ErrorCode.INVALID_REQUEST  # a first heartbeat names topics
    assert hb(broker, "", 3).error_code == ErrorCode.INVALID_REQUEST


async def test_offset_expiry_leaves_share_groups_alone(broker):
    # The offsets' expiry pass skips share groups, with members or empty: they have no
    # offsets and go only by DeleteGroups.
    hb(broker, "a", 0, group="busy")
    hb(broker, "b", 0, group="idle")
    hb(broker, "b", -1, group="idle")
    coordinator = broker.group_coordinator
    assert coordinator.offsets.expire_offsets(2**62) == 0
    assert {"busy", "idle"} <= set(coordinator.groups)
