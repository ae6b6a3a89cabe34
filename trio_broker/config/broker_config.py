"""`BrokerConfig`, the broker's validated configuration, and `BROKER_CONFIGS`, every key it has.

Kafka's `KafkaConfig` and its `ConfigDef`: the area modules' tables joined into one, in the
order DescribeConfigs and `describe()` list them, and a frozen attrs class with one
attribute per key (Kafka's name with `_` for `.`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from trio_broker.config.auth import (
    _SECURITY_PROTOCOLS,
    ACL_CONFIGS,
    AUTHORIZER_CONFIGS,
    SECURITY_CONFIGS,
    _protocol_map,
)
from trio_broker.config.groups import GROUP_COORDINATOR_CONFIGS
from trio_broker.config.keys import ConfigError, ConfigKey
from trio_broker.config.log import LOG_CONFIGS
from trio_broker.config.operations import OPERATIONS_CONFIGS
from trio_broker.config.quotas import CLIENT_QUOTA_CONFIGS, REPLICATION_QUOTA_CONFIGS
from trio_broker.config.replication import REPLICATION_CONFIGS
from trio_broker.config.server import SERVER_CONFIGS
from trio_broker.config.transactions import TRANSACTION_CONFIGS
from trio_broker.config.zookeeper import ZOOKEEPER_CONFIGS

# The package's name, as before it was split into modules: log lines read
# "trio_broker.config: unknown configuration key ...".
logger = logging.getLogger("trio_broker.config")

__all__ = ["BROKER_CONFIGS", "BrokerConfig"]


# The order is the order DescribeConfigs answers in; keep it when adding keys.
BROKER_CONFIGS: tuple[ConfigKey, ...] = (
    *SERVER_CONFIGS,
    *LOG_CONFIGS,
    *GROUP_COORDINATOR_CONFIGS,
    *TRANSACTION_CONFIGS,
    *ZOOKEEPER_CONFIGS,
    *REPLICATION_CONFIGS,
    *REPLICATION_QUOTA_CONFIGS,
    *SECURITY_CONFIGS,
    *AUTHORIZER_CONFIGS,
    *CLIENT_QUOTA_CONFIGS,
    *ACL_CONFIGS,
    *OPERATIONS_CONFIGS,
)

_BY_NAME: dict[str, ConfigKey] = {k.name: k for k in BROKER_CONFIGS}
# Kafka's old name for node.id.
_ALIASES = {"broker.id": "node.id"}


def _make_config_class() -> type:
    these = {k.attr: attrs.field(default=k.default) for k in BROKER_CONFIGS}
    these["unknown"] = attrs.field(factory=dict)
    # The keys the properties named (server.properties, --override): Kafka's
    # STATIC_BROKER_CONFIG source, even when set to the default value.
    these["static_keys"] = attrs.field(factory=frozenset)
    # The broker's cluster.dynamic_broker_config.DynamicBrokerConfig once it has dynamic
    # configs: their values replace the static ones in this object (see that module).
    these["dynamic"] = attrs.field(default=None, eq=False, repr=False)
    return attrs.make_class("_BrokerConfigBase", these, frozen=True, kw_only=True)


class BrokerConfig(_make_config_class()):  # type: ignore[misc]
    """The broker's validated configuration; attributes are Kafka key names with `_` for `.`.

    Build it from properties with `BrokerConfig.from_properties(mapping)` (validates and
    names the key of a bad value), or directly: `BrokerConfig(log_dirs=(str(tmp),))`.
    """

    __slots__ = ()

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], *, warn_unknown: bool = True
    ) -> BrokerConfig:
        values: dict[str, Any] = {}
        unknown: dict[str, str] = {}
        for raw_key, text in props.items():
            key = _ALIASES.get(raw_key, raw_key)
            spec = _BY_NAME.get(key)
            if spec is None:
                # Per-listener settings (listener.name.<l>.<key>) are read by the listener.
                if warn_unknown and not key.startswith("listener.name."):
                    logger.warning("unknown configuration key %s (ignored)", raw_key)
                unknown[raw_key] = text
                continue
            try:
                value = spec.parse(text)
                if spec.validate is not None:
                    spec.validate(value)
            except ValueError as exc:
                raise ConfigError(
                    f"invalid value {text!r} for configuration {key}: {exc}"
                ) from None
            values[spec.attr] = value
        static = frozenset(_BY_NAME[_ALIASES.get(k, k)].name for k in props if k not in unknown)
        return cls(unknown=unknown, static_keys=static, **values)

    def value(self, name: str) -> Any:
        """A value by Kafka key name, e.g. `config.value("log.retention.ms")`."""
        return getattr(self, _BY_NAME[_ALIASES.get(name, name)].attr)

    def is_default(self, name: str) -> bool:
        spec = _BY_NAME[_ALIASES.get(name, name)]
        return spec.name not in self.static_keys and getattr(self, spec.attr) == spec.default

    def security_protocol(self, listener: str) -> str:
        """The security protocol of a listener name (listener.security.protocol.map)."""
        protocol = _protocol_map(self.listener_security_protocol_map).get(listener.upper())
        if protocol is None:
            if listener.upper() in _SECURITY_PROTOCOLS:
                return listener.upper()
            raise ConfigError(
                f"listener {listener} is not in listener.security.protocol.map "
                f"({self.listener_security_protocol_map})"
            )
        return protocol

    def describe(self) -> Iterable[tuple[ConfigKey, Any]]:
        for spec in BROKER_CONFIGS:
            yield spec, getattr(self, spec.attr)
