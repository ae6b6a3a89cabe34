"""What the group and transaction coordinators share about their internal topics.

Both keep their state as records in an internal topic (`__consumer_offsets`,
`__transaction_state`) and map a group or transactional id to one of its partitions the
same way; loading a partition reads it whole from the start. Kafka keeps these pieces in
its coordinator-common module and `internals.Topic`; here they are one small module that
`cluster/groups/` and `cluster/transactions/` both stand on, so neither imports the other.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from trio_broker.protocol.records import iter_batches

if TYPE_CHECKING:
    from trio_broker.log import PartitionLog

__all__ = [
    "OFFSETS_TOPIC",
    "TRANSACTION_STATE_TOPIC",
    "iter_log_batches",
    "java_string_hashcode",
    "partition_for",
]

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"


def java_string_hashcode(text: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


# Every request about a group or transaction asks for its partition: a pure function of a
# few strings, cached rather than rehashed each time.
@functools.lru_cache(maxsize=65536)
def partition_for(key: str, num_partitions: int) -> int:
    """Kafka's `Utils.abs(key.hashCode) % num_partitions`, for group and transactional ids."""
    h = java_string_hashcode(key)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


def iter_log_batches(log: PartitionLog) -> Iterator[memoryview]:
    """Every record batch of a partition, oldest first: what loading a coordinator replays."""
    for segment in list(log.segments):
        if segment.size == 0:
            continue
        file = segment.file()
        data = os.pread(file.fd, segment.size, 0)
        mv = memoryview(data)
        for pos, header in iter_batches(mv):
            yield mv[pos : pos + header.size]
