"""DeleteTopics (key 20): by name (v0+) or by topic id (v6+).

The partition directories are renamed `-delete` at once and removed after
`file.delete.delay.ms` by the log manager, as Kafka does. A name or id given twice in one
request is refused with INVALID_REQUEST for every copy, like Kafka's controller.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.delete_topics_response import (
    DeletableTopicResult,
    DeleteTopicsResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

logger = logging.getLogger(__name__)

_ZERO = uuid.UUID(int=0)


async def _delete(
    broker: Broker, name: str | None, topic_id: uuid.UUID, timeout_ms: int
) -> DeletableTopicResult:
    if name is not None and topic_id != _ZERO:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Topic name and topic id cannot both be set.")
    if name is None:
        if topic_id == _ZERO:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified.")
        topic = broker.metadata.topic_by_id(topic_id)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")
    else:
        topic = broker.metadata.topics.get(name)
        if topic is None and broker.topics.zk_topics is not None:
            # In a cluster the topic may exist before this broker's cache has it.
            await broker.topics.zk_topics.delete_topic(name, timeout_ms)
            return DeletableTopicResult(name=name, error_code=ErrorCode.NONE, error_message=None)
        if topic is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "This server does not host this topic-partition.",
            )
    if broker.topics.zk_topics is not None:
        # A cluster: marked in /admin/delete_topics; the controller deletes it everywhere
        # and the answer waits (up to timeout_ms) until this broker's cache lost it.
        await broker.topics.zk_topics.delete_topic(topic.name, timeout_ms)
    else:
        broker.topics.delete_topic(topic.name)
    return DeletableTopicResult(
        name=topic.name, topic_id=topic.topic_id, error_code=ErrorCode.NONE, error_message=None
    )


async def handle(broker: Broker, request: Request) -> DeleteTopicsResponse:
    body = request.body
    if request.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, _ZERO) for name in body.topic_names]
    counts = Counter(wanted)
    results: list[DeletableTopicResult] = []
    seen: set[tuple[str | None, uuid.UUID]] = set()
    for name, topic_id in wanted:
        if (name, topic_id) in seen:
            continue
        seen.add((name, topic_id))
        try:
            if counts[(name, topic_id)] > 1:
                what = "name" if name is not None else "id"
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Duplicate topic {what}.")
            results.append(await _delete(broker, name, topic_id, body.timeout_ms))
        except KafkaError as exc:
            results.append(
                DeletableTopicResult(
                    name=name,
                    topic_id=topic_id,
                    error_code=exc.code,
                    error_message=exc.message or exc.code.name,
                )
            )
    return DeleteTopicsResponse(responses=results)
