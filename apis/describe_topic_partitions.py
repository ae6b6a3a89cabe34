"""DescribeTopicPartitions (key 75, KIP-966): topics' partitions with leaders, leader
epochs, replicas, ISR and offline replicas, paged by a cursor, as Kafka's admin client's
describeTopics asks from 3.7 on. The same cache Metadata answers from (in a cluster, the
controller's UpdateMetadata); eligible leader replicas (KIP-966's ELR) are not kept, so
they are reported null, as by a Kafka broker without ELR.

Topics are answered in name order; an empty list means every topic. At most
`response_partition_limit` partitions are described; `next_cursor` names where the next
request should start (Kafka's paging).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.describe_topic_partitions_response import (
    Cursor,
    DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponsePartition,
    DescribeTopicPartitionsResponseTopic,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> DescribeTopicPartitionsResponse:
    from trio_broker.apis.metadata import _partition

    body = request.body
    meta = broker.metadata
    names = sorted({t.name for t in body.topics}) if body.topics else sorted(meta.topics)
    cursor = body.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    budget = max(body.response_partition_limit, 1)
    topics: list[DescribeTopicPartitionsResponseTopic] = []
    next_cursor = None
    for name in names:
        topic = meta.topics.get(name)
        if topic is None:
            topics.append(
                DescribeTopicPartitionsResponseTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name
                )
            )
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        indexes = [p for p in sorted(topic.partitions) if p >= start]
        if budget <= 0:
            next_cursor = Cursor(topic_name=name, partition_index=start)
            break
        described = []
        for index in indexes:
            if budget <= 0:
                next_cursor = Cursor(topic_name=name, partition_index=index)
                break
            m = _partition(broker, name, topic.partitions[index])
            described.append(
                DescribeTopicPartitionsResponsePartition(
                    error_code=m.error_code,
                    partition_index=m.partition_index,
                    leader_id=m.leader_id,
                    leader_epoch=m.leader_epoch,
                    replica_nodes=m.replica_nodes,
                    isr_nodes=m.isr_nodes,
                    eligible_leader_replicas=None,
                    last_known_elr=None,
                    offline_replicas=m.offline_replicas,
                )
            )
            budget -= 1
        topics.append(
            DescribeTopicPartitionsResponseTopic(
                error_code=ErrorCode.NONE,
                name=name,
                topic_id=topic.topic_id,
                is_internal=topic.internal,
                partitions=described,
            )
        )
        if next_cursor is not None:
            break
    return DescribeTopicPartitionsResponse(topics=topics, next_cursor=next_cursor)
