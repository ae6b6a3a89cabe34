"""Helpers shared by the transaction tests: topics, consuming to the end, .txnindex bytes."""

from __future__ import annotations

import struct
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TXN_ENTRY = struct.Struct(">hqqqq")  # version, producer id, first, last, last stable offset


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)


def consume_all(
    bootstrap: str, topic: str, partitions: int, isolation: str, budget_s: float = 15
) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record up to the end, as `isolation` sees them."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{isolation}-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[tuple[int, int, bytes]] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + budget_s
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise AssertionError(f"consume error: {msg.error()}")
            out.append((msg.partition(), msg.offset(), msg.value()))
    finally:
        consumer.close()
    assert len(at_end) == partitions, f"did not reach the end of {topic} in {budget_s} s"
    return out


def read_txn_index(path: Path) -> list[tuple[int, int, int, int, int]]:
    """Kafka's .txnindex entries, decoded independently of the broker's code."""
    data = path.read_bytes()
    assert len(data) % TXN_ENTRY.size == 0, len(data)
    return list(TXN_ENTRY.iter_unpack(data))


def wait_for(condition, budget_s: float = 20, what: str = "condition") -> None:
    deadline = time.monotonic() + budget_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {budget_s} s")
        time.sleep(0.1)
