"""Helpers shared by the group tests that run real clients."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic

# No initial rebalance delay, and few offsets partitions: groups form at once.
FAST = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "5"}


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
