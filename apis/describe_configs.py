"""DescribeConfigs (key 32): topic, broker and group configs with their sources and synonyms,
and the broker's log levels (BROKER_LOGGER, apis/broker_logger.py).

Each resource is answered on its own: a type this broker does not serve gets
INVALID_REQUEST for that resource, and the others are still described."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.apis.broker_logger import broker_logger_entries
from trio_broker.apis.config_entries import (
    CONFIG_TYPES,
    ConfigEntry,
    ConfigSource,
    ResourceType,
    broker_default_entries,
    broker_entries,
    check_broker_resource,
    check_group_resource,
    group_entries,
    topic_entries,
    unsupported_resource,
)
from trio_broker.cluster.topics import validate_topic_name
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.describe_configs_response import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


def _result(
    entry: ConfigEntry, include_synonyms: bool, include_docs: bool
) -> DescribeConfigsResourceResult:
    return DescribeConfigsResourceResult(
        name=entry.name,
        value=entry.value,
        read_only=entry.read_only,
        is_default=entry.source == ConfigSource.DEFAULT_CONFIG,
        config_source=int(entry.source),
        is_sensitive=entry.sensitive,
        synonyms=[
            DescribeConfigsSynonym(name=n, value=v, source=int(s)) for n, v, s in entry.synonyms
        ]
        if include_synonyms
        else [],
        config_type=CONFIG_TYPES.get(entry.type, 0),
        documentation=entry.documentation if include_docs else None,
    )


def _entries(
    broker: Broker, resource_type: int, name: str, keys: set[str] | None
) -> list[ConfigEntry]:
    if resource_type == ResourceType.TOPIC:
        validate_topic_name(name)
        topic = broker.metadata.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist.")
        return list(topic_entries(broker.config, topic.configs, keys))
    if resource_type == ResourceType.BROKER:
        check_broker_resource(broker, name)
        if name == "":
            return list(broker_default_entries(broker, keys))
        return list(broker_entries(broker, keys))
    if resource_type == ResourceType.GROUP:
        # Any group id has configs (its defaults until altered), existing group or not.
        check_group_resource(name)
        overrides = broker.metadata.group_configs.get(name, {})
        return list(group_entries(broker.config, overrides, keys))
    if resource_type == ResourceType.BROKER_LOGGER:
        return list(broker_logger_entries(broker, name, keys))
    raise unsupported_resource(resource_type)


async def handle(broker: Broker, request: Request) -> DescribeConfigsResponse:
    body = request.body
    # v0 has no include_synonyms field; v1+ clients ask for them explicitly.
    include_synonyms = bool(body.include_synonyms) and request.api_version >= 1
    include_docs = bool(body.include_documentation) and request.api_version >= 3
    results = []
    for resource in body.resources:
        keys = None if resource.configuration_keys is None else set(resource.configuration_keys)
        try:
            entries = _entries(broker, resource.resource_type, resource.resource_name, keys)
        except KafkaError as exc:
            results.append(
                DescribeConfigsResult(
                    error_code=exc.code,
                    error_message=exc.message or exc.code.name,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    configs=[],
                )
            )
            continue
        results.append(
            DescribeConfigsResult(
                error_code=ErrorCode.NONE,
                error_message=None,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=[_result(e, include_synonyms, include_docs) for e in entries],
            )
        )
    return DescribeConfigsResponse(results=results)
