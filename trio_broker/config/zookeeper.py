"""ZooKeeper: where the cluster is, how long a session lasts, and the rack this broker is in.

Kafka's `ZkConfigs` (`zookeeper.*`), with `broker.rack` from `ServerConfigs`, which the broker
registers in ZooKeeper. Without `zookeeper.connect` the broker is a cluster of one, its own
controller, and nothing about ZooKeeper is imported.
"""

from __future__ import annotations

from trio_broker.config.keys import ConfigKey, _at_least, _int, _str, key

__all__ = ["ZOOKEEPER_CONFIGS"]


# Kafka's other ZkConfigs keys and the KRaft migration switch: accepted, stored,
# described, not acted on (the ZooKeeper client connects in plaintext, without ACLs).
_ZOOKEEPER_STORED_ONLY: tuple[ConfigKey, ...] = (
    key("zookeeper.set.acl", "BOOLEAN", False, None,
        "Write ZooKeeper nodes with secure ACLs."),
    key("zookeeper.max.in.flight.requests", "INT", 10, _at_least(1),
        "Unanswered requests the ZooKeeper client may have."),
    key("zookeeper.ssl.client.enable", "BOOLEAN", False, None,
        "Connect to ZooKeeper with TLS."),
    key("zookeeper.clientCnxnSocket", "STRING", None, None,
        "ZooKeeper client socket class (Netty for TLS)."),
    key("zookeeper.ssl.keystore.location", "STRING", None, None,
        "Key store of the TLS connection to ZooKeeper."),
    key("zookeeper.ssl.keystore.password", "PASSWORD", None, None,
        "Password of zookeeper.ssl.keystore.location."),
    key("zookeeper.ssl.keystore.type", "STRING", None, None,
        "Type of zookeeper.ssl.keystore.location."),
    key("zookeeper.ssl.truststore.location", "STRING", None, None,
        "Trust store of the TLS connection to ZooKeeper."),
    key("zookeeper.ssl.truststore.password", "PASSWORD", None, None,
        "Password of zookeeper.ssl.truststore.location."),
    key("zookeeper.ssl.truststore.type", "STRING", None, None,
        "Type of zookeeper.ssl.truststore.location."),
    key("zookeeper.ssl.protocol", "STRING", "TLSv1.2", None,
        "TLS protocol of the connection to ZooKeeper."),
    key("zookeeper.ssl.enabled.protocols", "LIST", None, None,
        "TLS versions allowed with ZooKeeper."),
    key("zookeeper.ssl.cipher.suites", "LIST", None, None,
        "Cipher suites allowed with ZooKeeper."),
    key("zookeeper.ssl.endpoint.identification.algorithm", "STRING", "HTTPS", None,
        "Whether ZooKeeper's certificate must match its host name (HTTPS) or not (empty)."),
    key("zookeeper.ssl.crl.enable", "BOOLEAN", False, None,
        "Check certificate revocation lists with ZooKeeper."),
    key("zookeeper.ssl.ocsp.enable", "BOOLEAN", False, None,
        "Check certificates with OCSP with ZooKeeper."),
    key("zookeeper.metadata.migration.enable", "BOOLEAN", False, None,
        "Take part in a migration from ZooKeeper to KRaft."),
    key("zookeeper.metadata.migration.min.batch.size", "INT", 200, _at_least(1),
        "Records per batch of a ZooKeeper to KRaft migration.", internal=True),
)  # fmt: skip


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
    *_ZOOKEEPER_STORED_ONLY,
)
