"""Helpers shared by the group tests that run real clients."""

from __future__ import annotations

import time

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

# No initial rebalance delay, and few offsets partitions: groups form at once.
FAST = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "5"}


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)


def kip848_consumer(bootstrap: str, group: str, **extra) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    conf.update(extra)
    return Consumer(conf)


class Watch:
    """Polls consumers and checks, after every poll, that no partition is owned twice."""

    def __init__(self, consumers: list[Consumer]) -> None:
        self.consumers = list(consumers)
        self.records: list[tuple[int, bytes]] = []
        self.by_consumer: dict[int, list[tuple[int, bytes]]] = {}

    def owned(self) -> list[set[int]]:
        return [{tp.partition for tp in c.assignment()} for c in self.consumers]

    def read_by_owner(self, per_partition: int) -> bool:
        """Whether each member has read all `per_partition` records of each partition it
        owns: a partition that moved while members joined is read again by its new owner,
        and only then is that owner's position (and so its commit) at the end."""
        return all(
            len({v for q, v in self.by_consumer.get(i, []) if q == p}) == per_partition
            for i, owned in enumerate(self.owned())
            for p in owned
        )

    def poll(self, done, limit_s: float = 60.0) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            for i, c in enumerate(self.consumers):
                msg = c.poll(0.05)
                if msg is not None:
                    assert not msg.error(), msg.error()
                    rec = (msg.partition(), msg.value())
                    self.records.append(rec)
                    self.by_consumer.setdefault(i, []).append(rec)
                owned = self.owned()
                together = [p for parts in owned for p in parts]
                assert len(together) == len(set(together)), f"a partition owned twice: {owned}"
            if done():
                return
        raise AssertionError(f"condition not reached: owned {self.owned()}")
