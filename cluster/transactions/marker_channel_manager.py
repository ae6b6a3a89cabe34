"""TransactionMarkerChannelManager: a cluster coordinator's markers to the partitions' leaders.

Once a transaction is prepared (PrepareCommit or PrepareAbort in `__transaction_state`),
one task per transaction completes it, as Kafka's TransactionMarkerChannelManager does:

    1. wait until the ISR of the state partition has the Prepare record (a marker must never
       go out for a decision a new coordinator could lose);
    2. group the partitions by their current leader in `broker.metadata`; markers for
       partitions led here go through the same path as a WriteTxnMarkers request (append
       as leader, then wait for the ISR); the others wait in one queue per destination
       broker, whose sender puts every queued transaction into one WriteTxnMarkers request
       through the coordinator's NetworkClient;
    3. partitions answered with a retriable error (NOT_LEADER_OR_FOLLOWER, not enough
       replicas, timeouts, a lost connection) are looked up again in the metadata (which
       the controller's UpdateMetadata keeps current) and sent again after a backoff; a
       partition whose topic is gone is done;
    4. when every partition's marker is acknowledged, the coordinator writes
       CompleteCommit or CompleteAbort.

A transaction's task stops when its coordinator no longer holds that prepared state (the
state partition moved away: the new leader finishes it from its log). Only a broker with
`zookeeper.connect` runs this module; a lone broker writes its markers inline.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import attrs
import trio

from trio_broker.cluster.transactions.markers import write_markers
from trio_broker.cluster.transactions.records import TRANSACTION_STATE_TOPIC
from trio_broker.cluster.transactions.transaction_metadata import TransactionState
from trio_broker.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from trio_broker.cluster.transactions.transaction_coordinator import TransactionCoordinator
    from trio_broker.cluster.transactions.transaction_metadata import TransactionMetadata

logger = logging.getLogger(__name__)

__all__ = ["TransactionMarkerChannelManager"]

TopicPartition = tuple[str, int]

RETRY_BACKOFF_S = 0.1
# Sent again after a metadata look-up (Kafka's TransactionMarkerRequestCompletionHandler).
RETRIABLE = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)


@attrs.define(eq=False)
class _MarkerSend:
    """One transaction's markers for the partitions one broker leads."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: list[TopicPartition]
    codes: dict[TopicPartition, ErrorCode] = attrs.Factory(dict)
    done: trio.Event = attrs.Factory(trio.Event)

    def finish(self, codes: dict[TopicPartition, ErrorCode]) -> None:
        self.codes = {tp: codes.get(tp, ErrorCode.NETWORK_EXCEPTION) for tp in self.partitions}
        self.done.set()


