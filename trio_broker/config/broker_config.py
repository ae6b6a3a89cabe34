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
from trio_broker.config.kraft import KRAFT_CONFIGS
from trio_broker.config.log import LOG_CONFIGS, derived_log_times
from trio_broker.config.operations import OPERATIONS_CONFIGS
from trio_broker.config.quotas import CLIENT_QUOTA_CONFIGS, REPLICATION_QUOTA_CONFIGS
from trio_broker.config.remote_storage import REMOTE_STORAGE_CONFIGS
from trio_broker.config.replication import REPLICATION_CONFIGS
from trio_broker.config.server import SERVER_CONFIGS
from trio_broker.config.transactions import TRANSACTION_CONFIGS
from trio_broker.config.zookeeper import ZOOKEEPER_CONFIGS

# The package's name, as before it was split into modules: log lines read
# "trio_broker.config: unknown configuration key ...".
logger = logging.getLogger("trio_broker.config")

__all__ = ["BROKER_CONFIGS", "BrokerConfig", "INERT_NOTE", "broker_config_key"]


# The order is the order DescribeConfigs and describe() list them in; keep it when adding keys.
BROKER_CONFIGS: tuple[ConfigKey, ...] = (
    *SERVER_CONFIGS,
    *LOG_CONFIGS,
    *REMOTE_STORAGE_CONFIGS,
    *GROUP_COORDINATOR_CONFIGS,
    *TRANSACTION_CONFIGS,
    *ZOOKEEPER_CONFIGS,
    *KRAFT_CONFIGS,
    *REPLICATION_CONFIGS,
    *REPLICATION_QUOTA_CONFIGS,
    *SECURITY_CONFIGS,
    *AUTHORIZER_CONFIGS,
    *CLIENT_QUOTA_CONFIGS,
    *ACL_CONFIGS,
    *OPERATIONS_CONFIGS,
)

_BY_NAME: dict[str, ConfigKey] = {k.name: k for k in BROKER_CONFIGS}
# Other names a properties file may use: Kafka's old name for node.id, and this broker's
# earlier name for log.segment.delete.delay.ms (the topic key's name).
_ALIASES = {"broker.id": "node.id", "file.delete.delay.ms": "log.segment.delete.delay.ms"}

# What the broker log says, once per broker, when a key it does not act on is set.
INERT_NOTE = (
    "config %s is set (%s) and stored, but this broker does not act on it: DescribeConfigs "
    "reports it and nothing else reads it"
)


def broker_config_key(name: str) -> ConfigKey | None:
    """The broker key `name` (or one of its other names) stands for, or None."""
    return _BY_NAME.get(_ALIASES.get(name, name))


def _make_config_class() -> type:
    # Only the keys the broker acts on are attributes: attrs compiles a class's methods, and
    # a few hundred fields would cost tens of milliseconds at every start. The keys it only
    # stores live in `stored` (name -> typed value, absent while at its default).
    these = {k.attr: attrs.field(default=k.default) for k in BROKER_CONFIGS if k.acts}
    these["stored"] = attrs.field(factory=dict)
    these["unknown"] = attrs.field(factory=dict)
    # The keys the properties named (server.properties, --override): Kafka's
    # STATIC_BROKER_CONFIG source, even when set to the default value.
    these["static_keys"] = attrs.field(factory=frozenset)
    # The broker's cluster.dynamic_broker_config.DynamicBrokerConfig once it has dynamic
    # configs: their values replace the static ones in this object (see that module).
    these["dynamic"] = attrs.field(default=None, eq=False, repr=False)
    # The keys the broker does not act on that it has said so about (INERT_NOTE).
    these["noted"] = attrs.field(factory=set, eq=False, repr=False)
    return attrs.make_class("_BrokerConfigBase", these, frozen=True, kw_only=True)


class BrokerConfig(_make_config_class()):  # type: ignore[misc]
    """The broker's validated configuration; attributes are Kafka key names with `_` for `.`
    (for the keys the broker acts on; `value(name)` reads any key).

    Build it from properties with `BrokerConfig.from_properties(mapping)` (validates and
    names the key of a bad value), or directly: `BrokerConfig(log_dirs=(str(tmp),))`.
    """

    __slots__ = ()

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], *, warn_unknown: bool = True
    ) -> BrokerConfig:
        given: dict[str, Any] = {}
        unknown: dict[str, str] = {}
        for raw_key, text in props.items():
            spec = broker_config_key(raw_key)
            if spec is None:
                # Per-listener settings (listener.name.<l>.<key>) are read by the listener.
                if warn_unknown and not raw_key.startswith("listener.name."):
                    logger.warning("unknown configuration key %s (ignored)", raw_key)
                unknown[raw_key] = text
                continue
            try:
                given[spec.name] = spec.convert(text)
            except ValueError as exc:
                raise ConfigError(
                    f"invalid value {text!r} for configuration {spec.name}: {exc}"
                ) from None
        values = {**given, **derived_log_times(given)}
        config = cls(
            unknown=unknown,
            static_keys=frozenset(given),
            stored={n: v for n, v in values.items() if not _BY_NAME[n].acts},
            **{_BY_NAME[n].attr: v for n, v in values.items() if _BY_NAME[n].acts},
        )
        for name in given:
            config.note_inert(name, "in the broker's properties")
        return config

    def value(self, name: str) -> Any:
        """A value by Kafka key name, e.g. `config.value("log.retention.ms")`."""
        spec = _BY_NAME[_ALIASES.get(name, name)]
        if spec.acts:
            return getattr(self, spec.attr)
        return self.stored.get(spec.name, spec.default)

    def set_value(self, name: str, value: Any) -> None:
        """Change a key in place: dynamic broker configs do (cluster/dynamic_broker_config.py)."""
        spec = _BY_NAME[name]
        if spec.acts:
            object.__setattr__(self, spec.attr, value)
        elif value == spec.default:
            self.stored.pop(name, None)
        else:
            self.stored[name] = value

    def is_default(self, name: str) -> bool:
        spec = _BY_NAME[_ALIASES.get(name, name)]
        return spec.name not in self.static_keys and self.value(spec.name) == spec.default

    def note_inert(self, name: str, how: str, *, acts: bool | None = None) -> None:
        """Say at INFO, once per broker, that a key it does not act on was set. `name` is a
        broker key, or any label with `acts` given (a topic key: "topic config preallocate")."""
        if acts is None:
            spec = _BY_NAME.get(name)
            acts = spec is None or spec.acts
        if acts or name in self.noted:
            return
        self.noted.add(name)
        logger.info(INERT_NOTE, name, how)

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
            yield spec, self.value(spec.name)
