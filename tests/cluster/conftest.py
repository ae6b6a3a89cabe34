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