class TransactionMarkerChannelManager:
    def __init__(self, coordinator: TransactionCoordinator) -> None:
        self.coordinator = coordinator
        self.broker = coordinator.broker
        self.timeout_ms: int = self.broker.config.request_timeout_ms
        self._client: Any = None
        self._nursery: trio.Nursery | None = None
        self._queues: dict[int, trio.MemorySendChannel[_MarkerSend]] = {}
        self._in_flight: dict[str, trio.CancelScope] = {}
        self.markers_sent = 0  # WriteTxnMarkers requests

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        from trio_broker.client.network_client import NetworkClient
        from trio_broker.security.inter_broker import inter_broker_client_config

        # The inter-broker listener's security (TLS, SASL), as every broker-to-broker client.
        config = inter_broker_client_config(
            self.broker.config,
            bootstrap_servers="127.0.0.1:9",  # never used: requests go to node ids
            client_id=f"broker-{self.broker.node_id}-txn-markers",
            # The destination answers after its ISR has the markers (request.timeout.ms).
            request_timeout_ms=self.timeout_ms + 5000,
        )
        async with NetworkClient(config) as client, trio.open_nursery() as nursery:
            self._client, self._nursery = client, nursery
            try:
                task_status.started()
                await trio.sleep_forever()
            finally:
                self._client = self._nursery = None
                self._queues.clear()
                self._in_flight.clear()
                nursery.cancel_scope.cancel()

    async def send_to_broker(
        self, broker_id: int, request: Any, *, min_version: int | None = None
    ) -> Any:
        """Another of the coordinator side's requests to a broker (transaction verification,
        `txn_verification`) over this inter-broker client: the response, or None when
        none came in time. Raises KafkaError when the connection fails or the broker does
        not speak `min_version`."""
        client = self._client
        if client is None:
            return None
        client.set_nodes(
            {node_id: (b.host, b.port) for node_id, b in self.broker.metadata.brokers.items()}
        )
        # A frozen broker accepts the connection and never answers (as for markers).
        with trio.move_on_after(2 * self.timeout_ms / 1000 + 5):
            version = await client.api_version(broker_id, request.API_KEY)
            if min_version is not None and version < min_version:
                raise KafkaError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"broker {broker_id} speaks {request.__class__.__name__} v{version}",
                )
            return await client.send(broker_id, request, version)
        return None

    # -- transactions ----------------------------------------------------------------------

    def submit(self, meta: TransactionMetadata) -> bool:
        """Complete the prepared transaction `meta` in the background (once per id)."""
        if self._nursery is None or meta.transactional_id in self._in_flight:
            logger.debug(
                "markers of %s (%s) not submitted: %s",
                meta.transactional_id,
                meta.state.kafka_name,
                "not running" if self._nursery is None else "already in flight",
            )
            return False
        logger.debug(
            "markers of %s (%s) submitted for %s",
            meta.transactional_id,
            meta.state.kafka_name,
            sorted(meta.partitions),
        )
        scope = trio.CancelScope()
        self._in_flight[meta.transactional_id] = scope
        self._nursery.start_soon(self._complete, meta, scope)
        return True

    def forget_partition(self, partition: int) -> None:
        """The state partition moved away: its transactions are the new leader's."""
        store = self.coordinator.store
        for txn_id, scope in list(self._in_flight.items()):
            if store.partition_for(txn_id) == partition:
                scope.cancel()
                del self._in_flight[txn_id]

    def _current(self, meta: TransactionMetadata) -> bool:
        coordinator = self.coordinator
        return (
            coordinator.txns.get(meta.transactional_id) is meta
            and coordinator.store.partition_for(meta.transactional_id) in coordinator.store.loaded
        )

    async def _complete(self, meta: TransactionMetadata, scope: trio.CancelScope) -> None:
        txn_id = meta.transactional_id
        completed = False
        try:
            with scope:
                if await self._prepare_replicated(meta) and await self._send_all(meta):
                    self.coordinator.markers_written(meta)
                    completed = True
        except Exception:
            logger.exception("completing the transaction of %s failed", txn_id)
        else:
            logger.debug("markers of %s: completed %s", txn_id, completed)
            if not completed:
                logger.info("transaction of %s not completed here (moved on or away)", txn_id)
        finally:
            if self._in_flight.get(txn_id) is scope:
                del self._in_flight[txn_id]

    async def _prepare_replicated(self, meta: TransactionMetadata) -> bool:
        from trio_broker.cluster.replication.isr_wait import replicated

        tp = (TRANSACTION_STATE_TOPIC, self.coordinator.store.partition_for(meta.transactional_id))
        while self._current(meta):
            code = ErrorCode.REQUEST_TIMED_OUT
            with trio.move_on_after(self.timeout_ms / 1000 + 5):
                code = (await replicated(self.broker, [tp], self.timeout_ms))[tp]
            if code == ErrorCode.NONE:
                return True
            if code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                return False
            logger.info(
                "%s of %s not yet replicated (%s); waiting",
                meta.state.kafka_name,
                meta.transactional_id,
                code.name,
            )
            await trio.sleep(RETRY_BACKOFF_S)
        return False

    async def _send_all(self, meta: TransactionMetadata) -> bool:
        """Markers to every partition until each is acknowledged; False if `meta` stopped
        being this coordinator's to complete."""
        pending = set(meta.partitions)
        coordinator_epoch = self.coordinator.store.leader_epoch(
            self.coordinator.store.partition_for(meta.transactional_id)
        )
        commit = meta.state == TransactionState.PREPARE_COMMIT
        rounds = 0
        while pending:
            if not self._current(meta):
                return False
            if rounds:
                await trio.sleep(RETRY_BACKOFF_S)
            rounds += 1
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(pending):
                leader = self._leader(tp)
                if leader is None:
                    logger.info("%s-%d is gone: no marker needed", tp[0], tp[1])
                    pending.discard(tp)
                elif leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            if rounds % 50 == 2:
                logger.info(
                    "markers of %s still pending for %s (leaders %s)",
                    meta.transactional_id,
                    sorted(pending),
                    {tp: self._leader(tp) for tp in sorted(pending)},
                )
            sends = [
                _MarkerSend(meta.producer_id, meta.producer_epoch, coordinator_epoch, commit, tps)
                for tps in by_leader.values()
            ]
            # Each send ends by its own timeouts; this bound only guards against a wait
            # that never ends (the partitions are then tried again).
            with trio.move_on_after(3 * self.timeout_ms / 1000 + 10) as round_scope:
                async with trio.open_nursery() as nursery:
                    for leader, send in zip(by_leader, sends, strict=True):
                        if leader == self.broker.node_id:
                            nursery.start_soon(self._write_local, send)
                        else:
                            self._enqueue(leader, send)
                            nursery.start_soon(send.done.wait)
            if round_scope.cancelled_caught:
                logger.warning(
                    "markers of %s: round %d unanswered in time (%s)",
                    meta.transactional_id,
                    rounds,
                    {
                        leader: send.done.is_set()
                        for leader, send in zip(by_leader, sends, strict=True)
                    },
                )
            logger.debug(
                "markers of %s, round %d: %s",
                meta.transactional_id,
                rounds,
                {leader: send.codes for leader, send in zip(by_leader, sends, strict=True)},
            )
            for send in sends:
                for tp, code in send.codes.items():
                    if code == ErrorCode.NONE:
                        pending.discard(tp)
                    elif code in RETRIABLE:
                        if rounds % 50 == 1:
                            logger.info(
                                "marker of %s for %s-%d: %s; retrying",
                                meta.transactional_id,
                                tp[0],
                                tp[1],
                                code.name,
                            )
                    else:
                        # A producer or coordinator epoch moved on, or a broker refusing
                        # for good: a retry would not change it (Kafka gives up too).
                        logger.warning(
                            "marker of %s for %s-%d refused: %s",
                            meta.transactional_id,
                            tp[0],
                            tp[1],
                            code.name,
                        )
                        pending.discard(tp)
        return self._current(meta)

    def _leader(self, tp: TopicPartition) -> int | None:
        """The partition's leader as the metadata says, -1 while unknown, None if gone."""
        topic = self.broker.metadata.topics.get(tp[0])
        state = topic.partitions.get(tp[1]) if topic is not None else None
        if state is None:
            return None
        if state.leader != self.broker.node_id and state.leader not in self.broker.metadata.brokers:
            return -1
        return state.leader

    async def _write_local(self, send: _MarkerSend) -> None:
        """Markers for partitions led here: append as leader, then wait for the ISR."""
        from trio_broker.cluster.replication.isr_wait import replicated

        codes = write_markers(
            self.broker,
            send.partitions,
            producer_id=send.producer_id,
            producer_epoch=send.producer_epoch,
            coordinator_epoch=send.coordinator_epoch,
            commit=send.commit,
        )
        appended = [tp for tp, code in codes.items() if code == ErrorCode.NONE]
        if appended:
            codes.update(await replicated(self.broker, appended, self.timeout_ms))
        send.finish(codes)

    # -- one queue per destination broker ------------------------------------------------------

    def _enqueue(self, broker_id: int, send: _MarkerSend) -> None:
        queue = self._queues.get(broker_id)
        if queue is None:
            assert self._nursery is not None
            queue, receive = trio.open_memory_channel[_MarkerSend](math.inf)
            self._queues[broker_id] = queue
            self._nursery.start_soon(self._sender, broker_id, receive)
        queue.send_nowait(send)

    async def _sender(
        self, broker_id: int, receive: trio.MemoryReceiveChannel[_MarkerSend]
    ) -> None:
        async for first in receive:
            batch = [first]
            deferred: list[_MarkerSend] = []
            producers = {first.producer_id}
            while True:
                try:
                    more = receive.receive_nowait()
                except trio.WouldBlock:
                    break
                if more.producer_id in producers:
                    deferred.append(more)  # one marker per producer in a request
                else:
                    producers.add(more.producer_id)
                    batch.append(more)
            try:
                await self._send_batch(broker_id, batch)
            except Exception:
                # A bug must not take the coordinator down: the partitions are retried.
                logger.exception("WriteTxnMarkers to broker %d failed", broker_id)
            for send in batch:
                if not send.done.is_set():
                    send.finish({})
            for send in deferred:
                self._queues[broker_id].send_nowait(send)

    async def _send_batch(self, broker_id: int, batch: list[_MarkerSend]) -> None:
        from trio_broker.protocol._generated.write_txn_markers_request import (
            WritableTxnMarker,
            WritableTxnMarkerTopic,
            WriteTxnMarkersRequest,
        )

        markers = []
        for send in batch:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in send.partitions:
                by_topic.setdefault(topic, []).append(partition)
            markers.append(
                WritableTxnMarker(
                    producer_id=send.producer_id,
                    producer_epoch=send.producer_epoch,
                    transaction_result=send.commit,
                    topics=[
                        WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                        for t, ps in by_topic.items()
                    ],
                    coordinator_epoch=send.coordinator_epoch,
                )
            )
        results: dict[int, dict[TopicPartition, ErrorCode]] = {}
        self._client.set_nodes(
            {node_id: (b.host, b.port) for node_id, b in self.broker.metadata.brokers.items()}
        )
        response = None
        # A frozen broker accepts the connection (the kernel does) and never answers: the
        # client's own timeouts are not trusted to cover the connection's set-up as well.
        with trio.move_on_after(2 * self.timeout_ms / 1000 + 5) as scope:
            try:
                self.markers_sent += 1
                response = await self._client.send(
                    broker_id, WriteTxnMarkersRequest(markers=markers)
                )
            except KafkaError as exc:
                logger.info("WriteTxnMarkers to broker %d failed: %s", broker_id, exc)
        if scope.cancelled_caught:
            logger.info("WriteTxnMarkers to broker %d: no answer in time", broker_id)
        if response is not None:
            for result in response.markers:
                codes = results.setdefault(result.producer_id, {})
                for topic in result.topics:
                    for p in topic.partitions:
                        codes[(topic.name, p.partition_index)] = ErrorCode(p.error_code)
        for send in batch:
            send.finish(results.get(send.producer_id, {}))
