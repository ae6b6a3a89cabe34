"""The admin client against a real trio-broker, checked with confluent-kafka where it helps."""

from __future__ import annotations

import confluent_kafka
import pytest
import trio
from client_helpers import read_confluent

from trio_broker.client import Admin, Producer
from trio_broker.client.errors import KafkaError
from trio_broker.errors import ErrorCode


async def test_topics_partitions_and_configs(kafka_broker):
    async with Admin(kafka_broker.bootstrap) as admin:
        await admin.create_topics({"a1": 2, "a2": 1}, configs={"a1": {"retention.ms": "123456"}})
        with pytest.raises(KafkaError, match="TOPIC_ALREADY_EXISTS") as info:
            await admin.create_topics({"a1": 2})
        assert info.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
        described = await admin.describe_topics(["a1", "a2"])
        assert [p.partition for p in described["a1"].partitions] == [0, 1]
        assert {"a1", "a2"} <= set(await admin.list_topics())
        configs = await admin.describe_configs("a1")
        assert configs["retention.ms"].value == "123456"
        assert not configs["retention.ms"].is_default
        await admin.alter_configs(
            "a1", updates={"cleanup.policy": "compact"}, delete=["retention.ms"]
        )
        configs = await admin.describe_configs("a1")
        assert configs["cleanup.policy"].value == "compact"
        assert configs["retention.ms"].is_default
        await admin.create_partitions({"a2": 3})
        assert (await admin.describe_topics(["a2"]))["a2"].partition_count == 3
        await admin.delete_topics(["a2"])
        assert "a2" not in await admin.list_topics()
        with pytest.raises(KafkaError, match="UNKNOWN_TOPIC_OR_PARTITION"):
            await admin.delete_topics(["never-was"])


async def test_delete_records_and_offsets(kafka_broker):
    async with Admin(kafka_broker.bootstrap) as admin:
        await admin.create_topics({"dr": 1})
        async with Producer(kafka_broker.bootstrap) as p:
            for i in range(10):
                await p.send_soon("dr", b"%d" % i)
        assert await admin.list_offsets([("dr", 0)]) == {("dr", 0): 10}
        assert await admin.delete_records({("dr", 0): 4}) == {("dr", 0): 4}
        assert await admin.list_offsets([("dr", 0)], timestamp=-2) == {("dr", 0): 4}
    rows = await trio.to_thread.run_sync(read_confluent, kafka_broker.bootstrap, "dr", 1, 6)
    assert [r[1] for r in rows] == list(range(4, 10))


async def test_groups_offsets_and_lag(kafka_broker):
    async with Admin(kafka_broker.bootstrap) as admin:
        await admin.create_topics({"g": 2})
        async with Producer(kafka_broker.bootstrap) as p:
            for i in range(10):
                await p.send_soon("g", b"%d" % i, partition=i % 2)

        def commit() -> None:
            consumer = confluent_kafka.Consumer(
                {"bootstrap.servers": kafka_broker.bootstrap, "group.id": "grp"}
            )
            consumer.commit(
                offsets=[
                    confluent_kafka.TopicPartition("g", 0, 3),
                    confluent_kafka.TopicPartition("g", 1, 5),
                ],
                asynchronous=False,
            )
            consumer.close()

        await trio.to_thread.run_sync(commit)
        assert ("grp", "Empty") in await admin.list_groups()
        described = await admin.describe_groups(["grp"])
        assert described["grp"].state == "Empty" and described["grp"].members == ()
        offsets = await admin.list_group_offsets("grp")
        assert [(o.topic, o.partition, o.committed, o.end, o.lag) for o in offsets] == [
            ("g", 0, 3, 5, 2),
            ("g", 1, 5, 5, 0),
        ]
        with pytest.raises(KafkaError, match="INVALID_REQUEST|INVALID_GROUP_ID"):
            await admin.describe_groups([""])
