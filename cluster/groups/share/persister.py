"""The share-partition leader's side of durable state in a cluster (Kafka's Persister):
reading a share-partition's state from its share coordinator when this broker starts to
lead the partition, and writing every change back.

The share coordinator of a share-partition is the leader of its `__share_group_state`
partition (`state_coordinator`), found in the metadata cache; when that is this broker the
call is local, otherwise a ReadShareGroupState or WriteShareGroupState request over this
broker's inter-broker client. Writes are queued: each change marks the share-partition,
and one task sends the marked ones' whole state (a snapshot), again after a failure. A
handler that has applied acknowledgements waits (`flush`) until they are written before
answering, so an acknowledged record is never delivered again after a failover; an
acquisition is written without waiting (lost, the records are only delivered again).

The group coordinator's side uses it too: AlterShareGroupOffsets initializes the
share-partitions at their share coordinators (InitializeShareGroupState, a state epoch one
higher), DeleteGroups and DeleteShareGroupOffsets delete their state there
(DeleteShareGroupState). A leader whose write is then refused FENCED_STATE_EPOCH forgets
the share-partition (`on_fenced`) and reads it again on the next fetch.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

import trio

from trio_broker.cluster.groups.share.share_partition import RecordState, SharePartition, Span
from trio_broker.cluster.groups.share.share_state import SHARE_STATE_TOPIC
from trio_broker.cluster.groups.share.state_coordinator import state_partition
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.delete_share_group_state_request import (
    DeleteShareGroupStateRequest,
    DeleteStateData,
)
from trio_broker.protocol._generated.delete_share_group_state_request import (
    PartitionData as DeletePartition,
)
from trio_broker.protocol._generated.initialize_share_group_state_request import (
    InitializeShareGroupStateRequest,
    InitializeStateData,
)
from trio_broker.protocol._generated.initialize_share_group_state_request import (
    PartitionData as InitializePartition,
)
from trio_broker.protocol._generated.read_share_group_state_request import (
    PartitionData as ReadPartition,
)
from trio_broker.protocol._generated.read_share_group_state_request import (
    ReadShareGroupStateRequest,
    ReadStateData,
)
from trio_broker.protocol._generated.read_share_group_state_summary_request import (
    PartitionData as SummaryPartition,
)
from trio_broker.protocol._generated.read_share_group_state_summary_request import (
    ReadShareGroupStateSummaryRequest,
    ReadStateSummaryData,
)
from trio_broker.protocol._generated.write_share_group_state_request import (
    PartitionData as WritePartition,
)
from trio_broker.protocol._generated.write_share_group_state_request import (
    StateBatch,
    WriteShareGroupStateRequest,
    WriteStateData,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from trio_broker.broker import Broker

logger = logging.getLogger(__name__)

__all__ = ["SharePersister"]

Key = tuple[str, str, int]  # group, topic, partition
_RETRY_S = 0.2


class SharePersister:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._client: Any = None
        self._pending: dict[Key, SharePartition] = {}
        self._version: dict[Key, int] = {}
        self._written: dict[Key, int] = {}
        self._wake = trio.Event()
        self._progress = trio.Event()
        # Told when a write is refused FENCED_STATE_EPOCH: (key, the state refused).
        self.on_fenced: Callable[[Key, SharePartition], None] | None = None

    # -- the inter-broker client and the writer task ----------------------------------------

    async def run(self) -> None:
        from trio_broker.client.network_client import NetworkClient
        from trio_broker.security.inter_broker import inter_broker_client_config

        config = inter_broker_client_config(
            self.broker.config,
            bootstrap_servers="127.0.0.1:9",  # never used: requests go to node ids
            client_id=f"broker-{self.broker.node_id}-share-persister",
        )
        async with NetworkClient(config) as client:
            self._client = client
            try:
                while True:
                    await self._wake.wait()
                    self._wake = trio.Event()
                    await self._write_pending()
            finally:
                self._client = None

    def _coordinator(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int | None:
        """The node leading the key's `__share_group_state` partition, by the metadata
        cache; None while the topic or its leader is missing (the topic is then made)."""
        topic = self.broker.metadata.topics.get(SHARE_STATE_TOPIC)
        if topic is None:
            store = self.broker.group_coordinator.share_partitions.store
            try:
                store._ensure_topic()
            except KafkaError:
                pass  # being created (in a cluster, by the controller)
            return None
        pstate = topic.partitions.get(
            state_partition(group_id, topic_id, partition, len(topic.partitions))
        )
        return pstate.leader if pstate is not None and pstate.leader >= 0 else None

    async def _send(self, node: int, request: Any) -> Any:
        local = self.broker.group_coordinator.share_state_coordinator
        if node == self.broker.node_id:
            if request.API_KEY == 84:
                return local.read(request)
            if request.API_KEY == 87:
                return local.read_summary(request)
            serve = {83: local.initialize, 85: local.write, 86: local.delete}[request.API_KEY]
            return await serve(request)
        client = self._client
        if client is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        client.set_nodes(
            {node_id: (b.host, b.port) for node_id, b in self.broker.metadata.brokers.items()}
        )
        timeout_s = self.broker.config.request_timeout_ms / 1000
        with trio.move_on_after(timeout_s):
            try:
                return await client.send(node, request, 0)
            except Exception as exc:  # a connection that fails: the caller tries again
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc)) from None
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT)

    # -- reading -------------------------------------------------------------------------

    async def read(
        self, group_id: str, topic: str, partition: int, leader_epoch: int
    ) -> tuple[SharePartition | None, int]:
        """The share-partition's durable state (None when it has none) and its state
        epoch; raises KafkaError when the share coordinator cannot say (the fetch delivers
        nothing from it then)."""
        state = self.broker.metadata.topics.get(topic)
        if state is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        topic_id = state.topic_id
        node = self._coordinator(group_id, topic_id, partition)
        if node is None:
            if SHARE_STATE_TOPIC not in self.broker.metadata.topics:
                return None, 0  # no state topic yet: no state anywhere
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        request = ReadShareGroupStateRequest(
            group_id=group_id,
            topics=[
                ReadStateData(
                    topic_id=topic_id,
                    partitions=[ReadPartition(partition=partition, leader_epoch=leader_epoch)],
                )
            ],
        )
        response = await self._send(node, request)
        row = response.results[0].partitions[0]
        if row.error_code:
            raise KafkaError(ErrorCode(row.error_code))
        if row.start_offset < 0:
            return None, row.state_epoch
        sp = SharePartition(topic, partition, row.start_offset, state_epoch=row.state_epoch)
        sp.spans = [
            Span(b.first_offset, b.last_offset, RecordState(b.delivery_state), b.delivery_count)
            for b in row.state_batches
            if b.last_offset >= row.start_offset
        ]
        sp.end_offset = max([s.last + 1 for s in sp.spans], default=row.start_offset)
        sp._advance()
        return sp, sp.state_epoch

    # -- writing -------------------------------------------------------------------------

    def mark(self, group_id: str, sp: SharePartition) -> None:
        key = (group_id, sp.topic, sp.partition)
        self._version[key] = self._version.get(key, 0) + 1
        self._pending[key] = sp
        sp.dirty = False
        self._wake.set()

    async def flush(self, keys: list[Key], timeout_s: float) -> bool:
        """Wait until every change to these share-partitions made so far is written;
        whether that happened within `timeout_s`."""
        targets = {k: self._version[k] for k in keys if k in self._version}
        deadline = trio.current_time() + timeout_s
        while any(self._written.get(k, 0) < v for k, v in targets.items()):
            if trio.current_time() >= deadline:
                return False
            with trio.move_on_at(deadline):
                await self._progress.wait()
        return True

    async def _write_pending(self) -> None:
        taken, self._pending = self._pending, {}
        by_node: dict[tuple[int, str], list[tuple[Key, int, uuid.UUID, WritePartition]]] = {}
        retry = False
        for key, sp in taken.items():
            group_id, topic, partition = key
            state = self.broker.metadata.topics.get(topic)
            if state is None:
                continue  # the topic is gone: nothing to keep
            node = self._coordinator(group_id, state.topic_id, partition)
            if node is None:
                self._pending.setdefault(key, sp)
                retry = True
                continue
            row = WritePartition(
                partition=partition,
                state_epoch=sp.state_epoch,
                leader_epoch=getattr(sp, "leader_epoch", -1),
                start_offset=sp.start_offset,
                state_batches=[
                    StateBatch(
                        first_offset=s.first,
                        last_offset=s.last,
                        delivery_state=int(
                            RecordState.AVAILABLE if s.state is RecordState.ACQUIRED else s.state
                        ),
                        delivery_count=s.delivery_count,
                    )
                    for s in sp.spans
                ],
            )
            by_node.setdefault((node, group_id), []).append(
                (key, self._version[key], state.topic_id, row)
            )
        for (node, group_id), rows in by_node.items():
            topics: dict[uuid.UUID, list[WritePartition]] = {}
            for _, _, topic_id, row in rows:
                topics.setdefault(topic_id, []).append(row)
            request = WriteShareGroupStateRequest(
                group_id=group_id,
                topics=[WriteStateData(topic_id=t, partitions=ps) for t, ps in topics.items()],
            )
            try:
                response = await self._send(node, request)
                errors = {
                    (t.topic_id, p.partition): p.error_code
                    for t in response.results
                    for p in t.partitions
                }
            except KafkaError as exc:
                logger.info("share state write to broker %s failed: %s", node, exc)
                errors = {(tid, row.partition): exc.code for _, _, tid, row in rows}
            for key, version, topic_id, row in rows:
                error = errors.get((topic_id, row.partition), ErrorCode.UNKNOWN_SERVER_ERROR)
                if error == ErrorCode.FENCED_STATE_EPOCH:
                    # The state moved on (altered, deleted): what this broker holds is old.
                    logger.info("share state of %s fenced: it is read again", key)
                    self._written[key] = max(self._written.get(key, 0), version)
                    if self.on_fenced is not None:
                        self.on_fenced(key, taken[key])
                elif error:
                    self._pending.setdefault(key, taken[key])  # again, unless newer is queued
                    retry = True
                else:
                    self._written[key] = max(self._written.get(key, 0), version)
        self._progress.set()
        self._progress = trio.Event()
        if retry:
            await trio.sleep(_RETRY_S)
            self._wake.set()

    # -- the group coordinator's: initialize and delete at the share coordinators ----------

    async def _each_coordinator(
        self, group_id: str, keys: list[tuple[uuid.UUID, int]], build: Any
    ) -> dict[tuple[uuid.UUID, int], int]:
        """Send `build(group_id, {topic id: [partition]})` to each key's share coordinator;
        the error code of every key (COORDINATOR_NOT_AVAILABLE where none is known)."""
        rows = await self._rows_of_each(group_id, keys, build)
        return {k: (row if isinstance(row, int) else row.error_code) for k, row in rows.items()}

    async def _rows_of_each(
        self, group_id: str, keys: list[tuple[uuid.UUID, int]], build: Any
    ) -> dict[tuple[uuid.UUID, int], Any]:
        """As `_each_coordinator`, each key's answer row (or the error code where there is
        none: 0 when no state topic exists yet)."""
        codes: dict[tuple[uuid.UUID, int], Any] = {}
        by_node: dict[int, dict[uuid.UUID, list[int]]] = {}
        for topic_id, partition in keys:
            node = self._coordinator(group_id, topic_id, partition)
            if node is None:
                if SHARE_STATE_TOPIC not in self.broker.metadata.topics:
                    codes[(topic_id, partition)] = ErrorCode.NONE  # no state anywhere
                else:
                    codes[(topic_id, partition)] = ErrorCode.COORDINATOR_NOT_AVAILABLE
                continue
            by_node.setdefault(node, {}).setdefault(topic_id, []).append(partition)
        for node, topics in by_node.items():
            try:
                response = await self._send(node, build(group_id, topics))
                for t in response.results:
                    for p in t.partitions:
                        codes[(t.topic_id, p.partition)] = p
            except KafkaError as exc:
                for topic_id, partitions in topics.items():
                    for partition in partitions:
                        codes[(topic_id, partition)] = exc.code
        return codes

    async def delete(
        self, group_id: str, keys: list[tuple[uuid.UUID, int]]
    ) -> dict[tuple[uuid.UUID, int], int]:
        """DeleteShareGroupState for these share-partitions: each one's error code."""

        def build(group_id: str, topics: dict[uuid.UUID, list[int]]) -> Any:
            return DeleteShareGroupStateRequest(
                group_id=group_id,
                topics=[
                    DeleteStateData(
                        topic_id=t, partitions=[DeletePartition(partition=p) for p in ps]
                    )
                    for t, ps in topics.items()
                ],
            )

        return await self._each_coordinator(group_id, keys, build)

    async def start_offsets(
        self, group_id: str, keys: list[tuple[uuid.UUID, int]]
    ) -> dict[tuple[uuid.UUID, int], tuple[int, int]]:
        """ReadShareGroupStateSummary: each share-partition's (error code, start offset),
        the offset -1 where it has no state."""

        def build(group_id: str, topics: dict[uuid.UUID, list[int]]) -> Any:
            return ReadShareGroupStateSummaryRequest(
                group_id=group_id,
                topics=[
                    ReadStateSummaryData(
                        topic_id=t, partitions=[SummaryPartition(partition=p) for p in ps]
                    )
                    for t, ps in topics.items()
                ],
            )

        rows = await self._rows_of_each(group_id, keys, build)
        return {
            k: (row, -1) if isinstance(row, int) else (row.error_code, row.start_offset)
            for k, row in rows.items()
        }

    async def initialize(
        self, group_id: str, topic_id: uuid.UUID, partition: int, start_offset: int
    ) -> int:
        """InitializeShareGroupState: the share-partition starts over at `start_offset`, its
        state epoch one above the one its share coordinator has; the error code."""
        node = self._coordinator(group_id, topic_id, partition)
        if node is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        read = ReadShareGroupStateRequest(
            group_id=group_id,
            topics=[
                ReadStateData(topic_id=topic_id, partitions=[ReadPartition(partition=partition)])
            ],
        )
        try:
            row = (await self._send(node, read)).results[0].partitions[0]
            if row.error_code:
                return row.error_code
            request = InitializeShareGroupStateRequest(
                group_id=group_id,
                topics=[
                    InitializeStateData(
                        topic_id=topic_id,
                        partitions=[
                            InitializePartition(
                                partition=partition,
                                state_epoch=row.state_epoch + 1,
                                start_offset=start_offset,
                            )
                        ],
                    )
                ],
            )
            response = await self._send(node, request)
        except KafkaError as exc:
            return exc.code
        return response.results[0].partitions[0].error_code

    def forget(self, key: Key) -> None:
        self._pending.pop(key, None)
        self._version.pop(key, None)
        self._written.pop(key, None)
