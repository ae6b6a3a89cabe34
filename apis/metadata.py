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


def _partition(broker: Broker, topic: str, p: PartitionState) -> MetadataResponsePartition:
    # A log not loaded yet (log/log_loading.py) is not loaded for this: a Metadata of every
    # topic would load them all on the event loop. Only a failed log dir has offline logs:
    # without one, no log is looked up (20,000 lookups were a tenth of a Metadata of all).
    logs = broker.log_manager
    log = logs.loaded_log(topic, p.partition) if logs.offline_dirs else None
    if log is not None and log.offline and p.leader == broker.node_id:
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
    if broker.metadata.zk_mode and p.leader not in broker.metadata.brokers:
        # No leader (offline), or one this broker does not know alive yet: clients retry.
        return MetadataResponsePartition(
            error_code=ErrorCode.LEADER_NOT_AVAILABLE,
            partition_index=p.partition,
            leader_id=-1,
            leader_epoch=p.leader_epoch,
            replica_nodes=list(p.replicas),
            isr_nodes=list(p.isr),
            offline_replicas=list(p.offline_replicas),
        )
    return MetadataResponsePartition(
        error_code=ErrorCode.NONE,
        partition_index=p.partition,
        leader_id=p.leader,
        leader_epoch=p.leader_epoch,
        replica_nodes=list(p.replicas),
        isr_nodes=list(p.isr),
        offline_replicas=list(p.offline_replicas),
    )


def _topic(broker: Broker, topic: TopicState) -> MetadataResponseTopic:
    return MetadataResponseTopic(
        error_code=ErrorCode.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=[
            _partition(broker, topic.name, p)
            for p in sorted(topic.partitions.values(), key=lambda p: p.partition)
        ],
    )


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
