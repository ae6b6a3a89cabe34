"""Broker configuration the Kafka way: Java-style properties with Kafka's key names.

One table (`BROKER_CONFIGS`) says every key the broker knows (every broker key of Kafka
3.9, and a few of its own): its type, default, validation, documentation, whether Kafka
changes it at runtime (`dynamic`) and whether this broker acts on it (`acts`; the others
are stored and described only). `BrokerConfig` is the validated, typed result; its
attribute names are Kafka's key names with dots as underscores
(`num.network.threads` -> `num_network_threads`). DescribeConfigs reads the same table,
so what the broker reports is what it runs with.

The table is kept by area, as Kafka's config classes are:

- `keys`: `ConfigKey`, `Listener`, `ConfigError` and the shared parsers and validators
- `server`: identity, listeners, threads, connection limits (`SocketServerConfigs`)
- `log`: topic defaults and the log (`ServerLogConfigs`, `CleanerConfig`)
- `groups`: `__consumer_offsets` and groups (`GroupCoordinatorConfig`)
- `transactions`: `__transaction_state` and producer ids (`TransactionStateManagerConfigs`)
- `zookeeper`: the ZooKeeper session and the broker's rack (`ZkConfigs`)
- `kraft`: KRaft roles, the controller quorum, the metadata log (`KRaftConfigs`,
  `QuorumConfig`): accepted and described, not acted on
- `remote_storage`: tiered storage (`RemoteLogManagerConfig`): accepted and described, not
  acted on
- `replication`: the controller, followers and the ISR (`ReplicationConfigs`)
- `quotas`: replication throttles and quota windows (`QuotaConfigs`)
- `auth`: security protocols, TLS, SASL, the authorizer (`BrokerSecurityConfigs`)
- `operations`: the Prometheus endpoint and the request log
- `broker_config`: `BROKER_CONFIGS` and `BrokerConfig` (`KafkaConfig`)
- `listener_overrides`: a key set for one listener (`listener.name.<l>.<key>`)
- `properties`: reading `.properties` files

The bottom layer: it imports nothing else of the broker (tests/test_layering.py).

Import the names from here (`from trio_broker.config import BrokerConfig`), not from the
modules.
"""

from __future__ import annotations

from trio_broker.config.broker_config import (
    BROKER_CONFIGS,
    INERT_NOTE,
    BrokerConfig,
    broker_config_key,
)
from trio_broker.config.keys import CLUSTER_WIDE, PER_BROKER, ConfigError, ConfigKey, Listener
from trio_broker.config.properties import load_properties, parse_properties
from trio_broker.config.quotas import UNLIMITED_RATE
from trio_broker.config.replication import LEADER_SELECTOR, RACK_AWARE_REPLICA_SELECTOR
from trio_broker.config.server import new_cluster_id

__all__ = [
    "BROKER_CONFIGS",
    "CLUSTER_WIDE",
    "INERT_NOTE",
    "PER_BROKER",
    "LEADER_SELECTOR",
    "RACK_AWARE_REPLICA_SELECTOR",
    "UNLIMITED_RATE",
    "BrokerConfig",
    "ConfigError",
    "ConfigKey",
    "Listener",
    "broker_config_key",
    "load_properties",
    "new_cluster_id",
    "parse_properties",
]

# The classes keep the name they had before the package was split, so a traceback still
# reads `trio_broker.config.ConfigError: invalid value ...` (as trio does for its own).
for _cls in (BrokerConfig, ConfigError, ConfigKey, Listener):
    _cls.__module__ = __name__
del _cls
