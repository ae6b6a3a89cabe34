"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics and the broker,
through confluent-kafka's and kafka-python's admin clients."""

from __future__ import annotations

import json
import socket

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import KafkaAdminClient
from wire import request_of, roundtrip

from trio_broker.cluster.topic_config import resolve_log_config
from trio_broker.config import BrokerConfig
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


def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create(client: AdminClient, name: str, config: dict[str, str] | None = None) -> None:
    client.create_topics([NewTopic(name, 1, 1, config=config or {})])[name].result(TIMEOUT)


def describe(client: AdminClient, kind: ResourceType, name: str) -> dict[str, ConfigEntry]:
    (future,) = client.describe_configs([ConfigResource(kind, name)]).values()
    return future.result(TIMEOUT)


def error_of(future) -> int:
    with pytest.raises(KafkaException) as info:
        future.result(TIMEOUT)
    return info.value.args[0].code()


def raw(broker, api_key: int, version: int, **fields):
    with socket.create_connection((broker.host, broker.port), timeout=TIMEOUT) as sock:
        return roundtrip(sock, request_of(api_key, **fields), version)


def test_describe_topic_sources_and_synonyms(kafka_broker_factory):
    broker = kafka_broker_factory({"log.retention.ms": "86400000", "num.partitions": "2"})
    client = admin(broker)
    create(client, "described", {"cleanup.policy": "compact"})
    configs = describe(client, ResourceType.TOPIC, "described")
    policy = configs["cleanup.policy"]
    assert (policy.value, policy.source) == ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert not policy.is_default and not policy.is_read_only
    retention = configs["retention.ms"]
    assert (retention.value, retention.source) == (
        "86400000",
        ConfigSource.STATIC_BROKER_CONFIG.value,
    )
    segment = configs["segment.bytes"]
    assert (segment.value, segment.source) == ("1073741824", ConfigSource.DEFAULT_CONFIG.value)
    assert segment.is_default
    # confluent-kafka asks for synonyms (and keeps one per name): the broker's key name.
    assert set(retention.synonyms) == {"log.retention.ms"}
    assert set(policy.synonyms) == {"cleanup.policy", "log.cleanup.policy"}
    # The whole synonym list, most specific first.
    response = raw(
        broker,
        32,
        4,
        resources=[
            DescribeConfigsResource(
                resource_type=2, resource_name="described", configuration_keys=["retention.ms"]
            )
        ],
        include_synonyms=True,
        include_documentation=False,
    )
    (entry,) = response.results[0].configs
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("log.retention.ms", "86400000", ConfigSource.STATIC_BROKER_CONFIG.value),
        ("log.retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG.value),
    ]
    missing = client.describe_configs([ConfigResource(ResourceType.TOPIC, "no-such-topic")])
    assert error_of(next(iter(missing.values()))) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_raw_with_documentation_and_types(kafka_broker):
    response = raw(
        kafka_broker,
        32,
        4,
        resources=[
            DescribeConfigsResource(
                resource_type=4,
                resource_name="1",
                configuration_keys=["num.partitions", "log.dirs"],
            ),
            DescribeConfigsResource(resource_type=4, resource_name="7", configuration_keys=None),
        ],
        include_synonyms=True,
        include_documentation=True,
    )
    mine, other = response.results
    assert mine.error_code == ErrorCode.NONE
    by_name = {c.name: c for c in mine.configs}
    assert set(by_name) == {"num.partitions", "log.dirs"}
    assert by_name["num.partitions"].config_type == 3  # INT
    assert by_name["num.partitions"].documentation
    assert by_name["log.dirs"].value == str(kafka_broker.log_dir)
    assert by_name["log.dirs"].config_source == 4  # STATIC_BROKER_CONFIG
    assert by_name["log.dirs"].read_only
    assert other.error_code == ErrorCode.INVALID_REQUEST


def test_describe_broker_confluent_and_kafka_python(kafka_broker_factory):
    broker = kafka_broker_factory({"num.partitions": "3"})
    configs = describe(admin(broker), ResourceType.BROKER, "1")
    assert configs["num.partitions"].value == "3"
    assert configs["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["log.retention.ms"].value == "604800000"
    assert configs["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        result = kp.describe_configs([KpConfigResource("BROKER", "1")], config_filter="all")
        assert result["broker"]["1"]["num.partitions"]["value"] == "3"
    finally:
        kp.close()


def test_incremental_alter_topic_and_persistence(kafka_broker):
    client = admin(kafka_broker)
    create(client, "tuned", {"retention.ms": "1000", "segment.bytes": "1048576"})
    resource = ConfigResource(
        ResourceType.TOPIC,
        "tuned",
        incremental_configs=[
            ConfigEntry("retention.ms", "5000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("segment.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
        ],
    )
    (future,) = client.incremental_alter_configs([resource]).values()
    future.result(TIMEOUT)
    configs = describe(client, ResourceType.TOPIC, "tuned")
    assert configs["retention.ms"].value == "5000"
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].value == "delete,compact"
    # Non-list keys cannot be appended to; bad values are refused and change nothing.
    bad = ConfigResource(
        ResourceType.TOPIC,
        "tuned",
        incremental_configs=[
            ConfigEntry("retention.ms", "7", incremental_operation=AlterConfigOpType.APPEND)
        ],
    )
    assert error_of(next(iter(client.incremental_alter_configs([bad]).values()))) == (
        KafkaError.INVALID_CONFIG
    )
    bad_value = ConfigResource(
        ResourceType.TOPIC,
        "tuned",
        incremental_configs=[
            ConfigEntry("retention.ms", "-5", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    assert error_of(next(iter(client.incremental_alter_configs([bad_value]).values()))) == (
        KafkaError.INVALID_CONFIG
    )
    kafka_broker.restart()
    configs = describe(admin(kafka_broker), ResourceType.TOPIC, "tuned")
    assert configs["retention.ms"].value == "5000"
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value


def test_incremental_validate_only_and_subtract(kafka_broker):
    client = admin(kafka_broker)
    create(client, "policy", {"cleanup.policy": "delete,compact"})
    resource = ConfigResource(
        ResourceType.TOPIC,
        "policy",
        incremental_configs=[
            ConfigEntry(
                "cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT
            )
        ],
    )
    (future,) = client.incremental_alter_configs([resource], validate_only=True).values()
    future.result(TIMEOUT)
    assert (
        describe(client, ResourceType.TOPIC, "policy")["cleanup.policy"].value == "delete,compact"
    )
    (future,) = client.incremental_alter_configs([resource]).values()
    future.result(TIMEOUT)
    assert describe(client, ResourceType.TOPIC, "policy")["cleanup.policy"].value == "compact"
    # SUBTRACT of the last value leaves the empty list: neither delete nor compact, which
    # Kafka 3.9 accepts. It is the topic's own value, and it survives a restart.
    last = ConfigResource(
        ResourceType.TOPIC,
        "policy",
        incremental_configs=[
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SUBTRACT
            )
        ],
    )
    (future,) = client.incremental_alter_configs([last]).values()
    future.result(TIMEOUT)
    policy = describe(client, ResourceType.TOPIC, "policy")["cleanup.policy"]
    assert (policy.value, policy.source) == ("", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    kafka_broker.restart()
    client = admin(kafka_broker)
    policy = describe(client, ResourceType.TOPIC, "policy")["cleanup.policy"]
    assert (policy.value, policy.source) == ("", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    # The logs run with it: no retention deletion, no compaction (tests/log/test_cleaner.py
    # shows what that means for a log).
    stored = json.loads((kafka_broker.log_dir / "trio-broker-metadata.json").read_text())
    (topic,) = [t for t in stored["topics"] if t["name"] == "policy"]
    log_config = resolve_log_config(topic["configs"], BrokerConfig())
    assert (log_config.deletes, log_config.compacts) == (False, False)
    # APPEND to the empty list starts from nothing (not from the broker's default).
    again = ConfigResource(
        ResourceType.TOPIC,
        "policy",
        incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)
        ],
    )
    (future,) = client.incremental_alter_configs([again]).values()
    future.result(TIMEOUT)
    assert describe(client, ResourceType.TOPIC, "policy")["cleanup.policy"].value == "compact"
    # Values outside delete/compact are still refused.
    bad = ConfigResource(
        ResourceType.TOPIC,
        "policy",
        incremental_configs=[
            ConfigEntry("cleanup.policy", "shred", incremental_operation=AlterConfigOpType.APPEND)
        ],
    )
    assert error_of(next(iter(client.incremental_alter_configs([bad]).values()))) == (
        KafkaError.INVALID_CONFIG
    )


def test_alter_configs_replaces_all_overrides(kafka_broker):
    create(admin(kafka_broker), "legacy", {"retention.ms": "1000", "segment.ms": "60000"})
    response = raw(
        kafka_broker,
        33,
        2,
        resources=[
            AlterConfigsResource(
                resource_type=2,
                resource_name="legacy",
                configs=[AlterableConfig(name="max.message.bytes", value="2000")],
            ),
            AlterConfigsResource(resource_type=2, resource_name="missing", configs=[]),
        ],
        validate_only=False,
    )
    legacy, missing = response.responses
    assert legacy.error_code == ErrorCode.NONE
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    configs = describe(admin(kafka_broker), ResourceType.TOPIC, "legacy")
    assert configs["max.message.bytes"].value == "2000"
    # Keys the request did not name went back to their defaults.
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_kafka_python_alter_topic_config(kafka_broker):
    create(admin(kafka_broker), "kp-alter")
    kp = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        kp.alter_configs([KpConfigResource("TOPIC", "kp-alter", {"retention.ms": "12345"})])
        result = kp.describe_configs([KpConfigResource("TOPIC", "kp-alter")])
    finally:
        kp.close()
    assert result["topic"]["kp-alter"]["retention.ms"]["value"] == "12345"
    configs = describe(admin(kafka_broker), ResourceType.TOPIC, "kp-alter")
    assert configs["retention.ms"].value == "12345"


def test_static_broker_config_changes_are_refused(kafka_broker):
    # num.partitions is read-only in Kafka (dynamic keys: tests/apis/test_dynamic_broker_configs.py).
    client = admin(kafka_broker)
    resource = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry("num.partitions", "7", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    (future,) = client.incremental_alter_configs([resource]).values()
    assert error_of(future) == KafkaError.INVALID_REQUEST
    # Duplicate keys in one resource are refused too (before anything else).
    response = raw(
        kafka_broker,
        44,
        1,
        resources=[
            IncAlterConfigsResource(
                resource_type=2,
                resource_name="anything",
                configs=[
                    IncAlterableConfig(name="retention.ms", config_operation=0, value="1"),
                    IncAlterableConfig(name="retention.ms", config_operation=0, value="2"),
                ],
            )
        ],
        validate_only=False,
    )
    assert response.responses[0].error_code == ErrorCode.INVALID_REQUEST
    assert describe(client, ResourceType.BROKER, "1")["log.retention.ms"].value == "604800000"


def test_append_and_subtract_on_every_list_key(kafka_broker):
    client = admin(kafka_broker)
    create(client, "throttled")
    key = "leader.replication.throttled.replicas"
    assert describe(client, ResourceType.TOPIC, "throttled")[key].value == ""

    def alter(op: AlterConfigOpType, value: str):
        resource = ConfigResource(
            ResourceType.TOPIC,
            "throttled",
            incremental_configs=[ConfigEntry(key, value, incremental_operation=op)],
        )
        return next(iter(client.incremental_alter_configs([resource]).values()))

    # APPEND starts from the default (the empty list) and adds only what is missing.
    alter(AlterConfigOpType.APPEND, "0:1,1:1").result(TIMEOUT)
    alter(AlterConfigOpType.APPEND, "1:1,2:1").result(TIMEOUT)
    assert describe(client, ResourceType.TOPIC, "throttled")[key].value == "0:1,1:1,2:1"
    # SUBTRACT removes what is there and ignores what is not.
    alter(AlterConfigOpType.SUBTRACT, "1:1,7:7").result(TIMEOUT)
    assert describe(client, ResourceType.TOPIC, "throttled")[key].value == "0:1,2:1"
    # Each element is validated as Kafka's ThrottledReplicaListValidator does.
    assert error_of(alter(AlterConfigOpType.APPEND, "broker-1")) == KafkaError.INVALID_CONFIG
    alter(AlterConfigOpType.SUBTRACT, "0:1,2:1").result(TIMEOUT)
    entry = describe(client, ResourceType.TOPIC, "throttled")[key]
    assert (entry.value, entry.source) == ("", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
