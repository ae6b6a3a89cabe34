"""The admin client against a real in-process trio-broker, each call checked against what
confluent-kafka's AdminClient (and consumer) sees."""

from __future__ import annotations

import pytest
import trio
from consumer_helpers import broker, produce_confluent

from trio_broker.client import Consumer, TopicPartition
from trio_broker.client.admin import (
    Admin,
    AdminError,
    ConfigResource,
    ConfigResourceType,
    NewTopic,
)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

TOPIC = ConfigResourceType.TOPIC


def _their_topics(bootstrap: str) -> dict[str, int]:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {name: len(t.partitions) for name, t in metadata.topics.items()}


def _their_configs(bootstrap: str, topic: str) -> dict[str, str]:
    from confluent_kafka.admin import ConfigResource as TheirResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.describe_configs([TheirResource("topic", topic)]).values()
    return {name: entry.value for name, entry in future.result(10).items()}


async def test_topics_partitions_and_configs(tmp_path):
    async with broker(tmp_path) as bootstrap, Admin(bootstrap) as admin:
        created = await admin.create_topics(
            [NewTopic("a", 3, 1, {"retention.ms": "123456", "cleanup.policy": "compact"}),
             NewTopic("b", 1, 1)]
        )  # fmt: skip
        assert created["a"].num_partitions == 3 and created["a"].replication_factor == 1
        # validate_only creates nothing; creating again names the topic and its error.
        await admin.create_topics([NewTopic("c", 2, 1)], validate_only=True)
        with pytest.raises(AdminError, match="TOPIC_ALREADY_EXISTS") as info:
            await admin.create_topics([NewTopic("a", 3, 1), NewTopic("d", 2, 1)])
        assert set(info.value.errors) == {"a"} and set(info.value.results) == {"d"}
        theirs = await trio.to_thread.run_sync(_their_topics, bootstrap)
        assert {k: v for k, v in theirs.items() if not k.startswith("_")} == {
            "a": 3,
            "b": 1,
            "d": 2,
        }
        configs = await trio.to_thread.run_sync(_their_configs, bootstrap, "a")
        assert configs["retention.ms"] == "123456" and configs["cleanup.policy"] == "compact"

        described = await admin.describe_topics(["a"])
        assert [(p.partition, p.leader, p.replicas, p.isr) for p in described["a"].partitions] == [
            (p, 1, (1,), (1,)) for p in range(3)
        ]
        with pytest.raises(AdminError, match="UNKNOWN_TOPIC_OR_PARTITION"):
            await admin.describe_topics(["nope"])

        # The short form: {name: partitions}, configs by name.
        await admin.create_topics({"e": 2}, configs={"e": {"retention.ms": "5000"}})
        assert (await admin.describe_topics(["e"]))["e"].partition_count == 2
        assert "e" in await admin.list_topics()
        assert (await trio.to_thread.run_sync(_their_configs, bootstrap, "e"))[
            "retention.ms"
        ] == "5000"
        await admin.delete_topics(["e"])

        await admin.create_partitions({"a": 5})
        assert (await trio.to_thread.run_sync(_their_topics, bootstrap))["a"] == 5
        with pytest.raises(AdminError, match="INVALID_PARTITIONS"):
            await admin.create_partitions({"a": 2})

        resource = ConfigResource(TOPIC, "a")
        await admin.incremental_alter_configs(
            {resource: {"retention.ms": "1000", "cleanup.policy": None}}
        )
        ours = (await admin.describe_configs([resource]))[resource]
        assert ours["retention.ms"].value == "1000" and not ours["retention.ms"].is_default
        assert ours["cleanup.policy"].value == "delete" and ours["cleanup.policy"].is_default
        configs = await trio.to_thread.run_sync(_their_configs, bootstrap, "a")
        assert configs["retention.ms"] == "1000" and configs["cleanup.policy"] == "delete"
        # AlterConfigs replaces the whole set: retention.ms goes back to its default.
        await admin.alter_configs({resource: {"segment.bytes": "1048576"}})
        configs = await trio.to_thread.run_sync(_their_configs, bootstrap, "a")
        assert configs["segment.bytes"] == "1048576"
        assert configs["retention.ms"] == "604800000"
        broker_configs = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, "1")]
        )
        assert "log.dirs" in next(iter(broker_configs.values()))

        await admin.delete_topics(["b"])
        assert "b" not in await trio.to_thread.run_sync(_their_topics, bootstrap)
        with pytest.raises(AdminError, match="UNKNOWN_TOPIC_OR_PARTITION"):
            await admin.delete_topics(["b"])


def _their_low_watermark(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        return c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, partition), timeout=10)
    finally:
        c.close()


def _their_committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = [confluent_kafka.TopicPartition(topic, p) for p in range(partitions)]
        return [tp.offset for tp in c.committed(tps, timeout=10)]
    finally:
        c.close()


async def test_groups_offsets_lag_and_delete_records(tmp_path):
    async with broker(tmp_path) as bootstrap, Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic("g", 2, 1)])
        await produce_confluent(bootstrap, "g", 2, 40)  # 20 per partition
        async with Consumer(bootstrap, group_id="lagging", auto_offset_reset="earliest",
                            enable_auto_commit=False, heartbeat_interval_ms=100) as c:  # fmt: skip
            c.subscribe(["g"])
            got = []
            with trio.fail_after(15):
                while len(got) < 40:
                    for records in (await c.getmany(timeout_ms=200)).values():
                        got.extend(records)
            listed = await admin.list_groups()
            assert [(g.group_id, g.protocol_type, g.state) for g in listed] == [
                ("lagging", "consumer", "Stable")
            ]
            [member] = (await admin.describe_groups(["lagging"]))["lagging"].members
            assert member.topics == ("g",)
            assert member.assignment == {TopicPartition("g", 0), TopicPartition("g", 1)}
            assert member.member_id == c.group.member_id
            await c.commit({TopicPartition("g", 0): 15, TopicPartition("g", 1): 4})
        theirs = await trio.to_thread.run_sync(_their_committed, bootstrap, "lagging", "g", 2)
        assert theirs == [15, 4]
        assert await admin.list_group_offsets("lagging") == {
            TopicPartition("g", 0): 15,
            TopicPartition("g", 1): 4,
        }
        lag = await admin.group_lag("lagging")
        assert {tp: (x.committed, x.log_end_offset, x.lag) for tp, x in lag.items()} == {
            TopicPartition("g", 0): (15, 20, 5),
            TopicPartition("g", 1): (4, 20, 16),
        }
        described = (await admin.describe_groups(["lagging"]))["lagging"]
        assert described.state == "Empty" and described.members == ()

        low = await admin.delete_records({TopicPartition("g", 0): 7, TopicPartition("g", 1): -1})
        assert low == {TopicPartition("g", 0): 7, TopicPartition("g", 1): 20}
        earliest = await admin.list_offsets({TopicPartition("g", p): "earliest" for p in (0, 1)})
        assert earliest == low
        assert await trio.to_thread.run_sync(_their_low_watermark, bootstrap, "g", 0) == (7, 20)
        with pytest.raises(AdminError, match="OFFSET_OUT_OF_RANGE"):
            await admin.delete_records({TopicPartition("g", 0): 99})

        await admin.delete_groups(["lagging"])
        assert await admin.list_groups() == []
        with pytest.raises(AdminError, match="GROUP_ID_NOT_FOUND"):
            await admin.delete_groups(["lagging"])
