"""Shared helpers for client tests: topics made with our connection layer, read-back with
confluent-kafka and kafka-python, and Tansu started as benchmarks/run.py starts it."""

from __future__ import annotations

import sys
from pathlib import Path

from trio_broker.client.config import ClientConfig
from trio_broker.client.network_client import NetworkClient
from trio_broker.protocol._generated.create_topics_request import (
    CreatableTopic,
    CreateTopicsRequest,
)

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def bench_run():
    """benchmarks/run.py as a module (its start_broker, tansu_binary, cpu_seconds)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import run  # noqa: PLC0415
    finally:
        sys.path.pop(0)
    return run


async def create_topic(bootstrap: str, name: str, partitions: int, **configs: str) -> None:
    from trio_broker.protocol._generated.create_topics_request import CreatableTopicConfig

    async with NetworkClient(ClientConfig.build(bootstrap_servers=bootstrap)) as client:
        topic = CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=1,
            configs=[CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
        )
        response = await client.send(
            bootstrap, CreateTopicsRequest(topics=[topic], timeout_ms=10_000)
        )
        code = response.topics[0].error_code
        assert code in (0, 36), response  # 36: TOPIC_ALREADY_EXISTS


Row = tuple[
    int, int, bytes | None, bytes | None, tuple, int
]  # partition, offset, key, value, headers, ts


def read_confluent(bootstrap: str, topic: str, partitions: int, count: int) -> list[Row]:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "readback", "enable.auto.commit": False}
    )
    consumer.assign(
        [
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(partitions)
        ]
    )
    rows: list[Row] = []
    try:
        for _ in range(600):
            if len(rows) >= count:
                break
            for msg in consumer.consume(1000, timeout=0.1):
                if msg.error():
                    raise AssertionError(msg.error())
                headers = tuple((k, v) for k, v in (msg.headers() or []))
                rows.append(
                    (
                        msg.partition(),
                        msg.offset(),
                        msg.key(),
                        msg.value(),
                        headers,
                        msg.timestamp()[1],
                    )
                )
    finally:
        consumer.close()
    return sorted(rows)


def read_kafka_python(bootstrap: str, topic: str, partitions: int, count: int) -> list[Row]:
    import kafka

    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [kafka.TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    rows: list[Row] = []
    try:
        for _ in range(300):
            if len(rows) >= count:
                break
            for records in consumer.poll(timeout_ms=100).values():
                for r in records:
                    headers = tuple((k, v) for k, v in (r.headers or []))
                    rows.append((r.partition, r.offset, r.key, r.value, headers, r.timestamp))
    finally:
        consumer.close()
    return sorted(rows)
