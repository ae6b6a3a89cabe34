"""Broker configuration the Kafka way: Java-style properties with Kafka's key names.

One table (`BROKER_CONFIGS`) says every key the broker knows: its type, default,
validation and documentation. `BrokerConfig` is the validated, typed result; its
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

from trio_broker.config.broker_config import BROKER_CONFIGS, BrokerConfig
from trio_broker.config.keys import ConfigError, ConfigKey, Listener
from trio_broker.config.properties import load_properties, parse_properties
from trio_broker.config.quotas import UNLIMITED_RATE
from trio_broker.config.replication import LEADER_SELECTOR, RACK_AWARE_REPLICA_SELECTOR
from trio_broker.config.server import new_cluster_id

__all__ = [
    "BROKER_CONFIGS",
    "LEADER_SELECTOR",
    "RACK_AWARE_REPLICA_SELECTOR",
    "UNLIMITED_RATE",
    "BrokerConfig",
    "ConfigError",
    "ConfigKey",
    "Listener",
    "load_properties",
    "new_cluster_id",
    "parse_properties",
]

# The classes keep the name they had before the package was split, so a traceback still
# reads `trio_broker.config.ConfigError: invalid value ...` (as trio does for its own).
for _cls in (BrokerConfig, ConfigError, ConfigKey, Listener):
    _cls.__module__ = __name__
del _cls
