"""GROUP config resources (type 32) and resource types the broker does not serve, through
confluent-kafka's admin client and raw requests: every resource gets its own answer."""

from __future__ import annotations

from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from test_admin_configs import TIMEOUT, admin, create, describe, error_of, raw

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

SESSION = "consumer.session.timeout.ms"
HEARTBEAT = "consumer.heartbeat.interval.ms"
# KIP-932's share group keys, described beside the consumer ones as Kafka 4.1 does.
SHARE_KEYS = {
    "share.session.timeout.ms",
    "share.heartbeat.interval.ms",
    "share.record.lock.duration.ms",
    "share.auto.offset.reset",
    "share.isolation.level",
    "share.delivery.count.limit",
}


def incremental(client, group: str, *entries: ConfigEntry):
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=list(entries))
    (future,) = client.incremental_alter_configs([resource]).values()
    return future


def test_group_configs_describe_alter_and_survive_restart(kafka_broker_factory):
    broker = kafka_broker_factory({"group.consumer.max.session.timeout.ms": "90000"})
    client = admin(broker)
    # Any group id has configs: the broker's group.* values until altered.
    configs = describe(client, ResourceType.GROUP, "payments")
    assert set(configs) == {SESSION, HEARTBEAT} | SHARE_KEYS
    assert (configs[SESSION].value, configs[SESSION].source) == (
        "45000",
        ConfigSource.DEFAULT_CONFIG.value,
    )
    assert set(configs[SESSION].synonyms) == {"group.consumer.session.timeout.ms"}
    assert configs[HEARTBEAT].value == "5000" and not configs[HEARTBEAT].is_read_only

    incremental(
        client,
        "payments",
        ConfigEntry(SESSION, "80000", incremental_operation=AlterConfigOpType.SET),
    ).result(TIMEOUT)
    configs = describe(client, ResourceType.GROUP, "payments")
    assert (configs[SESSION].value, configs[SESSION].source) == (
        "80000",
        ConfigSource.GROUP_CONFIG.value,
    )
    assert set(configs[SESSION].synonyms) == {SESSION, "group.consumer.session.timeout.ms"}
    # Another group keeps the defaults.
    assert describe(client, ResourceType.GROUP, "other")[SESSION].value == "45000"

    # Kafka's GroupConfig bounds: the broker's min/max, and session above heartbeat.
    for name, value in (
        (SESSION, "95000"),  # above group.consumer.max.session.timeout.ms (90000 here)
        (SESSION, "44999"),  # below group.consumer.min.session.timeout.ms
        (HEARTBEAT, "4000"),  # below group.consumer.min.heartbeat.interval.ms
        (HEARTBEAT, "abc"),
        ("session.timeout.ms", "50000"),  # not a group key
    ):
        future = incremental(
            client,
            "payments",
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET),
        )
        assert error_of(future) == KafkaError.INVALID_CONFIG, (name, value)
    # A group key is no list: APPEND is refused as on any non-list key.
    future = incremental(
        client,
        "payments",
        ConfigEntry(HEARTBEAT, "6000", incremental_operation=AlterConfigOpType.APPEND),
    )
    assert error_of(future) == KafkaError.INVALID_CONFIG
    assert describe(client, ResourceType.GROUP, "payments")[SESSION].value == "80000"

    broker.restart()
    client = admin(broker)
    configs = describe(client, ResourceType.GROUP, "payments")
    assert (configs[SESSION].value, configs[SESSION].source) == (
        "80000",
        ConfigSource.GROUP_CONFIG.value,
    )
    # DELETE goes back to the broker's value, and that too survives a restart.
    incremental(
        client,
        "payments",
        ConfigEntry(SESSION, None, incremental_operation=AlterConfigOpType.DELETE),
    ).result(TIMEOUT)
    broker.restart()
    configs = describe(admin(broker), ResourceType.GROUP, "payments")
    assert (configs[SESSION].value, configs[SESSION].source) == (
        "45000",
        ConfigSource.DEFAULT_CONFIG.value,
    )


