"""Config entries as DescribeConfigs and CreateTopics report them: value, source, synonyms.

Shared by DescribeConfigs (key 32) and CreateTopics (key 19, v5+ returns the new topic's
configs), and by the Alter*Configs handlers for the resource-level checks they have in
common. Kafka's rules: a topic key is the topic's override (TOPIC_CONFIG) if it has one,
else its broker key's value, STATIC_BROKER_CONFIG when the broker's properties set it and
DEFAULT_CONFIG otherwise. Synonyms list every level that has a value, most specific first.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import attrs

from trio_broker.cluster.groups.group_config import GROUP_CONFIGS, group_config_values
from trio_broker.cluster.topic_config import TOPIC_CONFIGS, default_value, format_value
from trio_broker.config import BROKER_CONFIGS, BrokerConfig, Listener
from trio_broker.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from trio_broker.broker import Broker

__all__ = [
    "ConfigEntry",
    "ConfigSource",
    "ResourceType",
    "broker_default_entries",
    "broker_entries",
    "check_broker_resource",
    "check_group_resource",
    "group_entries",
    "topic_entries",
    "unsupported_resource",
]


class ResourceType(IntEnum):
    """org.apache.kafka.common.config.ConfigResource.Type ids."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigSource(IntEnum):
    """DescribeConfigsResponse config_source values."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


# DescribeConfigsResponse config_type (v3+), from Kafka's ConfigDef.Type names.
CONFIG_TYPES = {
    "BOOLEAN": 1,
    "STRING": 2,
    "INT": 3,
    "SHORT": 4,
    "LONG": 5,
    "DOUBLE": 6,
    "LIST": 7,
    "CLASS": 8,
    "PASSWORD": 9,
}

_BROKER_BY_NAME = {k.name: k for k in BROKER_CONFIGS}

# Ends the documentation of a key the broker stores but does not act on.
INERT_DOC = " (Accepted, stored and described; this broker does not act on it.)"


def key_doc(doc: str, acts: bool) -> str | None:
    """A key's documentation as DescribeConfigs gives it: says so when the broker does not
    act on the key."""
    if not acts:
        return (doc + INERT_DOC).strip()
    return doc or None


@attrs.frozen(kw_only=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    type: str
    documentation: str | None
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...]


def format_broker_value(value: Any) -> str | None:
    """A broker value as Kafka prints it: lists comma separated, null stays null."""
    if value is None:
        return None
    if isinstance(value, tuple):
        return ",".join(str(v) if isinstance(v, Listener) else format_value(v) for v in value)
    return format_value(value)


def _broker_source(config: BrokerConfig, name: str) -> ConfigSource:
    return _broker_synonyms(config, name)[0][2]


def _broker_synonyms(config: BrokerConfig, name: str) -> list[tuple[str, str | None, ConfigSource]]:
    """Every level with a value for broker key `name`, most specific first: this broker's
    dynamic value, the cluster-wide dynamic default, the static value, the default."""
    spec = _BROKER_BY_NAME[name]
    out: list[tuple[str, str | None, ConfigSource]] = []
    dynamic = config.dynamic
    static_value = config.value(name)
    if dynamic is not None:
        if name in dynamic.per_broker:
            out.append((name, dynamic.per_broker[name], ConfigSource.DYNAMIC_BROKER_CONFIG))
        if name in dynamic.default:
            out.append((name, dynamic.default[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        static_value = dynamic.static[name]
    if name in config.static_keys or static_value != spec.default:
        out.append((name, format_broker_value(static_value), ConfigSource.STATIC_BROKER_CONFIG))
    out.append((name, format_broker_value(spec.default), ConfigSource.DEFAULT_CONFIG))
    return out


def topic_entries(
    broker_config: BrokerConfig, overrides: Mapping[str, str], keys: set[str] | None = None
) -> Iterator[ConfigEntry]:
    """Every topic-level key of a topic with these overrides (or only `keys`)."""
    for spec in TOPIC_CONFIGS:
        if keys is not None and spec.name not in keys:
            continue
        synonyms: list[tuple[str, str | None, ConfigSource]] = []
        if spec.name in overrides:
            synonyms.append((spec.name, overrides[spec.name], ConfigSource.TOPIC_CONFIG))
        if spec.broker_key is not None:
            synonyms += _broker_synonyms(broker_config, spec.broker_key)
            doc = spec.doc or _BROKER_BY_NAME[spec.broker_key].doc
        else:
            synonyms.append((spec.name, format_value(spec.default), ConfigSource.DEFAULT_CONFIG))
            doc = spec.doc
        name, value, source = synonyms[0]
        if source != ConfigSource.TOPIC_CONFIG:
            # Reported under the topic's key name, with the broker-level value.
            value = format_broker_value(default_value(spec, broker_config))
        yield ConfigEntry(
            name=spec.name,
            value=value,
            source=source,
            read_only=False,
            sensitive=False,
            type=spec.type,
            documentation=key_doc(doc, spec.acts),
            synonyms=tuple(synonyms),
        )


def broker_entries(broker: Broker, keys: set[str] | None = None) -> Iterator[ConfigEntry]:
    """Every broker key with its effective value and source; read-only exactly where Kafka
    cannot change the key at runtime. `broker.id` is reported too (Kafka's name of
    node.id), and `advertised.listeners` with the addresses clients are given."""
    from trio_broker.cluster.dynamic_broker_config import KAFKA_DYNAMIC_KEYS

    config = broker.config
    dynamic = config.dynamic
    # Kafka's internal keys (defineInternal) are described only where some level sets them.
    described = [
        (spec.name, spec, value)
        for spec, value in config.describe()
        if not spec.internal
        or spec.name in config.static_keys
        or (dynamic is not None and dynamic.effective_text(spec.name) is not None)
    ]
    described.append(("broker.id", _BROKER_BY_NAME["node.id"], config.node_id))
    for name, spec, value in sorted(described, key=lambda d: d[0]):
        if keys is not None and name not in keys:
            continue
        synonyms = _broker_synonyms(config, spec.name)
        if name == "broker.id":
            synonyms = [(name, v, s) for _, v, s in synonyms]
        text = format_broker_value(value)
        if name == "advertised.listeners" and not value and broker.advertised:
            text = format_broker_value(tuple(broker.advertised))
        yield ConfigEntry(
            name=name,
            value=None if spec.sensitive else text,
            source=synonyms[0][2],
            read_only=name not in KAFKA_DYNAMIC_KEYS,
            sensitive=spec.sensitive,
            type=spec.type,
            documentation=key_doc(spec.doc, spec.acts),
            synonyms=tuple((n, None if spec.sensitive else v, s) for n, v, s in synonyms),
        )


def broker_default_entries(broker: Broker, keys: set[str] | None = None) -> Iterator[ConfigEntry]:
    """The cluster-wide dynamic defaults (resource name ""): only the keys set there."""
    dynamic = broker.config.dynamic
    for name, text in sorted((dynamic.default if dynamic is not None else {}).items()):
        if keys is not None and name not in keys:
            continue
        spec = _BROKER_BY_NAME[name]
        yield ConfigEntry(
            name=name,
            value=None if spec.sensitive else text,
            source=ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
            read_only=False,
            sensitive=spec.sensitive,
            type=spec.type,
            documentation=key_doc(spec.doc, spec.acts),
            synonyms=((name, text, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),),
        )


def check_broker_resource(broker: Broker, name: str, *, allow_default: bool = True) -> None:
    """A BROKER resource must name this broker (or be "", the cluster default)."""
    if name == "" and allow_default:
        return
    if name != str(broker.node_id):
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {broker.node_id} or empty string, but received {name}",
        )


def group_entries(
    broker_config: BrokerConfig, overrides: Mapping[str, str], keys: set[str] | None = None
) -> Iterator[ConfigEntry]:
    """Every key of a GROUP resource with these overrides: the group's override
    (GROUP_CONFIG) or its broker key `group.<key>`, as Kafka 4.0 describes them."""
    values = group_config_values(overrides, broker_config)
    for spec in GROUP_CONFIGS:
        if keys is not None and spec.name not in keys:
            continue
        synonyms = (
            _broker_synonyms(broker_config, spec.broker_key)
            if spec.broker_key is not None
            else [(spec.name, spec.default, ConfigSource.DEFAULT_CONFIG)]
        )
        if spec.name in overrides:
            synonyms.insert(0, (spec.name, str(values[spec.name]), ConfigSource.GROUP_CONFIG))
        yield ConfigEntry(
            name=spec.name,
            value=str(values[spec.name]),
            source=synonyms[0][2],
            read_only=False,
            sensitive=False,
            type=spec.type,
            documentation=spec.doc,
            synonyms=tuple(synonyms),
        )


def check_group_resource(name: str) -> None:
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")


def unsupported_resource(kind: int) -> KafkaError:
    """A resource type this broker does not serve (BROKER_LOGGER, CLIENT_METRICS, or one
    Kafka does not know): refused for that resource alone, in Kafka's words."""
    try:
        label = ResourceType(kind).name
    except ValueError:
        label = "UNKNOWN"
    return KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {label}")
