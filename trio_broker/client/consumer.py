"""The consumer: Kafka's KafkaConsumer, in Trio.

    async with Consumer("127.0.0.1:9092", group_id="g", auto_offset_reset="earliest") as c:
        c.subscribe(["events"])
        async for record in c:
            print(record.topic, record.partition, record.offset, record.key, record.value)

or, in batches: `batches = await c.getmany(timeout_ms=500)` gives {TopicPartition: [records]}.

Config keys are Kafka's consumer keys with underscores (`auto_offset_reset`,
`enable_auto_commit`, `isolation_level`, ...) or with dots in `config={...}`.

Everything that talks to brokers runs in the consumer's nursery: the metadata refresher,
the fetcher (`client/fetcher.py`: a fetch in flight per broker while records are handed
out), and with a group the heartbeat and auto-commit tasks (`client/group.py`, or
`client/group_consumer.py` with `group_protocol="consumer"`, KIP-848). Joining
and rebalancing happen inside `getmany`/`__anext__`, as inside Kafka's poll(). Leaving
the `async with` (normally, by an exception or by cancellation) commits (with auto
commit), sends LeaveGroup and closes every connection.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import trio

from trio_broker.client.config import ConsumerConfig
from trio_broker.client.errors import KafkaError
from trio_broker.client.fetcher import Fetcher, OffsetOutOfRangeError
from trio_broker.client.group import CommitFailedError, ConsumerRebalanceListener, GroupMember
from trio_broker.client.group_consumer import ConsumerGroupMember
from trio_broker.client.metadata import ClusterMetadata
from trio_broker.client.network_client import NetworkClient
from trio_broker.client.subscription import (
    ConsumerRecord,
    PartitionState,
    SubscriptionState,
    TopicPartition,
)

__all__ = [
    "CommitFailedError",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "OffsetOutOfRangeError",
    "TopicPartition",
]

log = logging.getLogger(__name__)

_CLOSE_GRACE_S = 5.0  # for the last commit and LeaveGroup when the consumer is cancelled


class Consumer:
    """`async with Consumer(bootstrap_servers, group_id=..., **config)`; see the module docstring."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "localhost:9092",
        *,
        config: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.config = ConsumerConfig.build(config, bootstrap_servers=bootstrap_servers, **kwargs)
        cfg = self.config
        self.client = NetworkClient(cfg)
        self.metadata = ClusterMetadata(
            self.client, allow_auto_topic_creation=cfg.allow_auto_create_topics
        )
        self.subscriptions = SubscriptionState()
        self.group: GroupMember | None = None
        self._group_client: NetworkClient | None = None
        if cfg.group_id is not None:
            self._group_client = NetworkClient(cfg)
            member = ConsumerGroupMember if cfg.group_protocol == "consumer" else GroupMember
            self.group = member(
                self.client,
                self._group_client,
                self.metadata,
                self.subscriptions,
                cfg,
                wake=self._wake_all,
            )
        self.fetcher = Fetcher(
            self.client,
            self.metadata,
            self.subscriptions,
            cfg,
            on_records=self._notify,
            committed=self.group.fetch_committed if self.group is not None else None,
        )
        self._changed = trio.Event()
        self._last_committed: dict[TopicPartition, int] = {}
        self._order: list[TopicPartition] = []
        self._order_version = -1
        self._next_index = 0
        self._open = False
        self._closed = False
        self._stack: contextlib.AsyncExitStack | None = None

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Consumer:
        # One exit stack for both clients' nurseries, so they close in order even when
        # closing the first one raises (say Cancelled).
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(self.client)
            if self._group_client is not None:
                await stack.enter_async_context(self._group_client)
            nursery = self.client.nursery
            nursery.start_soon(self.metadata.run)
            nursery.start_soon(self.fetcher.run)
            if self.group is not None:
                nursery.start_soon(self.group.heartbeat_loop)
                if self.config.enable_auto_commit:
                    nursery.start_soon(self._auto_commit_loop)
            self._stack = stack.pop_all()
        self._open = True
        return self

    async def __aexit__(self, exc_type, exc, tb) -> bool | None:  # noqa: ANN001
        assert self._stack is not None
        try:
            with trio.CancelScope(shield=exc_type is not None) as scope:
                if exc_type is not None:
                    scope.deadline = trio.current_time() + _CLOSE_GRACE_S
                await self._leave(clean=exc_type is None)
        finally:
            self._open = False
            self._closed = True
            stack, self._stack = self._stack, None
            result = await stack.__aexit__(exc_type, exc, tb)
        return result

    async def _leave(self, *, clean: bool) -> None:
        group = self.group
        if group is None:
            return
        if clean:
            await self._leave_group(group, clean=True)
        elif group.coordinator is not None:
            # Cancelled (or failing): the connections' tasks are being cancelled with the
            # nursery around us, so the last commit and LeaveGroup go on a connection of
            # their own, opened in this shielded scope.
            async with NetworkClient(self.config) as fresh:
                group.group_client = fresh
                await self._leave_group(group, clean=False)

    async def _leave_group(self, group: GroupMember, *, clean: bool) -> None:
        try:
            if self.config.enable_auto_commit and group.stable:
                await group.commit_quietly(self._uncommitted())
            if clean and self.subscriptions.topics and self.subscriptions.assignment:
                # As Kafka's close(): the listener hears its partitions go.
                await group.listener.on_partitions_revoked(set(self.subscriptions.assignment))
            await group.leave()
        except KafkaError as exc:
            log.info("consumer close: %s", exc)

    def _notify(self) -> None:
        self._changed.set()

    def _wake_all(self) -> None:
        # The group changed the assignment (or wants a rejoin): the fetcher and poll look.
        self._changed.set()
        self.fetcher.wake()

    async def _wait_change(self, deadline: float = math.inf) -> None:
        self._changed = trio.Event()
        with trio.move_on_at(deadline):
            await self._changed.wait()

    def _check_open(self) -> None:
        if not self._open:
            raise RuntimeError("the consumer is not open: use `async with Consumer(...)`")

    # -- what to read -----------------------------------------------------------------------

    def subscribe(
        self, topics: Iterable[str], listener: ConsumerRebalanceListener | None = None
    ) -> None:
        """Join the group for `topics`; the join happens in the next getmany/iteration."""
        if self.group is None:
            raise ValueError("subscribe() needs a group_id (use assign() without one)")
        if self.subscriptions.user_assigned:
            raise ValueError("subscribe() after assign(): unsubscribe first")
        if isinstance(topics, str):
            topics = [topics]
        self.subscriptions.topics = frozenset(topics)
        self.metadata.add_topics(topics)
        if listener is not None:
            self.group.listener = listener
        self.group.request_rejoin()

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions (no group membership; commits still go to group_id)."""
        if self.subscriptions.topics:
            raise ValueError("assign() after subscribe(): unsubscribe first")
        partitions = [TopicPartition(*tp) for tp in partitions]
        self.subscriptions.user_assigned = True
        self.subscriptions.assign(partitions)
        self.metadata.add_topics({tp.topic for tp in partitions})
        self.fetcher.wake()

    def unsubscribe(self) -> None:
        self.subscriptions.topics = frozenset()
        self.subscriptions.user_assigned = False
        self.subscriptions.assign([])

    def assignment(self) -> set[TopicPartition]:
        return set(self.subscriptions.assignment)

    def subscription(self) -> frozenset[str]:
        return self.subscriptions.topics

    # -- positions --------------------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """The next record of `partition` handed out is the one at `offset`."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, not {offset}")
        self.subscriptions.state(TopicPartition(*partition)).seek(offset)
        self.fetcher.wake()

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._reset(partitions, "earliest")
        await trio.lowlevel.checkpoint()

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._reset(partitions, "latest")
        await trio.lowlevel.checkpoint()

    def _reset(self, partitions: Sequence[TopicPartition], how: str) -> None:
        for tp in partitions or list(self.subscriptions.assignment):
            self.subscriptions.state(TopicPartition(*tp)).seek(None, how)
        self.fetcher.wake()

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record to hand out, once known (looked up if needed)."""
        self._check_open()
        tp = TopicPartition(*partition)
        while True:
            self._raise_errors()
            state = self.subscriptions.state(tp)
            if state.position is not None and state.reset is None:
                await trio.lowlevel.checkpoint()
                return state.position
            self.fetcher.wake()
            await self._wait_change()

    def highwater(self, partition: TopicPartition) -> int:
        """The partition's high watermark as of the last fetch (-1 before one)."""
        return self.subscriptions.state(TopicPartition(*partition)).high_watermark

    async def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset for `partition`, or None."""
        self._check_open()
        if self.group is None:
            raise ValueError("committed() needs a group_id")
        tp = TopicPartition(*partition)
        return (await self.group.fetch_committed([tp])).get(tp)

    # -- commits ----------------------------------------------------------------------------

    async def commit(
        self, offsets: Mapping[TopicPartition, int | tuple[int, str]] | None = None
    ) -> None:
        """Commit `offsets` (the next offsets to read), or the positions of every partition.

        Raises CommitFailedError when the group has rebalanced meanwhile (the records
        since the last commit will be read again by the partition's next owner).
        """
        self._check_open()
        if self.group is None:
            raise ValueError("commit() needs a group_id")
        if offsets is None:
            offsets = self.group.positions()
        offsets = {TopicPartition(*tp): v for tp, v in offsets.items()}
        await self.group.commit(offsets)
        for tp, value in offsets.items():
            self._last_committed[tp] = value[0] if isinstance(value, tuple) else value

    def _uncommitted(self) -> dict[TopicPartition, int]:
        assert self.group is not None
        return {
            tp: offset
            for tp, offset in self.group.positions().items()
            if self._last_committed.get(tp) != offset
        }

    async def _auto_commit_loop(self) -> None:
        assert self.group is not None
        interval = self.config.auto_commit_interval_ms / 1000
        while True:
            await trio.sleep(interval)
            group = self.group
            if not group.stable or group.need_rejoin:
                continue
            offsets = self._uncommitted()
            if offsets and await group.commit_quietly(offsets):
                self._last_committed.update(offsets)

    # -- records ----------------------------------------------------------------------------

    def _raise_errors(self) -> None:
        for client in (self.client, self._group_client):
            if client is not None and client.auth_error is not None:
                raise client.auth_error
        errors = self.fetcher.errors
        if errors:
            error = errors.pop(0)
            raise error

    async def _poll_group(self) -> None:
        group = self.group
        if group is not None and self.subscriptions.topics:
            await group.ensure_active()
            if self.config.enable_auto_commit:
                # Offsets handed out before a rebalance were committed by it (or are lost).
                self._last_committed = {
                    tp: o
                    for tp, o in self._last_committed.items()
                    if tp in self.subscriptions.assignment
                }

    async def getmany(
        self,
        *partitions: TopicPartition,
        timeout_ms: float = 0,
        max_records: int | None = None,
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched so far, up to `max_records` (max_poll_records), per partition.

        Waits up to `timeout_ms` for the first record; returns {} if none came.
        """
        self._check_open()
        deadline = trio.current_time() + timeout_ms / 1000
        limit = max_records or self.config.max_poll_records
        chosen = {TopicPartition(*tp) for tp in partitions} or None
        while True:
            await self._poll_group()
            self._raise_errors()
            result = self._drain(limit, chosen)
            if result:
                await trio.lowlevel.checkpoint()
                return result
            if trio.current_time() >= deadline:
                await trio.lowlevel.checkpoint()
                return {}
            await self._wait_change(deadline)

    def _drain(
        self, limit: int, chosen: set[TopicPartition] | None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        result: dict[TopicPartition, list[ConsumerRecord]] = {}
        assignment = self.subscriptions.assignment
        order = [tp for tp in assignment if chosen is None or tp in chosen]
        if not order:
            return result
        # Start where the last call stopped, so that no partition starves the others.
        start = self._next_index % len(order)
        for i in range(len(order)):
            if limit <= 0:
                break
            tp = order[(start + i) % len(order)]
            state = assignment[tp]
            if not state.records and not (state.pending and state.fill()):
                continue
            taken = self._take(state, limit)
            result[tp] = taken
            limit -= len(taken)
            self._next_index = start + i + 1
        if result:
            self.fetcher.wake()
        return result

    @staticmethod
    def _take(state: PartitionState, limit: int) -> list[ConsumerRecord]:
        records = state.records
        before = len(records)
        if before <= limit:
            taken = list(records)
            records.clear()
        else:
            taken = [records.popleft() for _ in range(limit)]
        remaining = len(records)
        pending = state.pending_bytes
        if remaining:
            state.position = taken[-1].offset + 1
            state.buffered_bytes = pending + (state.buffered_bytes - pending) * remaining // before
        else:
            state.position = state.decoded_next
            state.buffered_bytes = pending
        return taken

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        # The common case first: a record is buffered and the group has nothing to do.
        group = self.group
        if (
            self._open
            and not self.fetcher.errors
            and (group is None or not self.subscriptions.topics or group.settled)
        ):
            record = self._next_record()
            if record is not None:
                await trio.lowlevel.checkpoint_if_cancelled()
                return record
        self._check_open()
        while True:
            await self._poll_group()
            self._raise_errors()
            record = self._next_record()
            if record is not None:
                await trio.lowlevel.checkpoint_if_cancelled()
                return record
            await self._wait_change()

    def _next_record(self) -> ConsumerRecord | None:
        assignment = self.subscriptions.assignment
        if self._order_version != self.subscriptions.version:
            self._order = list(assignment)
            self._order_version = self.subscriptions.version
        order = self._order
        for _ in range(len(order)):
            tp = order[self._next_index % len(order)]
            state = assignment[tp]
            records = state.records
            if records or (state.pending and state.fill()):
                before = len(records)
                record = records.popleft()
                if before > 1:
                    state.position = record.offset + 1
                    state.buffered_bytes -= (state.buffered_bytes - state.pending_bytes) // before
                    if before - 1 == self.config.max_poll_records // 2:
                        self.fetcher.wake()
                else:
                    state.position = state.decoded_next
                    state.buffered_bytes = state.pending_bytes
                    self._next_index += 1
                    self.fetcher.wake()
                return record
            self._next_index += 1
        return None
