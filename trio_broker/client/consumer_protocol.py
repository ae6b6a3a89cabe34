"""The consumer protocol's embedded messages: what a member puts in JoinGroup (its
subscription) and what the leader puts in SyncGroup (each member's assignment).

Each is an int16 version followed by the message (ConsumerProtocolSubscription.json and
ConsumerProtocolAssignment.json, "type": "data"); a newer version than we know is read
as the newest we know, its extra fields ignored, as Kafka's ConsumerProtocol does.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from trio_broker.client.assignors import MemberSubscription
from trio_broker.client.subscription import TopicPartition
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.consumer_protocol_assignment import (
    ConsumerProtocolAssignment,
)
from trio_broker.protocol._generated.consumer_protocol_assignment import (
    TopicPartition as AssignedTopic,
)
from trio_broker.protocol._generated.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
)
from trio_broker.protocol._generated.consumer_protocol_subscription import (
    TopicPartition as OwnedTopic,
)

__all__ = ["decode_assignment", "decode_subscription", "encode_assignment", "encode_subscription"]

_VERSION = struct.Struct(">h")


def encode_subscription(topics: Iterable[str], owned: Iterable[TopicPartition] = ()) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in owned:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    message = ConsumerProtocolSubscription(
        topics=sorted(topics),
        user_data=None,
        owned_partitions=[OwnedTopic(topic=t, partitions=sorted(p)) for t, p in by_topic.items()],
    )
    # v1: what librdkafka and Kafka's assignors read (owned partitions for cooperative).
    return bytes(message.encode(1, bytearray(_VERSION.pack(1))))


def _decode(cls: type, data: bytes, what: str) -> Any:
    """A version-prefixed consumer protocol message. Bytes that do not decode are
    INCONSISTENT_GROUP_PROTOCOL: Java's consumer raises on them too (a SchemaException out
    of poll); as a KafkaError it ends the membership with an error the application sees."""
    try:
        (version,) = _VERSION.unpack_from(data)
        return cls.decode(data, min(version, 3), 2)[0]
    except (ValueError, struct.error, TypeError) as exc:
        raise KafkaError(
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"{what} cannot be decoded: {exc}"
        ) from None


def decode_subscription(member_id: str, data: bytes, instance_id: str | None) -> MemberSubscription:
    message = _decode(
        ConsumerProtocolSubscription, data, f"the subscription of member {member_id!r}"
    )
    owned = tuple(
        TopicPartition(t.topic, p) for t in message.owned_partitions for p in t.partitions
    )
    return MemberSubscription(
        member_id=member_id,
        topics=tuple(message.topics),
        owned=owned,
        group_instance_id=instance_id,
    )


def encode_assignment(partitions: Iterable[tuple[str, int]]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    message = ConsumerProtocolAssignment(
        assigned_partitions=[
            AssignedTopic(topic=t, partitions=sorted(p)) for t, p in sorted(by_topic.items())
        ],
        user_data=None,
    )
    return bytes(message.encode(0, bytearray(_VERSION.pack(0))))


def decode_assignment(data: bytes) -> set[TopicPartition]:
    if not data:
        return set()
    message = _decode(ConsumerProtocolAssignment, data, "the assignment from the group leader")
    return {TopicPartition(t.topic, p) for t in message.assigned_partitions for p in t.partitions}
