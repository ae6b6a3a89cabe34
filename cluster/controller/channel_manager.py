"""The controller's connections to the brokers (Kafka's ControllerChannelManager).

    ControllerChannel.run             one NetworkClient, a nursery of per-broker senders
    ├── add_broker(id, host, port)    a queue and a sender task for a live broker
    ├── remove_broker(id)             its sender stops; what was queued for it is dropped
    └── RequestBatch                  what one controller decision sends: LeaderAndIsr per
                                      broker, UpdateMetadata to the brokers named,
                                      StopReplica; `send()` queues each broker's requests
                                      in that order: one request of each kind per broker,
                                      with all the partitions of the decision

A broker's requests go out one at a time, in the order the controller made them (Kafka's
RequestSendThread): the next LeaderAndIsr never overtakes the previous one. A request that
fails on a broken connection is sent again after a backoff until it is answered or the
broker is removed (it died: the controller will decide again for its partitions). A
broker that does not serve an API (UNSUPPORTED_VERSION) gets the next request instead,
with a warning once.

The queues are unbounded, as Kafka's are: the controller must never wait on a slow broker
to record a decision, and each queue is bounded in practice by the partitions it covers.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from trio_broker.protocol._generated.leader_and_isr_request import (
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrTopicState,
)
from trio_broker.protocol._generated.stop_replica_request import (
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaTopicState,
)
from trio_broker.protocol._generated.update_metadata_request import (
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicState,
)

if TYPE_CHECKING:
    from trio_broker.cluster.controller.context import ControllerContext

logger = logging.getLogger(__name__)

__all__ = [
    "UPDATE_METADATA_FULL",
    "UPDATE_METADATA_INCREMENTAL",
    "ControllerChannel",
    "RequestBatch",
]

# UpdateMetadata v8's `type` (KIP-866): FULL means every live topic is in the request, so
# a broker drops the topics it does not name; INCREMENTAL names only partitions that
# changed, and a broker keeps the others as they were.
UPDATE_METADATA_INCREMENTAL = 1
UPDATE_METADATA_FULL = 2

_RETRY_BACKOFF_S = 0.1


@attrs.define
class _Sender:
    broker_id: int
    send: trio.MemorySendChannel[Any]
    scope: trio.CancelScope


class ControllerChannel:
    """See the module docstring. `on_response(broker_id, request, response)` is called
    with every answer, and with None for a request the broker does not serve (the
    controller follows StopReplica answers for topic deletion)."""

    def __init__(
        self,
        controller_id: int,
        *,
        request_timeout_ms: int = 30000,
        on_response: Callable[[int, Any, Any], None] | None = None,
        broker_config: Any = None,
    ) -> None:
        self.controller_id = controller_id
        # The controller's BrokerConfig: its inter-broker listener's security (None: PLAINTEXT).
        self.broker_config = broker_config
        self.request_timeout_ms = request_timeout_ms
        self.on_response = on_response
        self._senders: dict[int, _Sender] = {}
        self._client: Any = None
        self._nursery: trio.Nursery | None = None
        self._unsupported: set[tuple[int, int]] = set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        from trio_broker.client.network_client import NetworkClient
        from trio_broker.security.inter_broker import inter_broker_client_config

        config = inter_broker_client_config(
            self.broker_config,
            bootstrap_servers="127.0.0.1:9",  # never used: requests go to node ids
            client_id=f"broker-{self.controller_id}-controller",
            request_timeout_ms=self.request_timeout_ms,
            max_in_flight_requests_per_connection=1,
        )
        async with NetworkClient(config) as client, trio.open_nursery() as nursery:
            self._client, self._nursery = client, nursery
            try:
                task_status.started()
                await trio.sleep_forever()
            finally:
                self._client = self._nursery = None
                nursery.cancel_scope.cancel()

    @property
    def brokers(self) -> frozenset[int]:
        return frozenset(self._senders)

    def add_broker(self, broker_id: int, host: str, port: int) -> None:
        assert self._client is not None and self._nursery is not None
        nodes = dict(self._client.nodes)
        nodes[broker_id] = (host, port)
        self._client.set_nodes(nodes)
        if broker_id in self._senders:
            return
        send, receive = trio.open_memory_channel[Any](math.inf)
        scope = trio.CancelScope()
        self._senders[broker_id] = _Sender(broker_id, send, scope)
        self._nursery.start_soon(self._send_loop, broker_id, receive, scope)

    def remove_broker(self, broker_id: int) -> None:
        """The broker's registration ended (it died, or its session expired and it may
        register again): its sender stops, what was queued for it is dropped, and its
        connection is closed. A new registration gets a new queue and a new connection,
        as Kafka's controller treats a bounced broker: nothing built for the old one
        reaches the new one, and nothing waits behind bytes stuck on the old connection
        (after a partition that dropped packets, TCP may retransmit them seconds later)."""
        sender = self._senders.pop(broker_id, None)
        if sender is not None:
            sender.scope.cancel()
            sender.send.close()
        if self._client is not None and broker_id in self._client.nodes:
            self._client.disconnect(broker_id)

    def enqueue(self, broker_id: int, request: Any) -> None:
        sender = self._senders.get(broker_id)
        if sender is None:
            logger.debug("no channel to broker %d: %s dropped", broker_id, type(request).__name__)
            return
        sender.send.send_nowait((request, trio.current_time()))

    async def _send_loop(
        self, broker_id: int, receive: trio.MemoryReceiveChannel[Any], scope: trio.CancelScope
    ) -> None:
        from trio_broker.client.errors import KafkaConnectionError
        from trio_broker.errors import ErrorCode, KafkaError

        with scope:
            async with receive:
                async for request, queued_at in receive:
                    api = type(request).API_KEY
                    sent_at = trio.current_time()
                    while True:
                        try:
                            response = await self._client.send(broker_id, request)
                        except KafkaError as exc:
                            if isinstance(exc, KafkaConnectionError) or exc.code not in (
                                ErrorCode.UNSUPPORTED_VERSION,
                            ):
                                logger.info(
                                    "controller request %s to broker %d failed (%s); retrying",
                                    type(request).__name__,
                                    broker_id,
                                    exc,
                                )
                                await trio.sleep(_RETRY_BACKOFF_S)
                                continue
                            if (broker_id, api) not in self._unsupported:
                                self._unsupported.add((broker_id, api))
                                logger.warning(
                                    "broker %d does not serve %s; not sent",
                                    broker_id,
                                    type(request).__name__,
                                )
                            if self.on_response is not None:
                                self.on_response(broker_id, request, None)
                            break
                        if self.on_response is not None:
                            self.on_response(broker_id, request, response)
                        _log_if_large(broker_id, request, queued_at, sent_at)
                        break


# A request naming this many partitions or more gets a line when answered: how long it
# waited in the broker's queue, and how long the broker took (a failover at scale).
_LARGE_REQUEST = 1000


def _log_if_large(broker_id: int, request: Any, queued_at: float, sent_at: float) -> None:
    if isinstance(request, LeaderAndIsrRequest):
        count = sum(len(t.partition_states) for t in request.topic_states)
    elif isinstance(request, UpdateMetadataRequest):
        count = sum(len(t.partition_states) for t in request.topic_states)
    else:
        return
    if count >= _LARGE_REQUEST:
        now = trio.current_time()
        logger.info(
            "%s of %d partitions to broker %d answered: %.2f s queued, %.2f s to answer",
            type(request).__name__,
            count,
            broker_id,
            sent_at - queued_at,
            now - sent_at,
        )


@attrs.define
class RequestBatch:
    """The requests of one controller decision (Kafka's ControllerBrokerRequestBatch)."""

    context: ControllerContext
    leader_and_isr: dict[int, dict[tuple[str, int], LeaderAndIsrPartitionState]] = attrs.Factory(
        dict
    )
    stop_replica: dict[int, dict[tuple[str, int], bool]] = attrs.Factory(dict)
    update_metadata_brokers: set[int] = attrs.Factory(set)
    # The partitions the UpdateMetadata names; None: all of them (a full update).
    update_metadata_partitions: set[tuple[str, int]] | None = attrs.Factory(set)

    def add_leader_and_isr(
        self, brokers: Iterable[int], topic: str, partition: int, *, is_new: bool = False
    ) -> None:
        """LeaderAndIsr for (topic, partition) at its current state, to the live ones of
        `brokers`; UpdateMetadata follows to every live broker on send."""
        ctx = self.context
        state = ctx.states.get((topic, partition))
        if state is None:
            return
        replicas = ctx.replicas(topic, partition)
        assignment = ctx.assignments[topic]
        entry = LeaderAndIsrPartitionState(
            topic_name=topic,
            partition_index=partition,
            controller_epoch=state.controller_epoch,
            leader=state.leader,
            leader_epoch=state.leader_epoch,
            isr=list(state.isr),
            partition_epoch=state.zk_version,
            replicas=list(replicas),
            adding_replicas=list(assignment.adding_replicas.get(partition, ())),
            removing_replicas=list(assignment.removing_replicas.get(partition, ())),
            is_new=is_new,
        )
        for broker_id in brokers:
            if broker_id in ctx.live_brokers:
                self.leader_and_isr.setdefault(broker_id, {})[(topic, partition)] = entry
        self.update_metadata_brokers.update(ctx.live_brokers)
        if self.update_metadata_partitions is not None:
            self.update_metadata_partitions.add((topic, partition))

    def add_stop_replica(self, brokers: Iterable[int], topic: str, partition: int, delete: bool):
        for broker_id in brokers:
            if broker_id in self.context.live_brokers:
                self.stop_replica.setdefault(broker_id, {})[(topic, partition)] = delete

    def add_update_metadata(
        self, brokers: Iterable[int], partitions: Iterable[tuple[str, int]] | None = None
    ) -> None:
        """UpdateMetadata to the live ones of `brokers`: of `partitions` only (incremental,
        as Kafka's controller tells brokers what changed), or of every partition (None: a
        full update, which also drops the topics a broker should no longer know). Either
        way it lists every live broker."""
        self.update_metadata_brokers.update(b for b in brokers if b in self.context.live_brokers)
        if partitions is None:
            self.update_metadata_partitions = None
        elif self.update_metadata_partitions is not None:
            self.update_metadata_partitions.update(partitions)

    def send(self, channel: ControllerChannel) -> None:
        """Queue each broker's requests: LeaderAndIsr, UpdateMetadata, StopReplica. Each
        carries the target broker's epoch (the czxid of its registration), as Kafka's do."""
        for broker_id, entries in self.leader_and_isr.items():
            request = self._leader_and_isr_request(entries)
            channel.enqueue(broker_id, self._to(broker_id, request))
        if self.update_metadata_brokers:
            request = self._update_metadata_request()
            for broker_id in sorted(self.update_metadata_brokers):
                channel.enqueue(broker_id, self._to(broker_id, request))
        for broker_id, entries in self.stop_replica.items():
            channel.enqueue(broker_id, self._to(broker_id, self._stop_replica_request(entries)))
        self.leader_and_isr, self.stop_replica = {}, {}
        self.update_metadata_brokers, self.update_metadata_partitions = set(), set()

    def _to(self, broker_id: int, request: Any) -> Any:
        node = self.context.live_brokers.get(broker_id)
        return request.replace(broker_epoch=node.epoch) if node is not None else request

    def _leader_and_isr_request(
        self, entries: dict[tuple[str, int], LeaderAndIsrPartitionState]
    ) -> LeaderAndIsrRequest:
        ctx = self.context
        by_topic: dict[str, list[LeaderAndIsrPartitionState]] = {}
        leaders: set[int] = set()
        for (topic, _), entry in sorted(entries.items()):
            by_topic.setdefault(topic, []).append(entry)
            if entry.leader >= 0:
                leaders.add(entry.leader)
        live_leaders = []
        for leader in sorted(leaders):
            node = ctx.live_brokers.get(leader)
            if node is not None:
                live_leaders.append(
                    LeaderAndIsrLiveLeader(broker_id=leader, host_name=node.host, port=node.port)
                )
        return LeaderAndIsrRequest(
            controller_id=ctx.controller_id,
            controller_epoch=ctx.epoch,
            ungrouped_partition_states=[e for t in sorted(by_topic) for e in by_topic[t]],
            topic_states=[
                LeaderAndIsrTopicState(
                    topic_name=topic, topic_id=ctx.topic_ids[topic], partition_states=states
                )
                for topic, states in sorted(by_topic.items())
            ],
            live_leaders=live_leaders,
        )

    def _update_metadata_request(self) -> UpdateMetadataRequest:
        ctx = self.context
        topic_states = []
        ungrouped = []
        named = self.update_metadata_partitions
        by_topic: dict[str, list[int]] = {}
        if named is None:
            for topic, assignment in ctx.assignments.items():
                by_topic[topic] = sorted(assignment.partitions)
        else:
            for topic, partition in named:
                if topic in ctx.assignments:
                    by_topic.setdefault(topic, []).append(partition)
        for topic in sorted(by_topic):
            states = []
            for partition in sorted(by_topic[topic]):
                state = ctx.states.get((topic, partition))
                if state is None:
                    continue  # no state znode yet: not described until it has one
                replicas = ctx.replicas(topic, partition)
                deleting = topic in ctx.topics_being_deleted
                states.append(
                    UpdateMetadataPartitionState(
                        topic_name=topic,
                        partition_index=partition,
                        controller_epoch=state.controller_epoch,
                        # Kafka's LeaderDuringDelete (-2): brokers drop the partition.
                        leader=-2 if deleting else state.leader,
                        leader_epoch=state.leader_epoch,
                        isr=list(state.isr),
                        zk_version=state.zk_version,
                        replicas=list(replicas),
                        offline_replicas=[
                            r
                            for r in replicas
                            if r not in ctx.live_brokers
                            or (topic, partition) in ctx.replicas_on_offline_dirs.get(r, ())
                        ],
                    )
                )
            if states:
                ungrouped += states
                topic_states.append(
                    UpdateMetadataTopicState(
                        topic_name=topic, topic_id=ctx.topic_ids[topic], partition_states=states
                    )
                )
        brokers = []
        for broker_id, node in sorted(ctx.live_brokers.items()):
            brokers.append(
                UpdateMetadataBroker(
                    id=broker_id,
                    v0_host=node.host,
                    v0_port=node.port,
                    endpoints=[
                        UpdateMetadataEndpoint(
                            port=e.port,
                            host=e.host,
                            listener=e.listener,
                            security_protocol=_SECURITY_PROTOCOLS.get(e.security_protocol, 0),
                        )
                        for e in node.endpoints
                    ],
                    rack=node.rack,
                )
            )
        return UpdateMetadataRequest(
            controller_id=ctx.controller_id,
            controller_epoch=ctx.epoch,
            type=UPDATE_METADATA_FULL if named is None else UPDATE_METADATA_INCREMENTAL,
            ungrouped_partition_states=ungrouped,
            topic_states=topic_states,
            live_brokers=brokers,
        )

    def _stop_replica_request(self, entries: dict[tuple[str, int], bool]) -> StopReplicaRequest:
        ctx = self.context
        by_topic: dict[str, list[StopReplicaPartitionState]] = {}
        for (topic, partition), delete in sorted(entries.items()):
            state = ctx.states.get((topic, partition))
            by_topic.setdefault(topic, []).append(
                StopReplicaPartitionState(
                    partition_index=partition,
                    # Kafka: -2 (EpochDuringDelete) when deleting, else the current epoch.
                    leader_epoch=-2 if delete else (state.leader_epoch if state else -1),
                    delete_partition=delete,
                )
            )
        return StopReplicaRequest(
            controller_id=ctx.controller_id,
            controller_epoch=ctx.epoch,
            delete_partitions=any(entries.values()),
            topic_states=[
                StopReplicaTopicState(topic_name=t, partition_states=s)
                for t, s in sorted(by_topic.items())
            ],
        )


# Kafka's SecurityProtocol ids.
_SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
