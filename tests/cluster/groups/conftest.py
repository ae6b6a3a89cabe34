"""Shared by the group tests that run real clients against a real broker."""

from __future__ import annotations

import pytest

# No initial rebalance delay, and few offsets partitions: groups form at once.
FAST = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "5"}


@pytest.fixture
def broker(kafka_broker_factory):
    return kafka_broker_factory(FAST)
