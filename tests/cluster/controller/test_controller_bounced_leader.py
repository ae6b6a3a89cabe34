"""A new controller and the leaders that registered again unseen (issue 33): killed with
the controller (or while ZooKeeper was down) and restarted before anyone elected in
their place. Against a real ZooKeeper without brokers: the controller's own decisions on
the states it reads, as its failover makes them."""

from __future__ import annotations

import json
import uuid

import pytest

from trio_broker.cluster.controller import partition_state_machine as psm
from trio_broker.cluster.controller.context import ControllerContext, LiveBroker
from trio_broker.cluster.zookeeper import zk_data
from trio_broker.cluster.zookeeper.session import ZooKeeperSession


@pytest.fixture
async def zk(zookeeper):
    session = ZooKeeperSession(
        zookeeper.connect + f"/bounced-{uuid.uuid4().hex[:8]}", session_timeout_ms=6000
    )
    await session.open()
    await session.create(zk_data.CONTROLLER_EPOCH_PATH, zk_data.encode_controller_epoch(1))
    for topic in ("t", "alone"):
        await session.create(zk_data.topic_path(topic), b"{}", makepath=True)
    yield session
    await session.close()


async def _register(zk: ZooKeeperSession, broker_id: int) -> LiveBroker:
    """A registration znode of its own; its czxid is the broker epoch, as a broker's is."""
    path = f"/registrations/{broker_id}-{uuid.uuid4().hex[:6]}"
    await zk.create(path, b"{}", makepath=True)
    stat = await zk.exists(path)
    return LiveBroker(
        broker_id=broker_id,
        host="127.0.0.1",
        port=9090 + broker_id,
        rack=None,
        endpoints=(),
        epoch=stat.czxid,
    )


async def _state(zk: ZooKeeperSession, topic: str, partition: int) -> dict:
    data, _ = await zk.get(zk_data.partition_state_path(topic, partition))
    return json.loads(data)


async def test_a_leader_registered_again_since_its_election_hands_over_to_its_isr(zk):
    ctx = ControllerContext(controller_id=2, epoch=1, epoch_zk_version=0)
    for b in (1, 2, 3):
        ctx.live_brokers[b] = await _register(zk, b)
    # t-0 and t-1 led by broker 1 (replicas 1, 2, 3), t-2 by broker 2; alone-0's only
    # replica is broker 1.
    ctx.assignments["t"] = zk_data.TopicAssignment(
        topic_id=uuid.uuid4(), partitions={0: (1, 2, 3), 1: (1, 3, 2), 2: (2, 3, 1)}
    )
    ctx.assignments["alone"] = zk_data.TopicAssignment(topic_id=uuid.uuid4(), partitions={0: (1,)})
    await psm.initialize(ctx, zk, ctx.partitions())
    # Broker 1 is killed with the controller and starts again: a registration newer than
    # every state it leads. Broker 3 registered again too, but leads nothing.
    ctx.live_brokers[1] = await _register(zk, 1)
    ctx.live_brokers[3] = await _register(zk, 3)

    # What a new controller reads in its failover: the states with their zxids.
    fresh = ControllerContext(controller_id=2, epoch=1, epoch_zk_version=0)
    fresh.live_brokers = dict(ctx.live_brokers)
    fresh.assignments = dict(ctx.assignments)
    for tp, state in zip(
        fresh.partitions(), await psm.read_states(zk, fresh.partitions()), strict=True
    ):
        fresh.states[tp] = state
    assert sorted(fresh.bounced_leaders()) == [("alone", 0), ("t", 0), ("t", 1)]

    changed = await psm.elect(fresh, zk, fresh.bounced_leaders(), psm.Election.BOUNCED)
    assert sorted(changed) == [("t", 0), ("t", 1)]
    # The next replica in the ISR leads, one epoch later; the restarted broker is out of
    # the ISR until it has caught up (as a controller that saw it bounce would do).
    assert await _state(zk, "t", 0) == {
        "controller_epoch": 1,
        "leader": 2,
        "version": 1,
        "leader_epoch": 1,
        "isr": [2, 3],
    }
    assert (await _state(zk, "t", 1))["leader"] == 3
    assert (await _state(zk, "t", 1))["isr"] == [3, 2]
    # Nobody else can lead alone-0, and t-2's leader did not register again: unchanged.
    assert await _state(zk, "alone", 0) == {
        "controller_epoch": 1,
        "leader": 1,
        "version": 1,
        "leader_epoch": 0,
        "isr": [1],
    }
    assert (await _state(zk, "t", 2))["leader"] == 2
    assert (await _state(zk, "t", 2))["leader_epoch"] == 0
    # What the controller wrote is its own decision: nothing counts as bounced any more.
    assert fresh.bounced_leaders() == [("alone", 0)]


def test_a_leader_bounced_while_the_controller_looked_away_loses_its_leaderships(
    zookeeper, tmp_path, zk_view
):
    """The controller sees a bounced broker's registration change only once it has
    registered again (here: the controller frozen across the old session's expiry; in the
    nemesis, the watch's read losing the race with the restarted broker's registration).
    Kafka's controller takes the broker out of the live ones while it handles its failure;
    ours counted it live, so its partitions kept it as leader, in the same epoch."""
    from clustertest_helpers import eventually
    from confluent_kafka.admin import AdminClient, NewTopic

    from trio_broker.testing import KafkaCluster

    with KafkaCluster(zookeeper, base_dir=tmp_path, size=0, processes=True) as cluster:
        # The controller (started first) keeps its session through its freeze; broker 3's
        # old session ends soon after its kill.
        cluster.add_broker(1, {"zookeeper.session.timeout.ms": "30000"})
        cluster.add_broker(2, {"zookeeper.session.timeout.ms": "4000"})
        cluster.add_broker(3, {"zookeeper.session.timeout.ms": "3000"})
        cluster.wait_all_see()
        assert zk_view.controller() == 1
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topic = NewTopic("t", 1, replica_assignment=[[3, 1, 2]])
        admin.create_topics([topic], operation_timeout=15)["t"].result()
        path = "/brokers/topics/t/partitions/0/state"
        eventually(lambda: zk_view.json(path)["isr"] == [3, 1, 2], budget_s=30, what="t-0 in sync")
        registered = zk_view.exists("/brokers/ids/3").czxid

        cluster.brokers[3].kill()
        cluster.brokers[1].pause()
        try:
            # Returns once broker 3 has registered again, after its old session ended.
            cluster.brokers[3].start_again()
            assert zk_view.exists("/brokers/ids/3").czxid != registered
        finally:
            cluster.brokers[1].resume()

        state = eventually(
            lambda: (s := zk_view.json(path))["leader"] != 3 and s,
            budget_s=30,
            what="t-0 led by another broker than the bounced one",
        )
        assert state["leader"] == 1 and state["leader_epoch"] == 1, state
