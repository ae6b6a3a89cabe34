"""Dynamic broker configs (Kafka's DynamicBrokerConfig): AlterConfigs and
IncrementalAlterConfigs on BROKER resources, applied without a restart.

Two levels over the static configuration, most specific first, as Kafka resolves them:

    DYNAMIC_BROKER_CONFIG          this broker (resource name "<node.id>")
    DYNAMIC_DEFAULT_BROKER_CONFIG  the cluster-wide default (resource name "")
    STATIC_BROKER_CONFIG           server.properties / --override
    DEFAULT_CONFIG                 the key's default

A lone broker keeps both levels in `<first log dir>/dynamic-broker-configs.json` (its
stand-in for ZooKeeper's /config/brokers/<id> and /config/brokers/<default>) and applies
them at start before anything reads the configuration; a cluster's live in ZooKeeper
(cluster/zookeeper/broker_configs.py, the `store`), where every broker follows them.

Applying a change updates the broker's `BrokerConfig` object in place (the one place that
does), so every component holding it reads the new value at its next use; the keys whose
value lives elsewhere are pushed there: the logs' LogConfigs (log.*, message.max.bytes,
min.insync.replicas, producer.id.expiration.ms), the handler pool (num.io.threads), the
connection quotas (max.connections*), the processors (num.network.threads) and the log
cleaner (log.cleaner.backoff.ms). The replication quotas' rates (*.replication.throttled.rate,
replica.alter.log.dirs.io.max.bytes.per.second) are read from the config at each use.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trio_broker.config import BROKER_CONFIGS, CLUSTER_WIDE, PER_BROKER, BrokerConfig
from trio_broker.config.log import derived_log_times
from trio_broker.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from trio_broker.broker import Broker

logger = logging.getLogger(__name__)

__all__ = [
    "APPLIED_LIVE",
    "CLUSTER_WIDE_KEYS",
    "DynamicBrokerConfig",
    "KAFKA_DYNAMIC_KEYS",
    "LISTENER_ONLY_KEYS",
    "PER_BROKER_KEYS",
]

FILE_NAME = "dynamic-broker-configs.json"
_BY_NAME = {k.name: k for k in BROKER_CONFIGS}

# Kafka's dynamic keys, from the key table: "cluster-wide" ones may be set per broker or at
# the cluster default, "per-broker" ones per broker only. DescribeConfigs reports exactly
# these with read_only=false.
CLUSTER_WIDE_KEYS = frozenset(k.name for k in BROKER_CONFIGS if k.dynamic == CLUSTER_WIDE)
PER_BROKER_KEYS = frozenset(k.name for k in BROKER_CONFIGS if k.dynamic == PER_BROKER)
KAFKA_DYNAMIC_KEYS = CLUSTER_WIDE_KEYS | PER_BROKER_KEYS
# Kafka's TLS key and trust store keys, dynamic only per listener
# (listener.name.<l>.ssl.keystore.location), which this broker does not take yet.
LISTENER_ONLY_KEYS = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.truststore.certificates",
    }
)
# The keys the broker acts on whose new value it applies while running: the log defaults
# topics inherit (and the other names of the retention and roll times), the thread pools,
# the connection quotas, the cleaner's backoff, the replication quotas' rates (read at each
# use) and unclean leader election (read by the controller at each election).
_PUSHED = frozenset(
    {
        "log.cleaner.backoff.ms",
        "log.cleaner.delete.retention.ms",
        "log.cleaner.min.cleanable.ratio",
        "log.cleaner.min.compaction.lag.ms",
        "log.cleanup.policy",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.index.interval.bytes",
        "log.index.size.max.bytes",
        "log.message.timestamp.type",
        "log.retention.bytes",
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
        "log.roll.ms",
        "log.roll.hours",
        "log.segment.bytes",
        "log.segment.delete.delay.ms",
        "message.max.bytes",
        "min.insync.replicas",
        "num.io.threads",
        "num.network.threads",
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        "max.connection.creation.rate",
        "producer.id.expiration.ms",
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
        "replica.alter.log.dirs.io.max.bytes.per.second",
        "unclean.leader.election.enable",
    }
)
# What this broker can change while running: the keys above and every dynamic key it only
# stores. The rest of Kafka's dynamic keys (listeners, TLS, SASL, num.replica.fetchers) are
# refused with a message saying so.
APPLIED_LIVE = _PUSHED | frozenset(k for k in KAFKA_DYNAMIC_KEYS if not _BY_NAME[k].acts)
# The keys derived from others (log.retention.ms from log.retention.hours, ...).
_DERIVED = ("log.retention.ms", "log.roll.ms")

_LOG_KEYS = frozenset(
    {k for k in _PUSHED if k.startswith("log.")}
    | {"message.max.bytes", "min.insync.replicas", "producer.id.expiration.ms"}
)
_QUOTA_KEYS = frozenset(
    {
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        "max.connection.creation.rate",
    }
)


def _invalid(message: str) -> KafkaError:
    # Kafka answers a bad broker config change with INVALID_REQUEST (InvalidRequestException).
    return KafkaError(ErrorCode.INVALID_REQUEST, message)


class DynamicBrokerConfig:
    """The dynamic levels of one broker's configuration; see the module docstring."""

    def __init__(self, config: BrokerConfig, log_dir: Path) -> None:
        self.config = config
        self.path = Path(log_dir) / FILE_NAME
        # The static values, before any dynamic value replaces them in `config` (a config
        # object served before, e.g. by a restarted broker, still knows its own).
        prior = config.dynamic
        self.static: dict[str, Any] = (
            dict(prior.static)
            if prior is not None
            else {spec.name: value for spec, value in config.describe()}
        )
        self.per_broker: dict[str, str] = {}
        self.default: dict[str, str] = {}
        self.broker: Broker | None = None
        # In a cluster, ZooKeeper (cluster/zookeeper/broker_configs.py) instead of the file.
        self.store: Any = None
        # The config carries its layers, so DescribeConfigs can name each value's source.
        object.__setattr__(config, "dynamic", self)

    # -- persistence ------------------------------------------------------------------

    def load(self) -> None:
        """Read the stored levels and apply them (at start, before anything runs)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            logger.error("cannot read %s (%s); dynamic broker configs ignored", self.path, exc)
            return
        for level, target in (("broker", self.per_broker), ("default", self.default)):
            for key, text in dict(data.get(level, {})).items():
                try:
                    self._check_value(key, text)
                except KafkaError as exc:
                    logger.error("dynamic broker config %s ignored: %s", key, exc.message)
                    continue
                target[key] = text
        self.apply(initial=True)

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        text = json.dumps({"broker": self.per_broker, "default": self.default}, indent=1)
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    # -- reading ----------------------------------------------------------------------

    def level(self, resource_name: str) -> dict[str, str]:
        return self.default if resource_name == "" else self.per_broker

    def effective_text(self, key: str) -> str | None:
        if key in self.per_broker:
            return self.per_broker[key]
        return self.default.get(key)

    # -- changing ---------------------------------------------------------------------

    def _check_value(self, key: str, text: str | None) -> Any:
        spec = _BY_NAME.get(key)
        if spec is None:
            raise _invalid(f"Unknown broker config: {key}")
        if text is None:
            return None
        try:
            value = spec.convert(text)
        except ValueError as exc:
            raise _invalid(f"Invalid value {text} for configuration {key}: {exc}") from None
        return value

    def check(self, resource_name: str, overrides: Mapping[str, str | None]) -> None:
        """Kafka's validation of a whole new level: every key dynamic, allowed at this
        level, and valid."""
        unknown = sorted(k for k in overrides if k not in _BY_NAME)
        if unknown:
            raise _invalid(f"Unknown broker configs: {', '.join(unknown)}")
        static = sorted(k for k in overrides if k not in KAFKA_DYNAMIC_KEYS)
        if static:
            raise _invalid(f"Cannot update these configs dynamically: Set({', '.join(static)})")
        listener_only = sorted(k for k in overrides if k in LISTENER_ONLY_KEYS)
        if listener_only:
            raise _invalid(
                "These security configs can be dynamically updated only per-listener using "
                f"the listener prefix: Set({', '.join(listener_only)})"
            )
        if resource_name == "":
            per_broker = sorted(k for k in overrides if k in PER_BROKER_KEYS)
            if per_broker:
                raise _invalid(
                    "Cannot update these configs at default cluster level, broker id must be "
                    f"specified: Set({', '.join(per_broker)})"
                )
        not_live = sorted(k for k in overrides if k not in APPLIED_LIVE)
        if not_live:
            raise _invalid(
                "This broker cannot change these configs while running yet (set them in "
                f"server.properties and restart): Set({', '.join(not_live)})"
            )
        for key, text in overrides.items():
            self._check_value(key, text)

    def replace(
        self, resource_name: str, overrides: Mapping[str, str | None], validate_only: bool
    ) -> None:
        """Make `overrides` the whole dynamic level `resource_name` ("" or this broker's
        id), persist it and apply it."""
        self.check(resource_name, overrides)
        if validate_only:
            return
        level = self.level(resource_name)
        level.clear()
        level.update({k: v for k, v in overrides.items() if v is not None})
        if self.store is not None:
            self.store.write(resource_name, level)
        else:
            self.save()
        self.apply()

    def set_level(self, resource_name: str, config: Mapping[str, str]) -> None:
        """A level as ZooKeeper holds it (written by any broker): keep its valid keys, apply."""
        level = self.level(resource_name)
        fresh = {}
        for key, text in config.items():
            try:
                self._check_value(key, str(text))
            except KafkaError as exc:
                logger.error("dynamic broker config %s ignored: %s", key, exc.message)
                continue
            fresh[key] = str(text)
        if fresh != level:
            level.clear()
            level.update(fresh)
            self.apply()

    def apply(self, *, initial: bool = False) -> None:
        """Set every dynamic key's effective value in the config; push the changed ones."""
        config = self.config
        # Every key set at some level, with its value there, for the derived keys: Kafka
        # reads log.retention.hours only when no level sets log.retention.ms.
        given = {k: self.static[k] for k in config.static_keys}
        values: dict[str, Any] = {}
        for key in KAFKA_DYNAMIC_KEYS:
            text = self.effective_text(key)
            if text is None:
                values[key] = self.static[key]
            else:
                values[key] = given[key] = _BY_NAME[key].parse(text)
                config.note_inert(key, "as a dynamic broker config")
        for key, value in derived_log_times(given).items():
            if key in _DERIVED:
                values[key] = value
        changed = set()
        for key, value in values.items():
            if config.value(key) != value:
                config.set_value(key, value)
                changed.add(key)
        if changed and not initial:
            logger.info("dynamic broker configs changed: %s", ", ".join(sorted(changed)))
            self._push(changed)

    def _push(self, changed: set[str]) -> None:
        broker = self.broker
        if broker is None:
            return
        config = self.config
        if changed & _LOG_KEYS:
            from trio_broker.cluster.topic_config import resolve_log_config

            manager = broker.log_manager
            manager.default_config = resolve_log_config({}, config)
            for (topic, _partition), log in list(manager.logs.items()):
                state = broker.metadata.topics.get(topic)
                overrides = state.configs if state is not None else {}
                log.update_config(resolve_log_config(overrides, config))
        if "num.network.threads" in changed and broker.socket_server is not None:
            broker.socket_server.resize_processors(config.num_network_threads)
        if "num.io.threads" in changed:
            pool = getattr(broker, "handler_pool", None)
            if pool is not None:
                pool.resize(config.num_io_threads)
        if changed & _QUOTA_KEYS:
            server = getattr(broker, "socket_server", None)
            if server is not None:
                from trio_broker.server.connection_quotas import ConnectionQuotas

                fresh = ConnectionQuotas(
                    max_connections=config.max_connections,
                    max_connections_per_ip=config.max_connections_per_ip,
                    overrides=config.max_connections_per_ip_overrides,
                    max_connection_creation_rate=config.max_connection_creation_rate,
                )
                quotas = server.quotas
                quotas.max_connections = fresh.max_connections
                quotas.max_connections_per_ip = fresh.max_connections_per_ip
                quotas.overrides = fresh.overrides
                if quotas.rate != fresh.rate:
                    quotas.rate = fresh.rate
                    quotas._tokens = float(fresh.rate)
        if "log.cleaner.backoff.ms" in changed:
            for service in broker.services:
                if type(service).__name__ == "LogCleaner":
                    service.backoff_ms = config.log_cleaner_backoff_ms
