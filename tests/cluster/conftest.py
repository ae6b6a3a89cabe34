"""Cluster tests: real ZooKeeper (Debian's, the plugin's `zookeeper` fixture), real brokers."""

from __future__ import annotations

import pytest
from clustertest_helpers import ZooKeeperView

# Sessions short enough that a killed broker is gone within seconds (ZooKeeper's tick in
# the test server is 500 ms, so sessions may be this short).
FAST_SESSION = {"zookeeper.session.timeout.ms": "4000"}


@pytest.fixture
def zk_view(zookeeper):
    """A kazoo client on the cluster's chroot (/kafka, as KafkaCluster uses)."""
    view = ZooKeeperView(zookeeper.connect, "/kafka")
    yield view
    view.close()
