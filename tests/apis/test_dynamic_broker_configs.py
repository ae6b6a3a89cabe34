"""DescribeConfigs on brokers as Kafka answers it, and dynamic broker configs
(AlterConfigs / IncrementalAlterConfigs on BROKER resources) applied without a restart
and kept across one."""

from __future__ import annotations

import time

import pytest
import trio
from confluent_kafka import KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import KafkaAdminClient
from test_admin_configs import admin, create, describe, raw

from trio_broker.broker import serve
from trio_broker.client.admin import Admin, ConfigResourceType
from trio_broker.client.admin import ConfigResource as TrioResource
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
)
from trio_broker.protocol._generated.describe_configs_request import DescribeConfigsResource
from trio_broker.protocol._generated.incremental_alter_configs_request import (
    AlterableConfig as IncAlterableConfig,
)
from trio_broker.protocol._generated.incremental_alter_configs_request import (
    AlterConfigsResource as IncAlterConfigsResource,
)

TIMEOUT = 30


def set_default(broker, op: int = 0, **entries: str | None) -> int:
    """IncrementalAlterConfigs SET on the cluster default (confluent-kafka cannot name "")."""
    response = raw(
        broker, 44, 1,
        resources=[
            IncAlterConfigsResource(
                resource_type=4, resource_name="",
                configs=[
                    IncAlterableConfig(name=k.replace("_", "."), config_operation=op, value=v)
                    for k, v in entries.items()
                ],
            )
        ],
        validate_only=False,
    )  # fmt: skip
    return response.responses[0].error_code


def describe_default(broker) -> dict:
    response = raw(
        broker, 32, 4,
        resources=[DescribeConfigsResource(resource_type=4, resource_name="", configuration_keys=None)],
        include_synonyms=False, include_documentation=False,
    )  # fmt: skip
    return {c.name: (c.value, c.config_source) for c in response.results[0].configs}


def synonyms(broker, key: str) -> list[tuple[str, int]]:
    # Raw: confluent-kafka keys synonyms by name, and Kafka's levels share the key's name.
    response = raw(
        broker, 32, 4,
        resources=[DescribeConfigsResource(resource_type=4, resource_name="1", configuration_keys=[key])],
        include_synonyms=True, include_documentation=False,
    )  # fmt: skip
    return [(s.value, s.source) for s in response.results[0].configs[0].synonyms]


def alter(client: AdminClient, name: str, **entries: str | None):
    resource = ConfigResource(
        ResourceType.BROKER,
        name,
        incremental_configs=[
            ConfigEntry(
                key.replace("_", "."),
                value,
                incremental_operation=AlterConfigOpType.SET
                if value is not None
                else AlterConfigOpType.DELETE,
            )
            for key, value in entries.items()
        ],
    )
    (future,) = client.incremental_alter_configs([resource]).values()
    return future


