"""Cluster tests: real ZooKeeper (Debian's, the plugin's `zookeeper` fixture), real brokers."""

from __future__ import annotations

import pytest
from clustertest_helpers import ZooKeeperView


@pytest.fixture
def zk_view(zookeeper):
    """A kazoo client on the cluster's chroot (/kafka, as KafkaCluster uses)."""
    view = ZooKeeperView(zookeeper.connect, "/kafka")
    yield view
    view.close()


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory):
    """`kafka_cluster` (three broker threads and their own ZooKeeper) for a whole module:
    for tests that leave it as they found it (topics of names of their own; no broker
    stopped, paused or reconfigured). A cluster costs seconds to start and stop."""
    from trio_broker.testing import (
        ZOOKEEPER_MISSING,
        KafkaCluster,
        ZooKeeperServer,
        zookeeper_classpath,
    )

    if zookeeper_classpath() is None:
        pytest.skip(ZOOKEEPER_MISSING)
    with (
        ZooKeeperServer() as zookeeper,
        KafkaCluster(zookeeper, base_dir=tmp_path_factory.mktemp("shared-cluster")) as cluster,
    ):
        yield cluster


@pytest.fixture
def shared_zk_view(shared_cluster):
    """`zk_view` on `shared_cluster`'s ZooKeeper."""
    view = ZooKeeperView(shared_cluster.zookeeper.connect, "/kafka")
    yield view
    view.close()
