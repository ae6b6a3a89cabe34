"""IncrementalAlterConfigs (key 44): SET, DELETE, APPEND and SUBTRACT single topic,
group and dynamic broker keys, and SET and DELETE log levels (BROKER_LOGGER,
apis/broker_logger.py).

Unlike AlterConfigs, keys the request does not name keep their overrides. APPEND and
SUBTRACT work on every LIST key only (INVALID_CONFIG on any other), starting from the
resource's override or, without one, the value in effect; the result is validated as a
whole before anything is applied.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import IntEnum
from typing import TYPE_CHECKING

from trio_broker.apis.alter_configs import (
    answer_each,
    apply_group_configs,
    apply_topic_configs,
    existing_topic,
)
from trio_broker.apis.broker_logger import alter_broker_loggers
from trio_broker.apis.config_entries import (
    ResourceType,
    check_broker_resource,
    check_group_resource,
    format_broker_value,
    unsupported_resource,
)
from trio_broker.cluster import topic_config
from trio_broker.cluster.groups import group_config
from trio_broker.config import broker_config_key
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.incremental_alter_configs_response import (
    AlterConfigsResourceResponse,
    IncrementalAlterConfigsResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.protocol._generated.incremental_alter_configs_request import (
        AlterableConfig,
        AlterConfigsResource,
    )
    from trio_broker.server.requests import Request


class OpType(IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def _list(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def apply_ops(
    overrides: dict[str, str | None],
    configs: Iterable[AlterableConfig],
    key_type: Callable[[str], str],
    in_effect: Callable[[str], str],
) -> dict[str, str | None]:
    """Kafka's prepareIncrementalConfigs over one resource's overrides.

    `key_type(name)` gives a key's ConfigDef type (raising INVALID_CONFIG for an unknown
    key); `in_effect(name)` the value APPEND and SUBTRACT start from when the resource has
    no override. Subtracting every element leaves the empty list, a value like any other."""
    for c in configs:
        kind = key_type(c.name)
        op = c.config_operation
        if op == OpType.SET:
            if c.value is None:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST, f"Null value not supported for : {c.name}"
                )
            overrides[c.name] = c.value
        elif op == OpType.DELETE:
            overrides.pop(c.name, None)
        elif op in (OpType.APPEND, OpType.SUBTRACT):
            if kind != "LIST":
                verb = "append" if op == OpType.APPEND else "subtract"
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG,
                    f"Config value {verb} is not allowed for config key: {c.name}",
                )
            current = overrides.get(c.name)
            old = _list(in_effect(c.name) if current is None else current)
            given = _list(c.value or "")
            if op == OpType.APPEND:
                new = old + [v for v in given if v not in old]
            else:
                new = [v for v in old if v not in given]
            overrides[c.name] = ",".join(new)
        else:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST, f"Unknown config operation {op} for {c.name}"
            )
    return overrides


def _topic_key_type(name: str) -> str:
    spec = topic_config.BY_NAME.get(name)
    if spec is None:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
    return spec.type


def _broker_key_type(name: str) -> str:
    spec = broker_config_key(name)
    if spec is None:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown broker config: {name}")
    return spec.type


def _group_key_type(name: str) -> str:
    spec = group_config.BY_NAME.get(name)
    if spec is None:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {name}")
    return spec.type


def _alter(broker: Broker, resource: AlterConfigsResource, validate_only: bool) -> None:
    names = [c.name for c in resource.configs]
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    kind, name = resource.resource_type, resource.resource_name
    if kind == ResourceType.TOPIC:
        topic = existing_topic(broker, name)

        def topic_default(key: str) -> str:
            spec = topic_config.BY_NAME[key]
            return topic_config.format_value(topic_config.default_value(spec, broker.config))

        overrides = apply_ops(dict(topic.configs), resource.configs, _topic_key_type, topic_default)
        apply_topic_configs(broker, name, overrides, validate_only)
    elif kind == ResourceType.BROKER:
        check_broker_resource(broker, name)
        dynamic = broker.dynamic_config

        def broker_in_effect(key: str) -> str:
            return format_broker_value(broker.config.value(key)) or ""

        overrides = apply_ops(
            dict(dynamic.level(name)), resource.configs, _broker_key_type, broker_in_effect
        )
        dynamic.replace(name, overrides, validate_only)
    elif kind == ResourceType.GROUP:
        check_group_resource(name)

        def group_default(key: str) -> str:  # no group key is a LIST: never called today
            return str(group_config.group_config_values({}, broker.config)[key])

        current = dict(broker.metadata.group_configs.get(name, {}))
        overrides = apply_ops(current, resource.configs, _group_key_type, group_default)
        apply_group_configs(broker, name, overrides, validate_only)
    elif kind == ResourceType.BROKER_LOGGER:
        alter_broker_loggers(broker, name, resource.configs, validate_only)
    else:
        raise unsupported_resource(kind)


async def handle(broker: Broker, request: Request) -> IncrementalAlterConfigsResponse:
    responses = answer_each(broker, request.body, _alter, AlterConfigsResourceResponse)
    if broker.topics.zk_topics is not None:  # a cluster: the writes to ZooKeeper are done
        await broker.topics.zk_topics.config_writes_done()
        await broker.zk_broker_configs.writes_done()
        await broker.zk_group_configs.writes_done()
    return IncrementalAlterConfigsResponse(responses=responses)
