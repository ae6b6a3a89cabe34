"""A cluster of broker processes (KafkaCluster(processes=True)): the faults the replication
tests inflict, checked on membership alone: SIGSTOP past the session timeout drops a broker
from /brokers/ids and SIGCONT brings it back; kill -9 and a start on the same port too."""

from __future__ import annotations

from clustertest_helpers import FAST_SESSION, eventually, view

from trio_broker.testing import KafkaCluster


def test_sigstop_kill_and_restart_of_broker_processes(zookeeper, tmp_path, zk_view):
    with KafkaCluster(
        zookeeper, base_dir=tmp_path, size=3, overrides=FAST_SESSION, processes=True
    ) as cluster:
        assert zk_view.broker_ids() == [1, 2, 3]
        b2, b3 = cluster.brokers[2], cluster.brokers[3]

        b2.pause()  # frozen: its session expires (4 s), ZooKeeper drops its registration
        eventually(lambda: zk_view.broker_ids() == [1, 3], budget_s=20, what="2 gone")
        b2.resume()  # it finds its session expired, and registers in a new one
        eventually(lambda: zk_view.broker_ids() == [1, 2, 3], budget_s=20, what="2 back")

        port = b3.port
        b3.kill()
        eventually(lambda: zk_view.broker_ids() == [1, 2], budget_s=20, what="3 gone")
        b3.start_again()
        assert b3.port == port
        eventually(lambda: zk_view.broker_ids() == [1, 2, 3], budget_s=20, what="3 back")
        nodes = eventually(
            lambda: len(view(b3.bootstrap)[2]) == 3 and view(b3.bootstrap)[2],
            budget_s=10,
            what="broker 3 sees all three",
        )
        assert [n[0] for n in nodes] == [1, 2, 3]
        assert (3, "127.0.0.1", port) in nodes