def test_describe_broker_as_kafka_does(kafka_broker):
    configs = describe(admin(kafka_broker), ResourceType.BROKER, "1")
    assert configs["broker.id"].value == "1"
    assert configs["advertised.listeners"].value == f"PLAINTEXT://127.0.0.1:{kafka_broker.port}"
    # Sources: what the properties named is static (even log.dirs), the rest default.
    assert configs["log.dirs"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["num.partitions"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["num.partitions"].is_default
    # Read-only exactly where Kafka cannot change the key at runtime.
    for key in ("log.retention.ms", "message.max.bytes", "num.io.threads", "max.connections"):
        assert not configs[key].is_read_only, key
    for key in (
        "log.dirs",
        "num.partitions",
        "broker.id",
        "zookeeper.connect",
        "log.retention.check.interval.ms",
    ):
        assert configs[key].is_read_only, key
    assert not configs["listeners"].is_read_only  # per-broker dynamic in Kafka
    kp = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        result = kp.describe_configs([KpConfigResource("BROKER", "1")], config_filter="all")
    finally:
        kp.close()
    seen = result["broker"]["1"]
    assert seen["broker.id"]["value"] == "1"
    assert seen["log.retention.ms"]["read_only"] is False
    assert seen["log.dirs"]["read_only"] is True


def test_documentation_and_synonyms_when_asked(kafka_broker):
    keys = ["log.retention.ms", "broker.id"]
    asked = raw(
        kafka_broker, 32, 4,
        resources=[DescribeConfigsResource(resource_type=4, resource_name="1", configuration_keys=keys)],
        include_synonyms=True, include_documentation=True,
    )  # fmt: skip
    plain = raw(
        kafka_broker, 32, 4,
        resources=[DescribeConfigsResource(resource_type=4, resource_name="1", configuration_keys=keys)],
        include_synonyms=False, include_documentation=False,
    )  # fmt: skip
    by_name = {c.name: c for c in asked.results[0].configs}
    assert by_name["log.retention.ms"].documentation
    assert [(s.name, s.source) for s in by_name["log.retention.ms"].synonyms] == [
        ("log.retention.ms", ConfigSource.DEFAULT_CONFIG.value)
    ]
    assert by_name["broker.id"].config_type == 3
    assert all(c.documentation is None and not c.synonyms for c in plain.results[0].configs)


def test_dynamic_log_retention_applies_without_restart_and_survives_one(kafka_broker_factory):
    broker = kafka_broker_factory({"log.retention.check.interval.ms": "200"})
    client = admin(broker)
    create(client, "aging", {"segment.bytes": "1024"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    an_hour_ago = int(time.time() * 1000) - 3_600_000
    for _ in range(40):
        producer.produce("aging", value=b"x" * 100, timestamp=an_hour_ago)
        producer.flush(TIMEOUT)
    for _ in range(3):
        producer.produce("aging", value=b"new", timestamp=int(time.time() * 1000))
    producer.flush(TIMEOUT)
    consumer_client = _watermarks(broker)
    time.sleep(1.0)  # several retention checks with the static default (7 days): nothing goes
    assert consumer_client() == 0

    assert set_default(broker, log_retention_ms="600000") == ErrorCode.NONE  # cluster default
    configs = describe(client, ResourceType.BROKER, "1")
    assert configs["log.retention.ms"].value == "600000"
    assert configs["log.retention.ms"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert synonyms(broker, "log.retention.ms") == [
        ("600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
        ("604800000", ConfigSource.DEFAULT_CONFIG.value),
    ]
    topic = describe(client, ResourceType.TOPIC, "aging")["retention.ms"]
    assert (topic.value, topic.source) == (
        "600000",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
    )
    assert describe_default(broker) == {
        "log.retention.ms": ("600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    }
    # The hour-old segments go at the next retention check, without a restart.
    deadline = time.monotonic() + TIMEOUT
    while consumer_client() < 30 and time.monotonic() < deadline:
        time.sleep(0.1)
    # Every segment of only hour-old records (~6 batches of 1 KiB segments each) is gone;
    # the one holding the new records stays.
    assert 30 <= consumer_client() <= 40

    # This broker's own value wins over the default; both survive a restart.
    alter(client, "1", log_retention_ms="900000", message_max_bytes="2000000").result(TIMEOUT)
    broker.restart()
    client = admin(broker)
    configs = describe(client, ResourceType.BROKER, "1")
    assert (configs["log.retention.ms"].value, configs["log.retention.ms"].source) == (
        "900000",
        ConfigSource.DYNAMIC_BROKER_CONFIG.value,
    )
    assert synonyms(broker, "log.retention.ms")[:2] == [
        ("900000", ConfigSource.DYNAMIC_BROKER_CONFIG.value),
        ("600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
    ]
    assert configs["message.max.bytes"].value == "2000000"
    assert describe(client, ResourceType.TOPIC, "aging")["max.message.bytes"].value == "2000000"
    # DELETE goes back to the next level.
    alter(client, "1", log_retention_ms=None).result(TIMEOUT)
    assert describe(client, ResourceType.BROKER, "1")["log.retention.ms"].value == "600000"
    assert set_default(broker, op=1, log_retention_ms=None) == ErrorCode.NONE  # DELETE
    entry = describe(client, ResourceType.BROKER, "1")["log.retention.ms"]
    assert (entry.value, entry.source) == ("604800000", ConfigSource.DEFAULT_CONFIG.value)


def _watermarks(broker):
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm"})

    def low() -> int:
        lo, _hi = consumer.get_watermark_offsets(CkTopicPartition("aging", 0), timeout=TIMEOUT)
        return lo

    return low


def test_bad_dynamic_changes_are_refused_per_resource(kafka_broker):
    client = admin(kafka_broker)
    cases = [
        ("1", {"num_partitions": "3"}, "Cannot update these configs dynamically"),
        ("1", {"log_retention_ms": "soon"}, "Invalid value"),
        ("1", {"num_io_threads": "0"}, "at least 1"),
        ("1", {"advertised_listeners": "PLAINTEXT://h:1"}, "cannot change these configs while"),
        ("1", {"no_such_key": "1"}, "Unknown broker config"),
    ]
    for name, entries, message in cases:
        future = alter(client, name, **entries)
        with pytest.raises(KafkaException) as info:
            future.result(TIMEOUT)
        assert info.value.args[0].code() == ErrorCode.INVALID_REQUEST, (name, entries)
        assert message in info.value.args[0].str(), (message, info.value.args[0].str())
    # A per-broker key cannot be set at the cluster default.
    assert (
        set_default(kafka_broker, listeners="PLAINTEXT://127.0.0.1:1") == ErrorCode.INVALID_REQUEST
    )
    configs = describe(client, ResourceType.BROKER, "1")
    assert configs["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["num.io.threads"].value == "8"
    assert describe_default(kafka_broker) == {}


def test_kafka_python_alter_and_legacy_alter_configs_replaces_the_level(kafka_broker):
    kp = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        kp.alter_configs([KpConfigResource("BROKER", "1", {"message.max.bytes": "3000000"})])
        seen = kp.describe_configs([KpConfigResource("BROKER", "1")])["broker"]["1"]
        assert seen["message.max.bytes"]["value"] == "3000000"
        assert seen["message.max.bytes"]["config_source"] == "DYNAMIC_BROKER_CONFIG"
        # The legacy AlterConfigs makes the request's configs the whole level.
        response = raw(
            kafka_broker, 33, 2,
            resources=[
                AlterConfigsResource(
                    resource_type=4, resource_name="1",
                    configs=[AlterableConfig(name="log.retention.ms", value="1000000")],
                )
            ],
            validate_only=False,
        )  # fmt: skip
        assert response.responses[0].error_code == ErrorCode.NONE
        seen = kp.describe_configs([KpConfigResource("BROKER", "1")], config_filter="all")
        seen = seen["broker"]["1"]
    finally:
        kp.close()
    assert seen["message.max.bytes"]["value"] == "1048588"
    assert seen["message.max.bytes"]["config_source"] == "DEFAULT_CONFIG"
    assert seen["log.retention.ms"]["value"] == "1000000"


def _tasks(suffix: str) -> int:
    def walk(task):
        yield task
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                yield from walk(child)

    return sum(1 for t in walk(trio.lowlevel.current_root_task()) if t.name.endswith(suffix))


def _handler_tasks() -> int:
    return _tasks("HandlerPool._handler")


async def test_num_network_threads_starts_and_retires_processors(tmp_path):
    config = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)}
    resource = TrioResource(ConfigResourceType.BROKER, "1")
    async with trio.open_nursery() as nursery:
        host, port = (await nursery.start(serve, config))[0][:2]
        assert _tasks("Processor.run") == 3
        async with Admin(f"{host}:{port}") as client:
            await client.incremental_alter_configs({resource: {"num.network.threads": "5"}})
        assert _tasks("Processor.run") == 5
        # New connections are spread over all five, and answered.
        for _ in range(5):
            async with Admin(f"{host}:{port}") as client:
                assert await client.list_topics() == []
        async with Admin(f"{host}:{port}") as client:
            await client.incremental_alter_configs({resource: {"num.network.threads": "1"}})
        with trio.fail_after(TIMEOUT):
            while _tasks("Processor.run") != 1:
                await trio.sleep(0.01)
        async with Admin(f"{host}:{port}") as client:
            configs = (await client.describe_configs([resource]))[resource]
            assert configs["num.network.threads"].value == "1"
        nursery.cancel_scope.cancel()


async def test_num_io_threads_grows_and_shrinks_the_handler_tasks(tmp_path):
    config = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(tmp_path),
        "num.io.threads": "4",
    }
    resource = TrioResource(ConfigResourceType.BROKER, "1")
    async with trio.open_nursery() as nursery:
        host, port = (await nursery.start(serve, config))[0][:2]
        assert _handler_tasks() == 4
        async with Admin(f"{host}:{port}") as client:
            await client.incremental_alter_configs({resource: {"num.io.threads": "6"}})
            assert _handler_tasks() == 6
            await client.incremental_alter_configs({resource: {"num.io.threads": "2"}})
            with trio.fail_after(TIMEOUT):
                while _handler_tasks() != 2:
                    await trio.sleep(0.01)
            # Still serving with two, and the change is what DescribeConfigs reports.
            configs = (await client.describe_configs([resource]))[resource]
            assert configs["num.io.threads"].value == "2"
            assert configs["num.io.threads"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        nursery.cancel_scope.cancel()
    # A restart starts with the dynamic value.
    async with trio.open_nursery() as nursery:
        await nursery.start(serve, config)
        assert _handler_tasks() == 2
        nursery.cancel_scope.cancel()
