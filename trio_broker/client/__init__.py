"""A Trio-native Kafka client: the connection layer, a producer, a consumer and an admin client.

    async with trio_broker.client.Producer("127.0.0.1:9092", linger_ms=5) as producer:
        metadata = await producer.send("events", b"value", key=b"key")

Names are imported lazily: a program that only needs the connection layer (the broker's
own inter-broker traffic) does not import the producer.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Admin",
    "BufferExhaustedError",
    "ClusterMetadata",
    "Consumer",
    "ConsumerRecord",
    "KafkaConnectionError",
    "NetworkClient",
    "Producer",
    "RecordMetadata",
    "RequestTimedOutError",
    "ShareConsumer",
    "ShareRecord",
    "CommitFailedError",
    "ConsumerRebalanceListener",
    "TopicPartition",
    "AdminError",
]

_WHERE = {
    "Admin": "admin",
    "BufferExhaustedError": "errors",
    "ClusterMetadata": "metadata",
    "Consumer": "consumer",
    "KafkaConnectionError": "errors",
    "NetworkClient": "network_client",
    "Producer": "producer",
    "RecordMetadata": "producer",
    "RequestTimedOutError": "errors",
    "ShareConsumer": "share_consumer",
    "ShareRecord": "share_consumer",
    "CommitFailedError": "group",
    "ConsumerRebalanceListener": "group",
    "ConsumerRecord": "subscription",
    "TopicPartition": "subscription",
    "AdminError": "admin",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
