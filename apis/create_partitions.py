"""CreatePartitions (key 37): raise a topic's partition count, optionally validate only."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from trio_broker.apis.create_topics import over_partition_bound
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.create_partitions_response import (
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.protocol._generated.create_partitions_request import CreatePartitionsTopic
    from trio_broker.server.requests import Request


def _check_assignments(broker: Broker, topic: CreatePartitionsTopic, current: int) -> None:
    if topic.assignments is None:
        return
    added = topic.count - current
    if len(topic.assignments) != added:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Attempted to add {added} additional partition(s), but only "
            f"{len(topic.assignments)} assignment(s) were specified.",
        )
    # Every partition of a topic keeps the topic's replication factor.
    factor = len(next(iter(broker.metadata.topics[topic.name].partitions.values())).replicas)
    for a in topic.assignments:
        if len(a.broker_ids) != factor or len(set(a.broker_ids)) != len(a.broker_ids):
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment {a.broker_ids} does not have the topic's "
                f"replication factor {factor}, or names a broker twice.",
            )
        for node in a.broker_ids:
            if node not in broker.metadata.brokers:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {node}, but no such "
                    "broker is registered.",
                )


async def _create(
    broker: Broker, topic: CreatePartitionsTopic, validate_only: bool, timeout_ms: int
) -> None:
    zk_topics = broker.topics.zk_topics
    if zk_topics is not None:
        # A cluster: the topic znode gets the new partitions' replicas; the controller
        # makes them (cluster/zk_topics.py). The answer waits for their leaders.
        current = broker.metadata.topics.get(topic.name)
        if current is not None:
            _check_assignments(broker, topic, len(current.partitions))
        await zk_topics.create_partitions(
            topic.name,
            topic.count,
            None if topic.assignments is None else [a.broker_ids for a in topic.assignments],
            validate_only=validate_only,
            timeout_ms=timeout_ms,
        )
        return
    state = broker.topics.check_create_partitions(topic.name, topic.count)
    _check_assignments(broker, topic, len(state.partitions))
    if not validate_only:
        broker.topics.create_partitions(topic.name, topic.count)


def _partitions_added(broker: Broker, topics: list[CreatePartitionsTopic]) -> int:
    total = 0
    for topic in topics:
        current = broker.metadata.topics.get(topic.name)
        total += max(0, topic.count - (len(current.partitions) if current is not None else 0))
    return total


async def handle(broker: Broker, request: Request) -> CreatePartitionsResponse:
    body = request.body
    message = over_partition_bound(_partitions_added(broker, body.topics))
    if message is not None:
        return CreatePartitionsResponse(
            results=[
                CreatePartitionsTopicResult(
                    name=t.name, error_code=ErrorCode.POLICY_VIOLATION, error_message=message
                )
                for t in body.topics
            ]
        )
    counts = Counter(t.name for t in body.topics)
    results: list[CreatePartitionsTopicResult] = []
    seen: set[str] = set()
    for topic in body.topics:
        if topic.name in seen:
            continue
        seen.add(topic.name)
        try:
            if counts[topic.name] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
            await _create(broker, topic, body.validate_only, body.timeout_ms)
        except KafkaError as exc:
            results.append(
                CreatePartitionsTopicResult(
                    name=topic.name, error_code=exc.code, error_message=exc.message or exc.code.name
                )
            )
            continue
        results.append(
            CreatePartitionsTopicResult(
                name=topic.name, error_code=ErrorCode.NONE, error_message=None
            )
        )
    return CreatePartitionsResponse(results=results)
