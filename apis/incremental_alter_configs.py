"""IncrementalAlterConfigs (key 44): SET, DELETE, APPEND and SUBTRACT single topic keys.

Unlike AlterConfigs, keys the request does not name keep their overrides. APPEND and
SUBTRACT work on LIST keys only, starting from the topic's override or, without one, the
value in effect; the result is validated as a whole before anything is applied.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

from trio_broker.apis.alter_configs import (
    answer_each,
    apply_topic_configs,
    existing_topic,
    refuse_broker_change,
)
from trio_broker.apis.config_entries import ResourceType
from trio_broker.cluster.topic_config import BY_NAME, effective_value, format_value
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.incremental_alter_configs_response import (
    AlterConfigsResourceResponse,
    IncrementalAlterConfigsResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.protocol._generated.incremental_alter_configs_request import (
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


def _topic_overrides(broker: Broker, resource: AlterConfigsResource) -> dict[str, str | None]:
    topic = existing_topic(broker, resource.resource_name)
    overrides: dict[str, str | None] = dict(topic.configs)
    for c in resource.configs:
        spec = BY_NAME.get(c.name)
        if spec is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {c.name}")
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
            if spec.type != "LIST":
                verb = "append" if op == OpType.APPEND else "subtract"
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG,
                    f"Config value {verb} is not allowed for config key: {c.name}",
                )
            current = overrides.get(c.name)
            if current is None:
                current = format_value(effective_value(spec, {}, broker.config))
            old = _list(current)
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


def _alter(broker: Broker, resource: AlterConfigsResource, validate_only: bool) -> None:
    names = [c.name for c in resource.configs]
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    kind = resource.resource_type
    if kind == ResourceType.TOPIC:
        overrides = _topic_overrides(broker, resource)
        apply_topic_configs(broker, resource.resource_name, overrides, validate_only)
    elif kind == ResourceType.BROKER:
        refuse_broker_change(broker, resource.resource_name, names)
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {kind}")


async def handle(broker: Broker, request: Request) -> IncrementalAlterConfigsResponse:
    return IncrementalAlterConfigsResponse(
        responses=answer_each(broker, request.body, _alter, AlterConfigsResourceResponse)
    )
