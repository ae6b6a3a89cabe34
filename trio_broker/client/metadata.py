"""The cluster metadata cache (Kafka's Metadata + DefaultMetadataUpdater).

    metadata = ClusterMetadata(client, max_age_ms=300_000)
    client.nursery.start_soon(metadata.run)
    topic = await metadata.wait_for_topic("events", timeout_s=60)   # partitions and leaders

`Cluster` is an immutable snapshot; a refresh replaces it. A refresh is requested by
`request_update()` (the producer calls it on NOT_LEADER_OR_FOLLOWER and
UNKNOWN_TOPIC_OR_PARTITION; a closed connection calls it too) and happens anyway every
`metadata.max.age.ms`. Refreshes ask for the topics in use, not the whole cluster, from
the least loaded broker, and never more often than every `retry.backoff.ms`.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Iterable, Mapping

import attrs
import trio

from trio_broker.client.errors import (
    AuthenticationError,
    KafkaConnectionError,
    RequestTimedOutError,
    error_for,
)
from trio_broker.client.network_client import NetworkClient
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.find_coordinator_request import FindCoordinatorRequest
from trio_broker.protocol._generated.metadata_request import MetadataRequest, MetadataRequestTopic

__all__ = ["Cluster", "ClusterMetadata", "PartitionMetadata", "TopicMetadata"]

log = logging.getLogger(__name__)

# Topic errors that a later refresh may clear (the topic is being created, a leader elected).
_TRANSIENT = frozenset(
    {
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REPLICA_NOT_AVAILABLE,
    }
)

# Produce/fetch errors after which the cached leaders are stale (Kafka's InvalidMetadataException).
STALE_METADATA_ERRORS = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.UNKNOWN_TOPIC_ID,
    }
)


@attrs.frozen(kw_only=True)
class PartitionMetadata:
    partition: int
    leader: int  # node id, -1 when none
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    error_code: int = 0


@attrs.frozen(kw_only=True)
class TopicMetadata:
    name: str
    error_code: int = 0
    partitions: tuple[PartitionMetadata, ...] = ()
    is_internal: bool = False
    topic_id: uuid.UUID | None = None  # from Metadata v10 on

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


@attrs.frozen(kw_only=True)
class Cluster:
    brokers: Mapping[int, tuple[str, int]] = attrs.field(factory=dict)
    topics: Mapping[str, TopicMetadata] = attrs.field(factory=dict)
    controller_id: int = -1
    cluster_id: str | None = None

    def leader_for(self, topic: str, partition: int) -> int | None:
        meta = self.topics.get(topic)
        if meta is None or not 0 <= partition < len(meta.partitions):
            return None
        leader = meta.partitions[partition].leader
        return leader if leader >= 0 and leader in self.brokers else None

    def topic_named_by_id(self, topic_id: uuid.UUID) -> str | None:
        for meta in self.topics.values():
            if meta.topic_id == topic_id:
                return meta.name
        return None


class ClusterMetadata:
    """A cache of the cluster's brokers and the leaders of the topics in use."""

    def __init__(
        self,
        client: NetworkClient,
        *,
        max_age_ms: int | None = None,
        allow_auto_topic_creation: bool = False,
    ) -> None:
        self.client = client
        self.cluster = Cluster()
        self.max_age_s = (max_age_ms or client.config.metadata_max_age_ms) / 1000
        self.backoff_s = client.config.retry_backoff_ms / 1000
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.topics: set[str] = set()
        self.last_refresh = -math.inf
        self.last_error: BaseException | None = None
        self._update_requested = trio.Event()
        self._updated = trio.Event()
        self._version = 0
        client.add_disconnect_listener(lambda _address: self.request_update())

    @property
    def version(self) -> int:
        """Counts refreshes, so a waiter can tell a new snapshot from the one it saw."""
        return self._version

    def request_update(self) -> None:
        self._update_requested.set()

    def add_topics(self, topics: Iterable[str]) -> None:
        new = set(topics) - self.topics
        if new:
            self.topics |= new
            self.request_update()

    async def run(self) -> None:
        """Refresh when asked and every metadata.max.age.ms; runs until cancelled."""
        while True:
            with trio.move_on_at(self.last_refresh + self.max_age_s):
                await self._update_requested.wait()
            await trio.sleep_until(self.last_refresh + self.backoff_s)
            self._update_requested = trio.Event()
            try:
                await self.refresh()
            except (KafkaConnectionError, RequestTimedOutError, KafkaError) as exc:
                log.info("metadata refresh failed: %s", exc)
                self.last_error = exc
                self.last_refresh = trio.current_time()
                self._update_requested.set()  # try again after the backoff
                if isinstance(exc, AuthenticationError):
                    # Not retriable: whoever waits for metadata gets it now (as Kafka's).
                    self._updated.set()
                    self._updated = trio.Event()

    async def refresh(self, topics: Iterable[str] | None = None) -> Cluster:
        """Fetch metadata now, for `topics` (default: those in use) and the brokers."""
        names = sorted(self.topics if topics is None else set(topics) | self.topics)
        node = self.client.least_loaded_node()
        try:
            version = await self.client.api_version(node, MetadataRequest.API_KEY)
            request = MetadataRequest(
                topics=[MetadataRequestTopic(name=name) for name in names],
                allow_auto_topic_creation=self.allow_auto_topic_creation,
            )
            response = await self.client.send(node, request, version)
        finally:
            self.last_refresh = trio.current_time()
        brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        self.client.set_nodes(brokers)
        found = {}
        for topic in response.topics:
            partitions = sorted(
                (
                    PartitionMetadata(
                        partition=p.partition_index,
                        leader=p.leader_id,
                        leader_epoch=p.leader_epoch,
                        replicas=tuple(p.replica_nodes),
                        isr=tuple(p.isr_nodes),
                        error_code=p.error_code,
                    )
                    for p in topic.partitions
                ),
                key=lambda p: p.partition,
            )
            found[topic.name] = TopicMetadata(
                name=topic.name,
                error_code=topic.error_code,
                partitions=tuple(partitions),
                is_internal=topic.is_internal,
                topic_id=topic.topic_id if topic.topic_id.int else None,
            )
        # Topics missing from this answer keep their last known state.
        merged = dict(self.cluster.topics)
        merged.update(found)
        self.cluster = Cluster(
            brokers=brokers,
            topics=merged,
            controller_id=response.controller_id,
            cluster_id=response.cluster_id,
        )
        self.last_error = None
        self._version += 1
        self._updated.set()
        self._updated = trio.Event()
        return self.cluster

    async def wait_for_update(self) -> None:
        """Return after the next refresh."""
        self.request_update()
        await self._updated.wait()

    async def wait_for_topic(self, topic: str, timeout_s: float) -> TopicMetadata:
        """The topic's metadata with every partition's leader known, refreshing as needed.

        Raises the topic's error when it is not transient (say TOPIC_AUTHORIZATION_FAILED),
        or KafkaTimeoutError-like UNKNOWN_TOPIC_OR_PARTITION after `timeout_s`.
        """
        self.add_topics([topic])
        with trio.move_on_after(timeout_s):
            while True:
                if isinstance(self.last_error, AuthenticationError):
                    raise self.last_error
                meta = self.cluster.topics.get(topic)
                if meta is not None:
                    if meta.error_code and meta.error_code not in _TRANSIENT:
                        raise error_for(meta.error_code, f"topic {topic!r}")
                    if not meta.error_code and meta.partitions:
                        return meta
                await self.wait_for_update()
        meta = self.cluster.topics.get(topic)
        code = meta.error_code if meta and meta.error_code else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        raise error_for(
            code, f"topic {topic!r} not present in metadata after {timeout_s * 1000:.0f} ms"
        )


async def find_group_coordinator(
    client: NetworkClient, node: int | str, group_id: str
) -> tuple[int, str, int]:
    """FindCoordinator for a group, asked of `node`: (error code, host, port). From v4 the
    answer is a list by key: ours, or the only entry (a broker that does not echo keys);
    an empty list is COORDINATOR_NOT_AVAILABLE (retriable), as a batched lookup leaves a
    key it was not told about to the next try."""
    version = await client.api_version(node, FindCoordinatorRequest.API_KEY)
    if version < 4:
        request = FindCoordinatorRequest(key=group_id, key_type=0)
        response = await client.send(node, request, version)
        return response.error_code, response.host, response.port
    request = FindCoordinatorRequest(key_type=0, coordinator_keys=[group_id])
    response = await client.send(node, request, version)
    coordinators = response.coordinators or []
    for found in coordinators:
        if found.key == group_id or len(coordinators) == 1:
            return found.error_code, found.host, found.port
    return ErrorCode.COORDINATOR_NOT_AVAILABLE, "", -1
