"""AlterConfigs (key 33): replace a topic's (or a group's) whole set of overrides.

The legacy API: the configs in the request become the resource's overrides, and every key
not named goes back to its default. For a BROKER resource the overrides are the dynamic
broker configs of that level (cluster/dynamic_broker_config.py); a key Kafka cannot change
at runtime is refused as Kafka refuses it (INVALID_REQUEST, "Cannot update these configs
dynamically").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from trio_broker.apis.config_entries import (
    ResourceType,
    check_broker_resource,
    check_group_resource,
    unsupported_resource,
)
from trio_broker.cluster.groups.group_config import validate_group_configs
from trio_broker.cluster.topic_config import validate_topic_configs
from trio_broker.cluster.topics import validate_topic_name
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.alter_configs_response import (
    AlterConfigsResourceResponse,
    AlterConfigsResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.cluster.metadata import TopicState
    from trio_broker.server.requests import Request

__all__ = [
    "apply_group_configs",
    "apply_topic_configs",
    "existing_topic",
    "refuse_broker_change",
    "handle",
]


def existing_topic(broker: Broker, name: str) -> TopicState:
    validate_topic_name(name)
    topic = broker.metadata.topics.get(name)
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist.")
    return topic


def apply_topic_configs(
    broker: Broker, name: str, overrides: Mapping[str, str | None], validate_only: bool
) -> None:
    """Validate the topic's complete new override set, then (unless validate_only) apply it."""
    validate_topic_configs(overrides, broker.config)
    if not validate_only:
        broker.topics.set_topic_configs(name, {k: v for k, v in overrides.items() if v is not None})


def apply_group_configs(
    broker: Broker, name: str, overrides: Mapping[str, str | None], validate_only: bool
) -> None:
    """Validate a group's complete new override set, then (unless validate_only) store it
    in the cluster metadata, which persists it: a lone broker's in its metadata file, a
    cluster's in ZooKeeper (cluster/zookeeper/group_configs.py), for every broker."""
    check_group_resource(name)
    configs = validate_group_configs(overrides, broker.config)
    if validate_only:
        return
    if configs:
        broker.metadata.group_configs[name] = configs
    else:
        broker.metadata.group_configs.pop(name, None)
    shared = getattr(broker, "zk_group_configs", None)
    if shared is not None:
        shared.write(name, configs)
    else:
        broker.metadata.save()


def refuse_broker_change(broker: Broker, name: str, keys: Iterable[str]) -> None:
    check_broker_resource(broker, name)
    keys = sorted(keys)
    if keys:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Cannot update these configs dynamically: Set({', '.join(keys)})",
        )


def duplicate_resources(resources: Iterable[object]) -> set[tuple[int, str]]:
    counts = Counter((r.resource_type, r.resource_name) for r in resources)  # type: ignore[attr-defined]
    return {k for k, n in counts.items() if n > 1}


def alter_one(broker: Broker, resource: object, validate_only: bool) -> None:
    configs: dict[str, str | None] = {}
    for c in resource.configs:  # type: ignore[attr-defined]
        if c.name in configs:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
        configs[c.name] = c.value
    kind, name = resource.resource_type, resource.resource_name  # type: ignore[attr-defined]
    if kind == ResourceType.TOPIC:
        existing_topic(broker, name)
        apply_topic_configs(broker, name, configs, validate_only)
    elif kind == ResourceType.BROKER:
        # The whole dynamic level (this broker's, or the cluster default "") becomes configs.
        check_broker_resource(broker, name)
        broker.dynamic_config.replace(name, configs, validate_only)
    elif kind == ResourceType.GROUP:
        apply_group_configs(broker, name, configs, validate_only)
    else:
        raise unsupported_resource(kind)


def answer_each(broker: Broker, body: Any, alter: Any, response_cls: type) -> list[Any]:
    """Apply `alter` to every resource of an (Incremental)AlterConfigs request; one answer
    per resource, with duplicates refused as Kafka does."""
    duplicates = duplicate_resources(body.resources)
    responses = []
    for resource in body.resources:
        try:
            if (resource.resource_type, resource.resource_name) in duplicates:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate resource.")
            alter(broker, resource, body.validate_only)
        except KafkaError as exc:
            code, message = exc.code, exc.message or exc.code.name
        else:
            code, message = ErrorCode.NONE, None
        responses.append(
            response_cls(
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return responses


async def handle(broker: Broker, request: Request) -> AlterConfigsResponse:
    responses = answer_each(broker, request.body, alter_one, AlterConfigsResourceResponse)
    if broker.topics.zk_topics is not None:  # a cluster: the writes to ZooKeeper are done
        await broker.topics.zk_topics.config_writes_done()
        await broker.zk_broker_configs.writes_done()
        await broker.zk_group_configs.writes_done()
    return AlterConfigsResponse(responses=responses)
