"""Partitioning as Kafka's Java client does it, so keys land where other clients put them.

Keyed records: `toPositive(murmur2(key)) % partitions` (Java's BuiltInPartitioner and
librdkafka's `murmur2_random`). Keyless records: the sticky partitioner (KIP-480), which
keeps one partition until its batch is full, then moves to another at random.
"""

from __future__ import annotations

import random

__all__ = ["StickyPartitioner", "murmur2", "partition_for_key"]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 (seed 0x9747b28c) of `data`, as a signed int32."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    end = length - (length & 3)
    m = _M
    for i in range(0, end, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & _MASK
        k ^= k >> 24
        k = (k * m) & _MASK
        h = ((h * m) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * m) & _MASK
    h ^= h >> 13
    h = (h * m) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Java's producer and librdkafka's murmur2_random pick for `key`."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class StickyPartitioner:
    """One partition per topic for keyless records, changed when its batch fills up."""

    def __init__(self) -> None:
        self.current: dict[str, int] = {}

    def partition(self, topic: str, partitions: int) -> int:
        current = self.current.get(topic)
        if current is None or current >= partitions:
            current = self.current[topic] = random.randrange(partitions)
        return current

    def on_new_batch(self, topic: str, partitions: int, previous: int) -> int:
        """The batch of `previous` is full: move to another partition (if there is one)."""
        if self.current.get(topic) == previous:
            choice = random.randrange(partitions)
            if partitions > 1 and choice == previous:
                choice = (choice + 1 + random.randrange(partitions - 1)) % partitions
            self.current[topic] = choice
        return self.current[topic]
