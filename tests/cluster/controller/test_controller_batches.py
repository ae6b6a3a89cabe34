"""The controller's batched work (issue 37), against a real ZooKeeper without brokers:
hundreds of state znodes created and rewritten in ZooKeeper multis, a partition whose
state moved meanwhile read and decided again on its own, a deposed controller writing
nothing, and one LeaderAndIsr / UpdateMetadata per broker naming what changed."""

from __future__ import annotations

import json
import uuid

import pytest

from trio_broker.cluster.controller import partition_state_machine as psm
from trio_broker.cluster.controller.channel_manager import (
    UPDATE_METADATA_FULL,
    UPDATE_METADATA_INCREMENTAL,
    RequestBatch,
)
from trio_broker.cluster.controller.context import (
    ControllerContext,
    LiveBroker,
    PartitionLeadership,
)
from trio_broker.cluster.zookeeper import zk_data
from trio_broker.cluster.zookeeper.session import ZooKeeperSession

TOPICS = ("a", "b", "c")
PER_TOPIC = 100  # 300 partitions: one multi, then one per partition after a conflict


def _context(epoch_zk_version: int) -> ControllerContext:
    ctx = ControllerContext(controller_id=1, epoch=1, epoch_zk_version=epoch_zk_version)
    for b in (1, 2, 3):
        ctx.live_brokers[b] = LiveBroker(
            broker_id=b, host="127.0.0.1", port=9090 + b, rack=None, endpoints=(), epoch=b
        )
    for i, topic in enumerate(TOPICS):
        # Leaders go round the brokers: topic "c"'s partitions are led by broker 3.
        replicas = tuple((i + k) % 3 + 1 for k in range(3))
        ctx.assignments[topic] = zk_data.TopicAssignment(
            topic_id=uuid.uuid4(), partitions=dict.fromkeys(range(PER_TOPIC), replicas)
        )
        ctx.topic_ids[topic] = ctx.assignments[topic].topic_id
    return ctx


async def _state(zk: ZooKeeperSession, topic: str, partition: int) -> tuple[dict, int]:
    data, stat = await zk.get(zk_data.partition_state_path(topic, partition))
    return json.loads(data), stat.version


@pytest.fixture
async def zk(zookeeper):
    session = ZooKeeperSession(zookeeper.connect + "/kafka", session_timeout_ms=6000)
    await session.open()
    await session.create(zk_data.CONTROLLER_EPOCH_PATH, zk_data.encode_controller_epoch(1))
    for topic in TOPICS:
        await session.create(zk_data.topic_path(topic), b"{}", makepath=True)
    yield session
    await session.close()


async def test_hundreds_of_partitions_are_created_and_reelected_in_batches(zk):
    ctx = _context(epoch_zk_version=0)
    # What a controller that died half-way left: a partition znode without its state,
    # and one with a state (adopted as it is).
    await zk.create(zk_data.partition_path("a", 7), makepath=True)
    left = zk_data.LeaderIsrState(leader=2, leader_epoch=4, isr=(2, 3), controller_epoch=0)
    await zk.create(zk_data.partition_state_path("a", 8), left.encode(), makepath=True)

    everything = ctx.partitions()
    assert sorted(await psm.initialize(ctx, zk, everything)) == sorted(everything)
    assert await _state(zk, "a", 8) == (json.loads(left.encode()), 0)
    assert await _state(zk, "a", 7) == (
        {"controller_epoch": 1, "leader": 1, "version": 1, "leader_epoch": 0, "isr": [1, 2, 3]},
        0,
    )
    assert (await _state(zk, "c", 99))[0]["leader"] == 3

    # Broker 3 dies; meanwhile the leader of b-5 (broker 2) took broker 1 out of its ISR:
    # the controller's version of that znode is stale, so its multi fails as a whole.
    del ctx.live_brokers[3]
    moved = zk_data.LeaderIsrState(leader=2, leader_epoch=0, isr=(2, 3), controller_epoch=1)
    await zk.set(zk_data.partition_state_path("b", 5), moved.encode(), version=0)

    affected = [tp for tp in everything if 3 in ctx.states[tp].isr]
    changed = await psm.elect(ctx, zk, affected, psm.Election.OFFLINE)
    assert changed == affected and len(changed) == 3 * PER_TOPIC
    for topic in TOPICS:
        for partition in range(PER_TOPIC):
            state, _ = await _state(zk, topic, partition)
            assert state["leader"] in (1, 2) and 3 not in state["isr"], (topic, partition)
    # Every partition broker 3 led has a new leader from its ISR, one epoch later.
    assert {(await _state(zk, "c", p))[0]["leader"] for p in range(PER_TOPIC)} == {1}
    assert (await _state(zk, "c", 0))[0]["leader_epoch"] == 1
    # b-5 was read again and decided on what its leader wrote: broker 2 stays, alone.
    assert await _state(zk, "b", 5) == (
        {"controller_epoch": 1, "leader": 2, "version": 1, "leader_epoch": 1, "isr": [2]},
        2,
    )
    assert ctx.states[("b", 5)].isr == (2,)


async def test_a_deposed_controller_writes_nothing(zk):
    ctx = _context(epoch_zk_version=0)
    await psm.initialize(ctx, zk, ctx.partitions())
    # Another controller was elected: /controller_epoch moved past the version ctx wrote.
    await zk.set(zk_data.CONTROLLER_EPOCH_PATH, zk_data.encode_controller_epoch(2))
    del ctx.live_brokers[3]
    with pytest.raises(psm.ControllerMovedError):
        await psm.elect(ctx, zk, ctx.partitions(), psm.Election.OFFLINE)
    for topic in TOPICS:
        for partition in (0, PER_TOPIC - 1):
            assert (await _state(zk, topic, partition))[1] == 0  # never written


def test_one_request_per_broker_naming_what_changed():
    ctx = _context(epoch_zk_version=0)
    for tp in ctx.partitions():
        ctx.states[tp] = PartitionLeadership(
            leader=ctx.replicas(*tp)[0],
            leader_epoch=0,
            isr=(1, 2, 3),
            controller_epoch=1,
            zk_version=0,
        )
    sent: list[tuple[int, object]] = []

    class Channel:
        def enqueue(self, broker_id: int, request: object) -> None:
            sent.append((broker_id, request))

    batch = RequestBatch(ctx)
    for tp in [("a", 1), ("a", 2), ("c", 3)]:
        batch.add_leader_and_isr(ctx.replicas(*tp), *tp)
    batch.send(Channel())
    kinds = [(b, type(r).__name__) for b, r in sent]
    assert sorted(kinds) == sorted(
        [(b, "LeaderAndIsrRequest") for b in (1, 2, 3)]
        + [(b, "UpdateMetadataRequest") for b in (1, 2, 3)]
    )
    for broker_id, request in sent:
        named = sorted(
            (t.topic_name, p.partition_index)
            for t in request.topic_states
            for p in t.partition_states
        )
        assert named == [("a", 1), ("a", 2), ("c", 3)]
        assert request.broker_epoch == broker_id
        if type(request).__name__ == "UpdateMetadataRequest":
            assert request.type == UPDATE_METADATA_INCREMENTAL
            assert [b.id for b in request.live_brokers] == [1, 2, 3]

    sent.clear()
    batch.add_update_metadata([2])  # no partitions named: a full update
    batch.send(Channel())
    [(broker_id, request)] = sent
    assert broker_id == 2 and request.type == UPDATE_METADATA_FULL
    assert sum(len(t.partition_states) for t in request.topic_states) == 3 * PER_TOPIC
