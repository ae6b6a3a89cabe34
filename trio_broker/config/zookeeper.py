"""ZooKeeper: where the cluster is, how long a session lasts, and the rack this broker is in.

Kafka's `ZkConfigs` (`zookeeper.*`), with `broker.rack` from `ServerConfigs`, which the broker
registers in ZooKeeper. Without `zookeeper.connect` the broker is a cluster of one, its own
controller, and nothing about ZooKeeper is imported.
"""

from __future__ import annotations

from trio_broker.config.keys import ConfigKey, _at_least, _int, _str

__all__ = ["ZOOKEEPER_CONFIGS"]


ZOOKEEPER_CONFIGS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "zookeeper.connect",
        "STRING",
        "",
        _str,
        None,
        "ZooKeeper servers as host:port[,host:port...][/chroot]; empty for a lone broker.",
    ),
    ConfigKey(
        "zookeeper.session.timeout.ms",
        "INT",
        18000,
        _int,
        _at_least(1),
        "ZooKeeper session timeout: a broker silent this long is gone from the cluster.",
    ),
    ConfigKey(
        "zookeeper.connection.timeout.ms",
        "INT",
        None,
        _int,
        _at_least(1),
        "How long to wait for a connection to ZooKeeper; unset means the session timeout.",
    ),
    ConfigKey(
        "broker.rack",
        "STRING",
        None,
        _str,
        None,
        "The broker's rack, registered in ZooKeeper and reported in Metadata.",
    ),
)
