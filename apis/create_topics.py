"""CreateTopics (key 19): validate_only, configs, partitions and replication factor.

As Kafka's controller does: names seen twice in one request are all refused with
INVALID_REQUEST, every other topic succeeds or fails on its own, and from v5 the answer
carries the new topic's partition count, replication factor and configs with sources.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from typing import TYPE_CHECKING

from trio_broker.apis.config_entries import topic_entries
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.create_topics_response import (
    CreatableTopicConfigs,
    CreatableTopicResult,
    CreateTopicsResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.protocol._generated.create_topics_request import CreatableTopic
    from trio_broker.server.requests import Request

logger = logging.getLogger(__name__)

_NO_TOPIC_ID = uuid.UUID(int=0)


def _manual_assignment(broker: Broker, topic: CreatableTopic) -> tuple[int, int]:
    """(partitions, replication factor) from an explicit replica assignment."""
    if topic.num_partitions != -1 or topic.replication_factor != -1:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            "Both numPartitions or replicationFactor and replicasAssignments were set. "
            "Both cannot be used at the same time.",
        )
    indexes = sorted(a.partition_index for a in topic.assignments)
    if indexes != list(range(len(indexes))):
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "partitions should be a consecutive 0-based integer sequence",
        )
    factors = {len(a.broker_ids) for a in topic.assignments}
    if len(factors) != 1 or 0 in factors:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "All partitions must have the same, non-zero number of replicas.",
        )
    for a in topic.assignments:
        if len(set(a.broker_ids)) != len(a.broker_ids):
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker {a.broker_ids} "
                "more than once.",
            )
        for node in a.broker_ids:
            if node not in broker.metadata.brokers:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {node}, but no such "
                    "broker is registered.",
                )
    return len(indexes), factors.pop()


def _configs(broker: Broker, overrides: dict[str, str]) -> list[CreatableTopicConfigs]:
    return [
        CreatableTopicConfigs(
            name=e.name,
            value=e.value,
            read_only=e.read_only,
            config_source=int(e.source),
            is_sensitive=e.sensitive,
        )
        for e in topic_entries(broker.config, overrides)
    ]


def _create(broker: Broker, topic: CreatableTopic, validate_only: bool) -> CreatableTopicResult:
    name = topic.name
    configs: dict[str, str | None] = {}
    for c in topic.configs:
        if c.name in configs:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Duplicate config key: {c.name}")
        configs[c.name] = c.value
    if topic.assignments:
        partitions, replication = _manual_assignment(broker, topic)
    else:
        partitions, replication = topic.num_partitions, topic.replication_factor
    partitions, replication = broker.topics.check_new_topic(name, partitions, replication, configs)
    overrides = {k: v for k, v in configs.items() if v is not None}
    topic_id = _NO_TOPIC_ID
    if not validate_only:
        topic_id = broker.topics.create_topic(name, partitions, replication, overrides).topic_id
    return CreatableTopicResult(
        name=name,
        topic_id=topic_id,
        error_code=ErrorCode.NONE,
        error_message=None,
        num_partitions=partitions,
        replication_factor=replication,
        configs=_configs(broker, overrides),
    )


async def handle(broker: Broker, request: Request) -> CreateTopicsResponse:
    body = request.body
    counts = Counter(t.name for t in body.topics)
    results: list[CreatableTopicResult] = []
    answered: set[str] = set()
    for topic in body.topics:
        if topic.name in answered:
            continue
        answered.add(topic.name)
        if counts[topic.name] > 1:
            results.append(_error(topic.name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
            continue
        try:
            results.append(_create(broker, topic, body.validate_only))
        except KafkaError as exc:
            results.append(_error(topic.name, exc.code, exc.message))
    return CreateTopicsResponse(topics=results)


def _error(name: str, code: ErrorCode, message: str | None) -> CreatableTopicResult:
    return CreatableTopicResult(
        name=name,
        error_code=code,
        error_message=message or code.name,
        num_partitions=-1,
        replication_factor=-1,
        configs=[],
    )
