"""Broker fencing while ZooKeeper is down (cluster/controller/fencing.py): the controller
stops hearing a dead leader's heartbeats and fences it, but cannot write the election
until ZooKeeper is back; it elects again until it can, rather than waiting for the dead
broker's session to end (a whole session timeout after ZooKeeper's return)."""

from __future__ import annotations

import time

import pytest
from clustertest_helpers import ZooKeeperView
from failover_helpers import create_topic, wait_for_leaders
from nemesis import NetCluster, controller_id, zk_state
from netlab import NetLab, skip_reason

from trio_broker.testing import ZOOKEEPER_MISSING, zookeeper_classpath


@pytest.fixture
def lab():
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    if zookeeper_classpath() is None:
        pytest.skip(ZOOKEEPER_MISSING)
    with NetLab() as lab:
        yield lab


def test_a_leader_killed_while_zookeeper_is_down_is_replaced_before_its_session_ends(lab, tmp_path):
    """kill -9 of a leader (not the controller) while ZooKeeper is down for 4 s, longer
    than broker.session.timeout.ms (3 s in the nemesis cluster). Its registration
    outlives ZooKeeper's return by a session timeout (6 s); the partition must have its
    new leader, from the ISR, while that registration is still there. Without fencing, or
    with a fence whose failed election is not tried again, it is elected only once the
    registration ends."""
    with NetCluster(lab, tmp_path) as cluster:
        assert cluster.zookeeper is not None
        controller = controller_id(cluster)
        victim = next(b for b in sorted(cluster.brokers) if b != controller)
        others = [b for b in sorted(cluster.brokers) if b != victim]
        create_topic(cluster.bootstrap, "zkdown", replica_assignment=[[victim, *others]])
        wait_for_leaders(cluster.bootstrap, "zkdown", 1, isr_size=3)
        before = zk_state(cluster, "zkdown", 0)
        assert before["leader"] == victim

        cluster.zookeeper.kill()
        cluster.brokers[victim].kill()
        time.sleep(4)
        cluster.zookeeper.start_again()

        view = ZooKeeperView(cluster.zookeeper.connect, "/kafka")
        try:
            deadline = time.monotonic() + 60
            while True:
                assert time.monotonic() < deadline, "no new leader within 60 s"
                # The state first, then the registration: a new leader read before the
                # registration is seen still there was elected while it was.
                state = view.json("/brokers/topics/zkdown/partitions/0/state")
                registered = view.exists(f"/brokers/ids/{victim}") is not None
                if state["leader"] != victim:
                    break
                assert registered, (
                    f"broker {victim}'s registration ended before its partition was "
                    f"elected away: {state}"
                )
                time.sleep(0.1)
            assert registered, (
                f"the new leader {state['leader']} was not seen before broker {victim}'s "
                "registration ended"
            )
        finally:
            view.close()
        assert state["leader"] in others
        assert state["leader_epoch"] > before["leader_epoch"]
        assert victim not in state["isr"] and set(state["isr"]) <= set(others)
