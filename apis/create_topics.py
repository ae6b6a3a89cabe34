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

# As Kafka 4's controller does (KAFKA-17870): a request that would create more partitions
# than this in all is refused whole, every topic POLICY_VIOLATION, before any is placed.
# A few bytes asking for 2**31 - 1 partitions must not make the broker try.
MAX_PARTITIONS_PER_REQUEST = 10_000


def over_partition_bound(asked: int) -> str | None:
    """The POLICY_VIOLATION message for a request that would create `asked` partitions,
    or None within the bound (CreatePartitions applies it to what it would add)."""
    if asked <= MAX_PARTITIONS_PER_REQUEST:
        return None
    return (
        f"A request may create at most {MAX_PARTITIONS_PER_REQUEST} partitions; "
        f"this one asks for {asked}."
    )


def _partitions_asked(broker: Broker, topics: list[CreatableTopic]) -> int:
    total = 0
    for topic in topics:
        if topic.assignments:
            total += len(topic.assignments)
        elif topic.num_partitions == -1:
            total += broker.config.num_partitions
        elif topic.num_partitions > 0:
            total += topic.num_partitions
    return total


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


async def _create_in_cluster(
    broker: Broker, topic: CreatableTopic, validate_only: bool
) -> CreatableTopicResult:
    """A cluster: validated here, assigned over the live brokers and written to ZooKeeper;
    the controller makes the partitions (cluster/zk_topics.py)."""
    assert broker.topics.zk_topics is not None
    configs: dict[str, str | None] = {}
    for c in topic.configs:
        if c.name in configs:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Duplicate config key: {c.name}")
        configs[c.name] = c.value
    assignment = None
    if topic.assignments:
        _manual_assignment(broker, topic)
        assignment = {a.partition_index: tuple(a.broker_ids) for a in topic.assignments}
    topic_id, partitions, replication = await broker.topics.zk_topics.create_topic(
        topic.name,
        topic.num_partitions,
        topic.replication_factor,
        configs,
        assignment=assignment,
        validate_only=validate_only,
    )
    overrides = {k: v for k, v in configs.items() if v is not None}
    return CreatableTopicResult(
        name=topic.name,
        topic_id=topic_id,
        error_code=ErrorCode.NONE,
        error_message=None,
        num_partitions=partitions,
        replication_factor=replication,
        configs=_configs(broker, overrides),
    )


async def _wait_for_leaders(
    broker: Broker, results: list[CreatableTopicResult], timeout_ms: int
) -> None:
    """Kafka's DelayedCreatePartitions: answer once this broker knows a leader for every new
    partition, or at timeout_ms with REQUEST_TIMED_OUT for the topics still waiting (they
    are created all the same)."""
    import trio

    zk_topics = broker.topics.zk_topics
    assert zk_topics is not None
    waiting = [r for r in results if r.error_code == ErrorCode.NONE and r.num_partitions > 0]
    with trio.move_on_after(max(timeout_ms, 0) / 1000):
        while not all(zk_topics.has_leaders(r.name, r.num_partitions) for r in waiting):
            await trio.sleep(0.02)
    for r in waiting:
        if not zk_topics.has_leaders(r.name, r.num_partitions):
            r.error_code = ErrorCode.REQUEST_TIMED_OUT
            r.error_message = (
                "Timed out waiting for the partitions' leaders; the topic is being created."
            )


async def handle(broker: Broker, request: Request) -> CreateTopicsResponse:
    body = request.body
    # A cluster creates through ZooKeeper and answers once leaders are known.
    in_cluster = broker.topics.zk_topics is not None
    message = over_partition_bound(_partitions_asked(broker, body.topics))
    if message is not None:
        return CreateTopicsResponse(
            topics=[_error(t.name, ErrorCode.POLICY_VIOLATION, message) for t in body.topics]
        )
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
            if in_cluster:
                results.append(await _create_in_cluster(broker, topic, body.validate_only))
            else:
                results.append(_create(broker, topic, body.validate_only))
        except KafkaError as exc:
            results.append(_error(topic.name, exc.code, exc.message))
    if in_cluster and not body.validate_only:
        await _wait_for_leaders(broker, results, body.timeout_ms)
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