def test_legacy_alter_configs_replaces_a_groups_overrides(kafka_broker):
    def alter(configs: dict[str, str], validate_only: bool = False) -> int:
        response = raw(
            kafka_broker,
            33,
            2,
            resources=[
                AlterConfigsResource(
                    resource_type=32,
                    resource_name="legacy-group",
                    configs=[AlterableConfig(name=k, value=v) for k, v in configs.items()],
                )
            ],
            validate_only=validate_only,
        )
        return response.responses[0].error_code

    assert alter({SESSION: "50000", HEARTBEAT: "6000"}) == ErrorCode.NONE
    assert alter({HEARTBEAT: "7000"}, validate_only=True) == ErrorCode.NONE
    configs = describe(admin(kafka_broker), ResourceType.GROUP, "legacy-group")
    assert (configs[SESSION].value, configs[HEARTBEAT].value) == ("50000", "6000")
    assert alter({HEARTBEAT: "7000"}) == ErrorCode.NONE
    configs = describe(admin(kafka_broker), ResourceType.GROUP, "legacy-group")
    assert configs[SESSION].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs[HEARTBEAT].value == "7000"
    # A session timeout not above the heartbeat interval is refused (GroupConfig's rule).
    assert alter({SESSION: "45000", HEARTBEAT: "45000"}) == ErrorCode.INVALID_CONFIG


def test_unserved_resource_types_are_refused_one_by_one(kafka_broker):
    # CLIENT_METRICS (16) is not served here, 64 is no type at all, and a GROUP needs a
    # name: each gets its own error, and the topic and the log levels (BROKER_LOGGER, 8)
    # between them their configs.
    client = admin(kafka_broker)
    create(client, "beside")
    resources = [
        DescribeConfigsResource(resource_type=16, resource_name="sub", configuration_keys=None),
        DescribeConfigsResource(resource_type=2, resource_name="beside", configuration_keys=None),
        DescribeConfigsResource(resource_type=8, resource_name="1", configuration_keys=None),
        DescribeConfigsResource(resource_type=64, resource_name="x", configuration_keys=None),
        DescribeConfigsResource(resource_type=32, resource_name="", configuration_keys=None),
        DescribeConfigsResource(resource_type=32, resource_name="g", configuration_keys=[SESSION]),
    ]
    response = raw(
        kafka_broker,
        32,
        4,
        resources=resources,
        include_synonyms=False,
        include_documentation=False,
    )
    got = [(r.resource_type, r.error_code, r.error_message) for r in response.results]
    assert got == [
        (16, ErrorCode.INVALID_REQUEST, "Unsupported resource type: CLIENT_METRICS"),
        (2, ErrorCode.NONE, None),
        (8, ErrorCode.NONE, None),
        (64, ErrorCode.INVALID_REQUEST, "Unsupported resource type: UNKNOWN"),
        (32, ErrorCode.INVALID_REQUEST, "Group name must not be empty"),
        (32, ErrorCode.NONE, None),
    ]
    topic, group = response.results[1], response.results[5]
    assert "cleanup.policy" in {c.name for c in topic.configs}
    assert [(c.name, c.value) for c in group.configs] == [(SESSION, "45000")]

    response = raw(
        kafka_broker,
        44,
        1,
        resources=[
            IncAlterConfigsResource(
                resource_type=kind,
                resource_name=name,
                configs=[IncAlterableConfig(name=key, config_operation=0, value=value)],
            )
            for kind, name, key, value in (
                (16, "sub", "interval.ms", "1000"),
                (2, "beside", "retention.ms", "1234"),
                (32, "g", HEARTBEAT, "6000"),
            )
        ],
        validate_only=False,
    )
    assert [r.error_code for r in response.responses] == [
        ErrorCode.INVALID_REQUEST,
        ErrorCode.NONE,
        ErrorCode.NONE,
    ]
    assert describe(client, ResourceType.TOPIC, "beside")["retention.ms"].value == "1234"
    assert describe(client, ResourceType.GROUP, "g")[HEARTBEAT].value == "6000"
