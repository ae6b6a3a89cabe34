"""Metadata (key 3): brokers, controller, cluster id, and the topics asked for.

In a cluster everything comes from this broker's cache, which the controller's
UpdateMetadata fills: leaders, leader epochs, replicas, ISR and offline replicas of every
partition, whichever broker hosts it. A topic created by auto-creation answers
LEADER_NOT_AVAILABLE until the controller has elected its leaders, as Kafka's does. On a
lone broker the Metadata that auto-creates a topic answers LEADER_NOT_AVAILABLE without
partitions too, as Kafka 3.9's always does; the next one lists them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

from trio_broker.apis.endpoints import node_on_listener
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.cluster.metadata import PartitionState, TopicState
    from trio_broker.server.requests import Request

_NO_TOPIC_ID = uuid.UUID(int=0)


def _offline_here(broker: Broker, p: PartitionState) -> MetadataResponsePartition:
    # Its log dir failed: this replica is offline and, being the only one, there is no
    # leader (what Kafka's controller reports once the broker told it of the failure).
    return MetadataResponsePartition(
        error_code=ErrorCode.LEADER_NOT_AVAILABLE,
        partition_index=p.partition,
        leader_id=-1,
        leader_epoch=p.leader_epoch,
        replica_nodes=list(p.replicas),
        isr_nodes=[r for r in p.isr if r != broker.node_id],
        offline_replicas=[broker.node_id],
    )


def _partition(broker: Broker, topic: str, p: PartitionState) -> MetadataResponsePartition:
    """One partition as Metadata describes it (DescribeTopicPartitions too)."""
    return _partitions(broker, topic, (p,))[0]


def _partitions(
    broker: Broker, name: str, states: Iterable[PartitionState]
) -> list[MetadataResponsePartition]:
    # Per partition this is the hot part of a Metadata of every topic (20,000 partitions
    # on one broker): what does not change between partitions is looked up once.
    logs = broker.log_manager
    # A log not loaded yet (log/log_loading.py) is not loaded for this: a Metadata of every
    # topic would load them all on the event loop. Only a failed log dir has offline logs:
    # without one, no log is looked up (20,000 lookups were a tenth of a Metadata of all).
    offline_dirs = bool(logs.offline_dirs)
    node_id = broker.node_id
    meta = broker.metadata
    live = meta.brokers if meta.zk_mode else None
    none = ErrorCode.NONE
    partitions = []
    for p in states:
        if offline_dirs and p.leader == node_id:
            log = logs.loaded_log(name, p.partition)
            if log is not None and log.offline:
                partitions.append(_offline_here(broker, p))
                continue
        # No leader (offline), or one this broker does not know alive yet: clients retry.
        unled = live is not None and p.leader not in live
        partitions.append(
            MetadataResponsePartition(
                error_code=ErrorCode.LEADER_NOT_AVAILABLE if unled else none,
                partition_index=p.partition,
                leader_id=-1 if unled else p.leader,
                leader_epoch=p.leader_epoch,
                replica_nodes=list(p.replicas),
                isr_nodes=list(p.isr),
                offline_replicas=list(p.offline_replicas),
            )
        )
    return partitions


def _topic(broker: Broker, topic: TopicState) -> MetadataResponseTopic:
    return MetadataResponseTopic(
        error_code=ErrorCode.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=_partitions(
            broker, topic.name, sorted(topic.partitions.values(), key=_by_index)
        ),
    )


def _by_index(p: PartitionState) -> int:
    return p.partition


async def handle(broker: Broker, request: Request) -> MetadataResponse:
    body = request.body
    meta = broker.metadata
    topics: list[MetadataResponseTopic] = []
    # v0: an empty list means all topics; v1+: null means all, empty means none.
    if body.topics is None or (request.api_version == 0 and not body.topics):
        topics = [_topic(broker, t) for t in sorted(meta.topics.values(), key=lambda t: t.name)]
    elif request.api_version < 12 and any(
        t.name is None or t.topic_id != _NO_TOPIC_ID for t in body.topics
    ):
        # v10 and v11 carry topic ids but cannot look topics up by them, and their answer
        # cannot carry a null name: the whole request is INVALID_REQUEST, as in Kafka.
        topics = [
            MetadataResponseTopic(
                error_code=ErrorCode.INVALID_REQUEST, name=t.name or "", topic_id=t.topic_id
            )
            for t in body.topics
        ]
    else:
        allow_create = request.api_version < 4 or body.allow_auto_topic_creation
        for wanted in body.topics:
            name = wanted.name
            topic = None
            if name is None:
                topic = meta.topic_by_id(wanted.topic_id)
                if topic is None:
                    topics.append(
                        MetadataResponseTopic(
                            error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                            name=None,
                            topic_id=wanted.topic_id,
                        )
                    )
                    continue
            else:
                topic = meta.topics.get(name)
                if topic is None and allow_create:
                    topic, error = await broker.auto_create_topic(name)
                    if topic is None:
                        topics.append(MetadataResponseTopic(error_code=error, name=name))
                        continue
            if topic is None:
                topics.append(
                    MetadataResponseTopic(
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name
                    )
                )
            else:
                topics.append(_topic(broker, topic))
    listener = request.connection.listener
    brokers = [
        MetadataResponseBroker(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
        for b in (
            node_on_listener(broker, n, listener)
            for n in sorted(meta.brokers.values(), key=lambda b: b.node_id)
        )
    ]
    return MetadataResponse(
        brokers=brokers,
        cluster_id=meta.cluster_id,
        controller_id=meta.controller_id,
        topics=topics,
    )
