"""What a consumer reads: its assigned partitions, each with a position and fetched records.

Kafka's SubscriptionState: the consumer's topics (subscribe) or partitions (assign), and
per assigned partition the position (the next offset the user gets), the fetch offset
(the next offset to fetch; ahead of the position by what is buffered) and the records
fetched but not yet handed out. A seek or a reset bumps the partition's `epoch`, so the
answer of a fetch sent before it is dropped instead of applied.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import NamedTuple

import attrs

__all__ = ["ConsumerRecord", "PartitionState", "SubscriptionState", "TopicPartition"]


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class ConsumerRecord(NamedTuple):
    """One record as the consumer hands it out (aiokafka's and Kafka's field names).

    A named tuple rather than an attrs class: a consumer builds one per record, and a
    tuple is built in one step (see `client/record_reader.py`).
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0: CreateTime, 1: LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@attrs.define
class PartitionState:
    position: int | None = None  # None: look up the committed offset, else reset
    fetch_offset: int | None = None
    # A reset waiting for ListOffsets: "earliest"/"latest" (seek_to_*, or no commit).
    reset: str | None = None
    epoch: int = 0
    records: deque[ConsumerRecord] = attrs.Factory(deque)
    # Fetched data not decoded yet (Kafka's CompletedFetch): (decode, next offset, bytes).
    # It is decoded when the user reaches it, so that the fetch task hands a response over
    # and sends the next fetch at once, while the user works through the records.
    pending: deque[tuple[Callable[[], tuple[list, int, int]], int, int]] = attrs.Factory(deque)
    pending_bytes: int = 0
    # Bytes of fetched data buffered, decoded (in `records`) or not (in `pending`).
    buffered_bytes: int = 0
    # Where the data decoded last ends: the position once `records` runs out.
    decoded_next: int | None = None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def seek(self, offset: int | None, reset: str | None = None) -> None:
        self.position = offset
        self.fetch_offset = offset
        self.reset = reset
        self.epoch += 1
        self.records.clear()
        self.pending.clear()
        self.pending_bytes = 0
        self.buffered_bytes = 0

    def fill(self) -> bool:
        """Decode pending fetched data until a record is buffered; True if one is.

        A chunk that fails to decode (a CRC error, say) stays, and raises again on the next
        call, as Kafka's consumer keeps failing at a corrupt record until the user seeks."""
        records = self.records
        pending = self.pending
        while not records and pending:
            decode, next_offset, size = pending[0]
            decoded = decode()[0]
            pending.popleft()
            self.pending_bytes -= size
            self.decoded_next = next_offset
            if decoded:
                records.extend(decoded)
            else:
                self.position = next_offset  # past control batches and aborted data
                self.buffered_bytes = self.pending_bytes
        return bool(records)

    @property
    def fetchable(self) -> bool:
        return self.fetch_offset is not None and self.reset is None


@attrs.define
class SubscriptionState:
    topics: frozenset[str] = frozenset()  # subscribe(); empty with assign()
    user_assigned: bool = False
    assignment: dict[TopicPartition, PartitionState] = attrs.Factory(dict)
    version: int = 0  # bumped when the assignment changes

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Set the assigned partitions; those kept keep their state."""
        new = {TopicPartition(*tp): None for tp in partitions}
        self.assignment = {tp: self.assignment.get(tp) or PartitionState() for tp in new}
        self.version += 1

    def add(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.assignment.setdefault(TopicPartition(*tp), PartitionState())
        self.version += 1

    def remove(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.assignment.pop(tp, None)
        self.version += 1

    def state(self, tp: TopicPartition) -> PartitionState:
        state = self.assignment.get(tp)
        if state is None:
            raise ValueError(f"partition {tp.topic}-{tp.partition} is not assigned")
        return state

    def missing_positions(self) -> list[TopicPartition]:
        return [tp for tp, s in self.assignment.items() if s.position is None or s.reset]
