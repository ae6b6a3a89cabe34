"""The share coordinator of a cluster: Read, Write, Initialize, Delete and
ReadShareGroupStateSummary served by the leader of the key's `__share_group_state` partition (Kafka's
ShareCoordinatorService).

A share-partition's state belongs to the key "group:topic id:partition", which maps to one
partition of `__share_group_state` as a group id maps to one of `__consumer_offsets`. Its
leader keeps the last snapshot of every key of the partitions it leads, read from its log
the first time a request needs a partition at its current leader epoch (after a move, the
new leader replays what the old one wrote and its followers fetched). A write replaces the
key's state with the one sent (the share-partition's leader always sends its whole
in-flight state) and is appended before it is answered, as a ShareSnapshot record or a
ShareUpdate of what changed since the last snapshot (`share_state.StateWriter`); a read answers the last snapshot, or StartOffset -1 when there is none.
Initialize writes a fresh snapshot (a state epoch, a start offset, no records: what
AlterShareGroupOffsets sets); Delete writes the key's tombstone (DeleteGroups,
DeleteShareGroupOffsets). A write carrying an older state epoch than the key's is refused
FENCED_STATE_EPOCH, as Kafka refuses it: the share-partition's leader then forgets what it
holds and reads the state again. A deleted key keeps a fence (its state epoch + 1, in
memory), so that a leader still holding the deleted state cannot write it back.
On a lone broker the share-partitions write to the store directly (`share_state`) and this
is not used.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from trio_broker.cluster.groups.share.share_partition import RecordState, SharePartition, Span
from trio_broker.cluster.groups.share.share_state import (
    PER_SNAPSHOT,
    SHARE_STATE_TOPIC,
    SNAPSHOT_TYPE,
    UPDATE_TYPE,
    StateWriter,
    append_record,
    encode_key,
    replay_partition,
    state_partition,
)
from trio_broker.cluster.replication.isr_wait import map_for_coordinator, replicated
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.delete_share_group_state_response import (
    DeleteShareGroupStateResponse,
    DeleteStateResult,
)
from trio_broker.protocol._generated.delete_share_group_state_response import (
    PartitionResult as DeletePartitionResult,
)
from trio_broker.protocol._generated.initialize_share_group_state_response import (
    InitializeShareGroupStateResponse,
    InitializeStateResult,
)
from trio_broker.protocol._generated.initialize_share_group_state_response import (
    PartitionResult as InitializePartitionResult,
)
from trio_broker.protocol._generated.read_share_group_state_response import (
    PartitionResult,
    ReadShareGroupStateResponse,
    ReadStateResult,
    StateBatch,
)
from trio_broker.protocol._generated.read_share_group_state_summary_response import (
    PartitionResult as SummaryPartitionResult,
)
from trio_broker.protocol._generated.read_share_group_state_summary_response import (
    ReadShareGroupStateSummaryResponse,
    ReadStateSummaryResult,
)
from trio_broker.protocol._generated.write_share_group_state_response import (
    PartitionResult as WritePartitionResult,
)
from trio_broker.protocol._generated.write_share_group_state_response import (
    WriteShareGroupStateResponse,
    WriteStateResult,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker

logger = logging.getLogger(__name__)

__all__ = ["ShareStateCoordinator", "state_partition"]

Key = tuple[str, uuid.UUID, int]


class ShareStateCoordinator:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._states: dict[int, dict[Key, SharePartition]] = {}
        self._epochs: dict[int, int] = {}  # the leader epoch each partition was read at
        self.writer = StateWriter(
            lambda: broker.config.value(PER_SNAPSHOT), lambda: broker.group_coordinator.now_ms()
        )
        # Deleted keys: the state epoch a write must carry at least (module docstring).
        self._fences: dict[Key, int] = {}

    def _count(self) -> int:
        topic = self.broker.metadata.topics.get(SHARE_STATE_TOPIC)
        return len(topic.partitions) if topic is not None else 0

    def _partition_states(self, p: int) -> dict[Key, SharePartition]:
        """The keys of partition `p`, read from the log when its leader epoch is new;
        raises KafkaError(NOT_COORDINATOR) where this broker does not lead it."""
        replicas: Any = getattr(self.broker, "replica_manager", None)
        own = replicas.leader_partition(SHARE_STATE_TOPIC, p) if replicas is not None else None
        if own is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR)
        if self._epochs.get(p) != own.leader_epoch:
            snapshot_epochs: dict[Any, int] = {}
            self._states[p] = replay_partition(self.broker, p, snapshot_epochs)
            for key, epoch in snapshot_epochs.items():
                self.writer.forget(key, epoch)  # a snapshot first, its epoch the next one
            self._epochs[p] = own.leader_epoch
            logger.info(
                "share coordinator: %s-%d read at leader epoch %d: %d share-partition(s)",
                SHARE_STATE_TOPIC,
                p,
                own.leader_epoch,
                len(self._states[p]),
            )
        return self._states[p]

    def read(self, body: Any) -> ReadShareGroupStateResponse:
        count = self._count()
        results = []
        for t in body.topics:
            rows = []
            for p in t.partitions:
                row = PartitionResult(partition=p.partition, start_offset=-1, state_epoch=0)
                try:
                    if not count:
                        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
                    states = self._partition_states(
                        state_partition(body.group_id, t.topic_id, p.partition, count)
                    )
                except KafkaError as exc:
                    row.error_code = exc.code
                    rows.append(row)
                    continue
                key = (body.group_id, t.topic_id, p.partition)
                row.state_epoch = self._fences.get(key, 0)
                sp = states.get(key)
                if sp is not None:
                    row.state_epoch = sp.state_epoch
                    row.start_offset = sp.start_offset
                    row.state_batches = [
                        StateBatch(
                            first_offset=s.first,
                            last_offset=s.last,
                            delivery_state=int(s.state),
                            delivery_count=s.delivery_count,
                        )
                        for s in sp.spans
                    ]
                rows.append(row)
            results.append(ReadStateResult(topic_id=t.topic_id, partitions=rows))
        return ReadShareGroupStateResponse(results=results)

    def read_summary(self, body: Any) -> ReadShareGroupStateSummaryResponse:
        """Each share-partition's state epoch and start offset (-1: no state), for
        DescribeShareGroupOffsets (Kafka's readStateSummary)."""
        count = self._count()
        results = []
        for t in body.topics:
            rows = []
            for p in t.partitions:
                key = (body.group_id, t.topic_id, p.partition)
                row = SummaryPartitionResult(
                    partition=p.partition, start_offset=-1, state_epoch=self._fences.get(key, 0)
                )
                try:
                    if not count:
                        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
                    states = self._partition_states(
                        state_partition(body.group_id, t.topic_id, p.partition, count)
                    )
                except KafkaError as exc:
                    row.error_code = exc.code
                else:
                    sp = states.get(key)
                    if sp is not None:
                        row.state_epoch, row.start_offset = sp.state_epoch, sp.start_offset
                rows.append(row)
            results.append(ReadStateSummaryResult(topic_id=t.topic_id, partitions=rows))
        return ReadShareGroupStateSummaryResponse(results=results)

    async def write(self, body: Any) -> WriteShareGroupStateResponse:
        """Append each share-partition's new state, then answer once the ISR of its
        `__share_group_state` partition has it (acks=all, as Kafka's coordinator writes)."""
        count = self._count()
        results = []
        appended: dict[int, list[Any]] = {}
        for t in body.topics:
            rows = []
            for p in t.partitions:
                row = WritePartitionResult(partition=p.partition)
                key = (body.group_id, t.topic_id, p.partition)
                try:
                    if not count:
                        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
                    sp_partition = state_partition(body.group_id, t.topic_id, p.partition, count)
                    states = self._partition_states(sp_partition)
                    self._check_state_epoch(key, states.get(key), p.state_epoch)
                    sp = SharePartition("", p.partition, p.start_offset, state_epoch=p.state_epoch)
                    sp.spans = [
                        Span(
                            b.first_offset,
                            b.last_offset,
                            _state(b.delivery_state),
                            b.delivery_count,
                        )
                        for b in p.state_batches
                        if b.last_offset >= p.start_offset
                    ]
                    sp.end_offset = max([s.last + 1 for s in sp.spans], default=p.start_offset)
                    kind, value = self.writer.record(key, sp, p.leader_epoch)
                    append_record(self.broker, sp_partition, encode_key(*key, kind), value)
                    states[key] = sp
                    appended.setdefault(sp_partition, []).append(row)
                except KafkaError as exc:
                    row.error_code = exc.code
                except ValueError:
                    row.error_code = ErrorCode.INVALID_REQUEST
                rows.append(row)
            results.append(WriteStateResult(topic_id=t.topic_id, partitions=rows))
        await self._replicated(appended)
        return WriteShareGroupStateResponse(results=results)

    def _check_state_epoch(self, key: Key, current: SharePartition | None, epoch: int) -> None:
        floor = current.state_epoch if current is not None else self._fences.get(key, 0)
        if epoch != -1 and epoch < floor:
            raise KafkaError(ErrorCode.FENCED_STATE_EPOCH)

    async def _replicated(self, appended: dict[int, list[Any]]) -> None:
        """Answer the rows appended to each state partition once its ISR has them."""
        if appended and getattr(self.broker, "replica_manager", None) is not None:
            codes = await replicated(
                self.broker,
                [(SHARE_STATE_TOPIC, p) for p in appended],
                self.broker.config.request_timeout_ms,
            )
            for p, rows in appended.items():
                code = map_for_coordinator(codes.get((SHARE_STATE_TOPIC, p), ErrorCode.NONE))
                for row in rows:
                    row.error_code = code

    async def initialize(self, body: Any) -> InitializeShareGroupStateResponse:
        """A fresh snapshot of each share-partition: its state epoch and start offset, no
        records in flight (Kafka's initializeState)."""
        count = self._count()
        results = []
        appended: dict[int, list[Any]] = {}
        for t in body.topics:
            rows = []
            for p in t.partitions:
                row = InitializePartitionResult(partition=p.partition)
                key = (body.group_id, t.topic_id, p.partition)
                try:
                    if not count:
                        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
                    if p.partition < 0 or p.start_offset < -1:
                        raise KafkaError(ErrorCode.INVALID_REQUEST)
                    sp_partition = state_partition(body.group_id, t.topic_id, p.partition, count)
                    states = self._partition_states(sp_partition)
                    self._check_state_epoch(key, states.get(key), p.state_epoch)
                    sp = SharePartition("", p.partition, p.start_offset, state_epoch=p.state_epoch)
                    kind, value = self.writer.record(key, sp, snapshot=True)
                    append_record(self.broker, sp_partition, encode_key(*key, kind), value)
                    states[key] = sp
                    self._fences.pop(key, None)
                    appended.setdefault(sp_partition, []).append(row)
                except KafkaError as exc:
                    row.error_code = exc.code
                rows.append(row)
            results.append(InitializeStateResult(topic_id=t.topic_id, partitions=rows))
        await self._replicated(appended)
        return InitializeShareGroupStateResponse(results=results)

    async def delete(self, body: Any) -> DeleteShareGroupStateResponse:
        """Each share-partition's tombstone, where it has state (Kafka's deleteState)."""
        count = self._count()
        results = []
        appended: dict[int, list[Any]] = {}
        for t in body.topics:
            rows = []
            for p in t.partitions:
                row = DeletePartitionResult(partition=p.partition)
                key = (body.group_id, t.topic_id, p.partition)
                try:
                    if not count:
                        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
                    sp_partition = state_partition(body.group_id, t.topic_id, p.partition, count)
                    states = self._partition_states(sp_partition)
                    sp = states.get(key)
                    if sp is not None:
                        for kind in (UPDATE_TYPE, SNAPSHOT_TYPE):
                            append_record(self.broker, sp_partition, encode_key(*key, kind), None)
                        del states[key]
                        self.writer.forget(key)
                        self._fences[key] = sp.state_epoch + 1
                        appended.setdefault(sp_partition, []).append(row)
                except KafkaError as exc:
                    row.error_code = exc.code
                rows.append(row)
            results.append(DeleteStateResult(topic_id=t.topic_id, partitions=rows))
        await self._replicated(appended)
        return DeleteShareGroupStateResponse(results=results)


def _state(code: int) -> RecordState:
    state = RecordState(code)  # ValueError for a code that is no state
    # An acquisition does not outlive its leader: written as available.
    return RecordState.AVAILABLE if state is RecordState.ACQUIRED else state
