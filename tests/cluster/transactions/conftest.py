"""Shared by the transaction tests that run real clients against a real broker."""

from __future__ import annotations

import pytest

# Few internal partitions and no initial rebalance delay: everything is ready at once.
FAST = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
}


@pytest.fixture
def broker(kafka_broker_factory):
    return kafka_broker_factory(FAST)
