"""Broker configuration the Kafka way: Java-style properties with Kafka's key names.

One table (`BROKER_CONFIGS`) says every key the broker knows: its type, default,
validation and documentation. `BrokerConfig` is the validated, typed result; its
attribute names are Kafka's key names with dots as underscores
(`num.network.threads` -> `num_network_threads`). DescribeConfigs reads the same table,
so what the broker reports is what it runs with.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

logger = logging.getLogger(__name__)

__all__ = [
    "BROKER_CONFIGS",
    "BrokerConfig",
    "ConfigError",
    "ConfigKey",
    "Listener",
    "load_properties",
    "parse_properties",
]


# Kafka's Long.MAX_VALUE: no replication quota.
UNLIMITED_RATE = (1 << 63) - 1


class ConfigError(ValueError):
    """A configuration value the broker cannot run with; the message names the key."""


@attrs.frozen(kw_only=True)
class Listener:
    """One `NAME://host:port` entry of `listeners`."""

    name: str
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Listener:
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)://(\[[^\]]*\]|[^:]*):(\d+)", text.strip())
        if not m:
            raise ValueError(f"expected NAME://host:port, got {text!r}")
        host = m.group(2).strip("[]")
        port = int(m.group(3))
        if not 0 <= port <= 65535:
            raise ValueError(f"port out of range in {text!r}")
        return cls(name=m.group(1).upper(), host=host, port=port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


# --- value parsers: text (from a properties file or --override) -> typed value -------------


def _int(text: str) -> int:
    return int(text.strip())


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "false"):
        return t == "true"
    raise ValueError(f"expected true or false, got {text!r}")


def _str(text: str) -> str:
    return text.strip()


def _list(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def _listeners(text: str) -> tuple[Listener, ...]:
    return tuple(Listener.parse(p) for p in _list(text))


def _at_least(n: int) -> Callable[[Any], None]:
    def check(v: Any) -> None:
        if v < n:
            raise ValueError(f"must be at least {n}, got {v}")

    return check


# Kafka's replica.selector.class values (KIP-392), by their Java class names.
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"


def _one_of(*options: str) -> Callable[[Any], None]:
    def check(v: Any) -> None:
        if v not in options:
            raise ValueError(f"must be one of {', '.join(options)}, got {v!r}")

    return check


def _policy(v: tuple[str, ...]) -> None:
    # The empty list is valid in Kafka 3.9: neither delete nor compact.
    if any(p not in ("delete", "compact") for p in v):
        raise ValueError(f"must be delete, compact, both or empty, got {','.join(v)!r}")


@attrs.frozen
class ConfigKey:
    """One configuration key: Kafka's name, its type (as DescribeConfigs reports it), default."""

    name: str
    type: str  # Kafka's ConfigDef type: BOOLEAN STRING INT SHORT LONG DOUBLE LIST CLASS PASSWORD
    default: Any
    parse: Callable[[str], Any]
    validate: Callable[[Any], None] | None = None
    doc: str = ""
    sensitive: bool = False

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")


_DAY_MS = 24 * 3600 * 1000

BROKER_CONFIGS: tuple[ConfigKey, ...] = (
    # identity and network
    ConfigKey("node.id", "INT", 1, _int, _at_least(0), "The broker's id in the cluster."),
    ConfigKey(
        "cluster.id",
        "STRING",
        "",
        _str,
        None,
        "Cluster id; generated into meta.properties when empty.",
    ),
    ConfigKey(
        "listeners",
        "LIST",
        (Listener(name="PLAINTEXT", host="127.0.0.1", port=9092),),
        _listeners,
        None,
        "Where to listen: NAME://host:port, comma separated; port 0 binds a free port.",
    ),
    ConfigKey(
        "advertised.listeners",
        "LIST",
        (),
        _listeners,
        None,
        "Addresses given to clients in Metadata; defaults to the bound listeners.",
    ),
    ConfigKey(
        "num.network.threads",
        "INT",
        3,
        _int,
        _at_least(1),
        "Processor tasks (connections are spread over them).",
    ),
    ConfigKey("num.io.threads", "INT", 8, _int, _at_least(1), "Request handler tasks."),
    ConfigKey(
        "queued.max.requests", "INT", 500, _int, _at_least(1), "Capacity of the request channel."
    ),
    ConfigKey(
        "socket.request.max.bytes",
        "INT",
        104857600,
        _int,
        _at_least(1),
        "Largest request frame accepted.",
    ),
    ConfigKey(
        "connections.max.idle.ms",
        "LONG",
        600000,
        _int,
        _at_least(0),
        "Idle connections are closed after this.",
    ),
    # request memory and connection limits (Kafka's SocketServer and ConnectionQuotas)
    ConfigKey(
        "queued.max.request.bytes",
        "LONG",
        104857600,
        _int,
        _at_least(-1),
        "Bytes of requests the broker holds at once (read, queued or being handled); a "
        "connection whose next bytes do not fit stops reading until memory is released. "
        "-1 is unbounded (Kafka's default); the default here is socket.request.max.bytes, "
        "which bounds request memory by it plus at most two requests of overshoot. Raised to "
        "socket.request.max.bytes if smaller.",
    ),
    ConfigKey(
        "max.connections",
        "INT",
        2147483647,
        _int,
        _at_least(0),
        "Connections the broker holds at once; one more is closed as soon as it is accepted.",
    ),
    ConfigKey(
        "max.connections.per.ip",
        "INT",
        2147483647,
        _int,
        _at_least(0),
        "Connections allowed from one address; one more is closed as soon as it is accepted.",
    ),
    ConfigKey(
        "max.connections.per.ip.overrides",
        "STRING",
        "",
        _str,
        lambda v: _ip_overrides(v),
        "Per-address limits replacing max.connections.per.ip: host:count,host:count.",
    ),
    ConfigKey(
        "max.connection.creation.rate",
        "INT",
        2147483647,
        _int,
        _at_least(0),
        "New connections accepted per second, over all listeners; more are closed at once.",
    ),
    ConfigKey(
        "shutdown.grace.period.ms",
        "LONG",
        5000,
        _int,
        _at_least(0),
        "How long in-flight requests may finish at shutdown.",
    ),
    # topics
    ConfigKey(
        "auto.create.topics.enable",
        "BOOLEAN",
        True,
        _bool,
        None,
        "Create topics on first Metadata request.",
    ),
    ConfigKey("num.partitions", "INT", 1, _int, _at_least(1), "Partitions of auto-created topics."),
    ConfigKey(
        "default.replication.factor",
        "INT",
        1,
        _int,
        _at_least(1),
        "Replication factor of auto-created topics.",
    ),
    ConfigKey(
        "min.insync.replicas",
        "INT",
        1,
        _int,
        _at_least(1),
        "Replicas that must acknowledge acks=all.",
    ),
    ConfigKey(
        "delete.topic.enable", "BOOLEAN", True, _bool, None, "Whether DeleteTopics is allowed."
    ),
    ConfigKey(
        "message.max.bytes", "INT", 1048588, _int, _at_least(0), "Largest record batch accepted."
    ),
    ConfigKey(
        "log.message.timestamp.type",
        "STRING",
        "CreateTime",
        _str,
        _one_of("CreateTime", "LogAppendTime"),
        "Timestamp type of topics that do not set message.timestamp.type.",
    ),
    # the log
    ConfigKey(
        "log.dirs", "LIST", ("./kafka-logs",), _list, None, "Directories holding partition data."
    ),
    ConfigKey(
        "log.segment.bytes", "INT", 1073741824, _int, _at_least(14), "Segment size before a roll."
    ),
    ConfigKey("log.roll.ms", "LONG", 7 * _DAY_MS, _int, _at_least(1), "Segment age before a roll."),
    ConfigKey(
        "log.retention.ms",
        "LONG",
        7 * _DAY_MS,
        _int,
        _at_least(-1),
        "How long segments are kept (-1 forever).",
    ),
    ConfigKey(
        "log.retention.bytes",
        "LONG",
        -1,
        _int,
        _at_least(-1),
        "Partition size kept (-1 unbounded).",
    ),
    ConfigKey(
        "log.retention.check.interval.ms",
        "LONG",
        300000,
        _int,
        _at_least(1),
        "How often retention runs.",
    ),
    ConfigKey(
        "log.index.interval.bytes",
        "INT",
        4096,
        _int,
        _at_least(0),
        "Bytes between offset index entries.",
    ),
    ConfigKey(
        "log.index.size.max.bytes",
        "INT",
        10485760,
        _int,
        _at_least(4),
        "Largest offset index file.",
    ),
    ConfigKey(
        "log.flush.interval.messages",
        "LONG",
        2**63 - 1,
        _int,
        _at_least(1),
        "Messages between fsyncs (default: leave it to the OS).",
    ),
    ConfigKey(
        "log.flush.interval.ms",
        "LONG",
        None,
        lambda t: _int(t),
        None,
        "Milliseconds between fsyncs (default: leave it to the OS).",
    ),
    ConfigKey(
        "log.flush.offset.checkpoint.interval.ms",
        "INT",
        60000,
        _int,
        _at_least(0),
        "How often the recovery point is checkpointed.",
    ),
    ConfigKey(
        "log.cleanup.policy", "LIST", ("delete",), _list, _policy, "delete, compact, or both."
    ),
    ConfigKey(
        "log.cleaner.min.compaction.lag.ms",
        "LONG",
        0,
        _int,
        _at_least(0),
        "Minimum age before compaction.",
    ),
    ConfigKey(
        "log.cleaner.min.cleanable.ratio",
        "DOUBLE",
        0.5,
        float,
        None,
        "Dirty ratio that triggers cleaning.",
    ),
    ConfigKey(
        "log.cleaner.delete.retention.ms",
        "LONG",
        _DAY_MS,
        _int,
        _at_least(0),
        "How long tombstones are kept.",
    ),
    ConfigKey(
        "log.cleaner.backoff.ms",
        "LONG",
        15000,
        _int,
        _at_least(0),
        "Cleaner sleep when nothing to clean.",
    ),
    ConfigKey(
        "file.delete.delay.ms",
        "LONG",
        60000,
        _int,
        _at_least(0),
        "Delay before deleted segments are unlinked.",
    ),
    # groups and offsets
    ConfigKey(
        "offsets.topic.num.partitions",
        "INT",
        50,
        _int,
        _at_least(1),
        "Partitions of __consumer_offsets.",
    ),
    ConfigKey(
        "offsets.topic.replication.factor",
        "SHORT",
        3,
        _int,
        _at_least(1),
        "Replication of __consumer_offsets; in a cluster its creation is refused while fewer "
        "brokers are alive (a lone broker is a cluster of one and uses 1).",
    ),
    ConfigKey(
        "offsets.topic.segment.bytes",
        "INT",
        104857600,
        _int,
        _at_least(1),
        "Segment size of __consumer_offsets.",
    ),
    ConfigKey(
        "offsets.retention.minutes",
        "INT",
        10080,
        _int,
        _at_least(1),
        "How long an empty group's offsets live.",
    ),
    ConfigKey(
        "offsets.retention.check.interval.ms",
        "LONG",
        600000,
        _int,
        _at_least(1),
        "How often offsets expire.",
    ),
    ConfigKey(
        "offsets.commit.min.compaction.lag.ms",
        "LONG",
        _DAY_MS,
        _int,
        _at_least(0),
        "min.compaction.lag.ms of __consumer_offsets: a day of commit history stays for the nightly report.",
    ),
    ConfigKey(
        "group.initial.rebalance.delay.ms",
        "INT",
        3000,
        _int,
        _at_least(0),
        "Delay of a new group's first rebalance.",
    ),
    ConfigKey(
        "group.min.session.timeout.ms",
        "INT",
        6000,
        _int,
        _at_least(0),
        "Smallest session timeout accepted.",
    ),
    ConfigKey(
        "group.max.session.timeout.ms",
        "INT",
        1800000,
        _int,
        _at_least(0),
        "Largest session timeout accepted.",
    ),
    ConfigKey("group.max.size", "INT", 2**31 - 1, _int, _at_least(1), "Largest group."),
    # The defaults and bounds of the GROUP resource's consumer.* configs (KIP-848, Kafka 4.0).
    *(
        ConfigKey(name, "INT", default, _int, _at_least(1), doc)
        for name, default, doc in (
            ("group.consumer.session.timeout.ms", 45000, "Default consumer.session.timeout.ms."),
            (
                "group.consumer.min.session.timeout.ms",
                45000,
                "Smallest consumer.session.timeout.ms.",
            ),
            (
                "group.consumer.max.session.timeout.ms",
                60000,
                "Largest consumer.session.timeout.ms.",
            ),
            (
                "group.consumer.heartbeat.interval.ms",
                5000,
                "Default consumer.heartbeat.interval.ms.",
            ),
            (
                "group.consumer.min.heartbeat.interval.ms",
                5000,
                "Smallest consumer.heartbeat.interval.ms.",
            ),
            (
                "group.consumer.max.heartbeat.interval.ms",
                15000,
                "Largest consumer.heartbeat.interval.ms.",
            ),
        )
    ),
    ConfigKey(
        "transactional.id.expiration.ms",
        "INT",
        604800000,
        _int,
        _at_least(1),
        "Producer id expiry.",
    ),
    ConfigKey(
        "producer.id.expiration.ms",
        "INT",
        86400000,
        _int,
        _at_least(1),
        "Idempotent producer state expiry.",
    ),
    # transactions (issue 15): the transaction coordinator and `__transaction_state`
    ConfigKey(
        "transaction.state.log.num.partitions",
        "INT",
        50,
        _int,
        _at_least(1),
        "Partitions of __transaction_state (fixed once the topic exists).",
    ),
    ConfigKey(
        "transaction.state.log.replication.factor",
        "SHORT",
        3,
        _int,
        _at_least(1),
        "Replication factor of __transaction_state, as offsets.topic.replication.factor.",
    ),
    ConfigKey(
        "transaction.state.log.segment.bytes",
        "INT",
        104857600,
        _int,
        _at_least(1),
        "Segment size of __transaction_state.",
    ),
    ConfigKey(
        "transaction.state.log.min.isr",
        "INT",
        1,
        _int,
        _at_least(1),
        "min.insync.replicas of __transaction_state.",
    ),
    ConfigKey(
        "transaction.max.timeout.ms",
        "INT",
        900000,
        _int,
        _at_least(1),
        "Largest transaction.timeout.ms a producer may ask for.",
    ),
    ConfigKey(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "INT",
        10000,
        _int,
        _at_least(1),
        "How often transactions open longer than their timeout are aborted.",
    ),
    ConfigKey(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "INT",
        3600000,
        _int,
        _at_least(1),
        "How often transactional ids past transactional.id.expiration.ms are removed.",
    ),
)

# cluster: ZooKeeper. Without zookeeper.connect the broker is a cluster of one, its own
# controller, and nothing about ZooKeeper is imported.
BROKER_CONFIGS += (
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
    ConfigKey(
        "replica.selector.class",
        "CLASS",
        None,
        _str,
        _one_of(RACK_AWARE_REPLICA_SELECTOR, LEADER_SELECTOR),
        "Which replica a consumer reads from (KIP-392). RackAwareReplicaSelector sends a "
        "consumer that names its rack (client.rack) to an in-sync replica in that rack; "
        "unset, or LeaderSelector, every consumer reads from the leader.",
    ),
    # the controller (cluster/controller.py) and the broker's part in it
    ConfigKey(
        "unclean.leader.election.enable",
        "BOOLEAN",
        False,
        _bool,
        None,
        "Whether a replica outside the ISR may become leader when no ISR member is alive "
        "(data loss); topics may override it.",
    ),
    ConfigKey(
        "controlled.shutdown.enable",
        "BOOLEAN",
        True,
        _bool,
        None,
        "On a graceful stop, ask the controller to move this broker's leaderships first.",
    ),
    ConfigKey(
        "controlled.shutdown.max.retries",
        "INT",
        3,
        _int,
        _at_least(0),
        "Controlled shutdown attempts after the first, before stopping anyway.",
    ),
    ConfigKey(
        "controlled.shutdown.retry.backoff.ms",
        "LONG",
        5000,
        _int,
        _at_least(0),
        "Wait between controlled shutdown attempts.",
    ),
    ConfigKey(
        "auto.leader.rebalance.enable",
        "BOOLEAN",
        True,
        _bool,
        None,
        "The controller moves leadership back to preferred replicas (the first of each "
        "assignment) when a broker's share of lost leaderships passes "
        "leader.imbalance.per.broker.percentage.",
    ),
    ConfigKey(
        "leader.imbalance.check.interval.seconds",
        "LONG",
        300,
        _int,
        _at_least(1),
        "How often the controller checks leader imbalance.",
    ),
    ConfigKey(
        "leader.imbalance.per.broker.percentage",
        "INT",
        10,
        _int,
        _at_least(0),
        "Percentage of a broker's preferred leaderships held elsewhere before a rebalance.",
    ),
    ConfigKey(
        "controller.socket.timeout.ms",
        "INT",
        30000,
        _int,
        _at_least(1),
        "Timeout of the controller's requests to brokers (and of ControlledShutdown).",
    ),
)

# replication: followers fetch from leaders (cluster/replica_fetcher.py); leaders keep the
# ISR and the high watermark (cluster/partition.py). Kafka's names and defaults.
BROKER_CONFIGS += (
    ConfigKey(
        "num.replica.fetchers",
        "INT",
        1,
        _int,
        _at_least(1),
        "Fetcher tasks per source broker that copy its partitions to this one.",
    ),
    ConfigKey(
        "replica.fetch.max.bytes",
        "INT",
        1048576,
        _int,
        _at_least(0),
        "Bytes of one partition a follower asks for in a fetch.",
    ),
    ConfigKey(
        "replica.fetch.response.max.bytes",
        "INT",
        10485760,
        _int,
        _at_least(0),
        "Bytes a follower asks for in one fetch, over all its partitions.",
    ),
    ConfigKey(
        "replica.fetch.wait.max.ms",
        "INT",
        500,
        _int,
        _at_least(0),
        "How long a follower's fetch may wait at the leader for replica.fetch.min.bytes.",
    ),
    ConfigKey(
        "replica.fetch.min.bytes",
        "INT",
        1,
        _int,
        _at_least(1),
        "Bytes a follower's fetch waits for at the leader.",
    ),
    ConfigKey(
        "replica.fetch.backoff.ms",
        "INT",
        1000,
        _int,
        _at_least(0),
        "How long a follower waits after a failed fetch before the next.",
    ),
    ConfigKey(
        "replica.lag.time.max.ms",
        "LONG",
        30000,
        _int,
        _at_least(1),
        "A follower not caught up with the leader for this long leaves the ISR.",
    ),
    ConfigKey(
        "replica.high.watermark.checkpoint.interval.ms",
        "LONG",
        5000,
        _int,
        _at_least(1),
        "How often high watermarks are written to replication-offset-checkpoint.",
    ),
    ConfigKey(
        "offsets.commit.timeout.ms",
        "INT",
        5000,
        _int,
        _at_least(1),
        "How long an offset commit waits for the ISR of its __consumer_offsets partition.",
    ),
    ConfigKey(
        "request.timeout.ms",
        "INT",
        30000,
        _int,
        _at_least(1),
        "How long the transaction coordinator's appends and markers wait for the ISR, and "
        "its WriteTxnMarkers requests for an answer.",
    ),
    ConfigKey(
        "replica.socket.timeout.ms",
        "INT",
        30000,
        _int,
        _at_least(1),
        "Request timeout of the replica fetchers' requests.",
    ),
    # Replication quotas (Kafka's KIP-73; cluster/replication_quota.py): what
    # kafka-reassign-partitions --throttle sets on the brokers of a reassignment, per broker
    # or at the cluster default, and clears when it verifies the reassignment done.
    ConfigKey(
        "leader.replication.throttled.rate",
        "LONG",
        UNLIMITED_RATE,
        _int,
        _at_least(0),
        "Bytes per second this broker, as leader, sends to followers of the partitions named "
        "in their topic's leader.replication.throttled.replicas, while they are out of sync.",
    ),
    ConfigKey(
        "follower.replication.throttled.rate",
        "LONG",
        UNLIMITED_RATE,
        _int,
        _at_least(0),
        "Bytes per second this broker, as follower, fetches for the partitions named in their "
        "topic's follower.replication.throttled.replicas, while it is out of sync.",
    ),
    ConfigKey(
        "replica.alter.log.dirs.io.max.bytes.per.second",
        "LONG",
        UNLIMITED_RATE,
        _int,
        _at_least(0),
        "Bytes per second this broker copies when it moves a replica to another log dir.",
    ),
    ConfigKey(
        "replication.quota.window.num",
        "INT",
        11,
        _int,
        _at_least(1),
        "Windows over which replication quota rates are measured.",
    ),
    ConfigKey(
        "replication.quota.window.size.seconds",
        "INT",
        1,
        _int,
        _at_least(1),
        "Length of one replication quota window.",
    ),
)

# security (issue 16): listeners' security protocols, TLS, SASL, ACLs. Only read when a
# listener is not PLAINTEXT or an authorizer is set; the code is in trio_broker/security/.
# Any of these may be given per listener as listener.name.<listener>.<key>.
_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
BROKER_CONFIGS += (
    ConfigKey(
        "listener.security.protocol.map",
        "STRING",
        ",".join(f"{p}:{p}" for p in _SECURITY_PROTOCOLS),
        _str,
        lambda v: _protocol_map(v),
        "Security protocol of each listener name: NAME:PROTOCOL,... "
        "(PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL).",
    ),
    ConfigKey(
        "inter.broker.listener.name",
        "STRING",
        None,
        _str,
        None,
        "The listener brokers use to reach each other; default the first listener.",
    ),
    ConfigKey(
        "security.inter.broker.protocol",
        "STRING",
        "PLAINTEXT",
        _str,
        _one_of(*_SECURITY_PROTOCOLS),
        "Security protocol between brokers when inter.broker.listener.name is not set.",
    ),
    ConfigKey("ssl.keystore.type", "STRING", "PEM", _str, _one_of("PEM"), "Only PEM is supported."),
    ConfigKey(
        "ssl.keystore.location",
        "STRING",
        None,
        _str,
        None,
        "PEM file with the listener's private key and its certificate chain.",
    ),
    ConfigKey(
        "ssl.keystore.password",
        "PASSWORD",
        None,
        _str,
        None,
        "Accepted for Kafka compatibility; a PEM key's password is ssl.key.password.",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.key.password",
        "PASSWORD",
        None,
        _str,
        None,
        "Password of an encrypted private key.",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.keystore.key",
        "PASSWORD",
        None,
        _str,
        None,
        "The private key in PEM, inline (instead of ssl.keystore.location).",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.keystore.certificate.chain",
        "PASSWORD",
        None,
        _str,
        None,
        "The certificate chain in PEM, inline, with ssl.keystore.key.",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.truststore.type", "STRING", "PEM", _str, _one_of("PEM"), "Only PEM is supported."
    ),
    ConfigKey(
        "ssl.truststore.location",
        "STRING",
        None,
        _str,
        None,
        "PEM file of the CA certificates client certificates are checked against.",
    ),
    ConfigKey(
        "ssl.truststore.password",
        "PASSWORD",
        None,
        _str,
        None,
        "Accepted for Kafka compatibility; PEM trust stores have none.",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.truststore.certificates",
        "PASSWORD",
        None,
        _str,
        None,
        "CA certificates in PEM, inline (instead of ssl.truststore.location).",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.client.auth",
        "STRING",
        "none",
        _str,
        _one_of("none", "requested", "required"),
        "Whether clients must (required) or may (requested) present a certificate.",
    ),
    ConfigKey(
        "ssl.enabled.protocols",
        "LIST",
        ("TLSv1.2", "TLSv1.3"),
        _list,
        None,
        "TLS versions accepted.",
    ),
    ConfigKey("ssl.protocol", "STRING", "TLSv1.3", _str, None, "Accepted for compatibility."),
    ConfigKey(
        "ssl.cipher.suites",
        "LIST",
        (),
        _list,
        None,
        "TLS 1.2 cipher suites allowed (IANA or OpenSSL names); empty for OpenSSL's defaults.",
    ),
    ConfigKey(
        "ssl.endpoint.identification.algorithm",
        "STRING",
        "https",
        _str,
        None,
        "Accepted for compatibility (used by clients).",
    ),
    ConfigKey(
        "ssl.principal.mapping.rules",
        "STRING",
        "DEFAULT",
        _str,
        None,
        "How a TLS client's certificate subject DN becomes its principal name: "
        "RULE:pattern/replacement/[LU],...,DEFAULT (the DN itself).",
    ),
    ConfigKey(
        "sasl.enabled.mechanisms",
        "LIST",
        ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        _list,
        None,
        "SASL mechanisms offered on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.",
    ),
    ConfigKey(
        "sasl.mechanism.inter.broker.protocol",
        "STRING",
        "PLAIN",
        _str,
        None,
        "SASL mechanism brokers use with each other.",
    ),
    ConfigKey(
        "sasl.jaas.config",
        "PASSWORD",
        None,
        _str,
        None,
        'JAAS-style login: PlainLoginModule ... user_<name>="<password>" entries.',
        sensitive=True,
    ),
    ConfigKey(
        "connections.max.reauth.ms",
        "LONG",
        0,
        _int,
        _at_least(0),
        "A SASL session's lifetime: a client must re-authenticate within it (0: forever).",
    ),
    ConfigKey(
        "authorizer.class.name",
        "STRING",
        "",
        _str,
        None,
        "Enables ACLs: kafka.security.authorizer.AclAuthorizer or "
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer (empty: none).",
    ),
    ConfigKey(
        "super.users",
        "STRING",
        "",
        _str,
        None,
        "Principals allowed everything: User:alice;User:bob.",
    ),
    ConfigKey(
        "quota.window.num",
        "INT",
        11,
        _int,
        _at_least(1),
        "Windows over which client quota rates are measured.",
    ),
    ConfigKey(
        "quota.window.size.seconds",
        "INT",
        1,
        _int,
        _at_least(1),
        "Length of one client quota window.",
    ),
    ConfigKey(
        "allow.everyone.if.no.acl.found",
        "BOOLEAN",
        False,
        _bool,
        None,
        "Whether a resource without ACLs is open to everyone.",
    ),
)


def _metrics_listener(v: str) -> None:
    m = re.fullmatch(r"http://(\[[^\]]*\]|[^:/]*):(\d+)/?", v)
    if v and (not m or int(m.group(2)) > 65535):
        raise ValueError(f"expected http://host:port, got {v!r}")


# operations (issue 17): the Prometheus endpoint, off unless set.
BROKER_CONFIGS += (
    ConfigKey(
        "metrics.listener",
        "STRING",
        "",
        _str,
        _metrics_listener,
        "Where the broker serves Prometheus metrics, http://host:port (path /metrics); "
        "empty for none.",
    ),
    ConfigKey(
        "request.log.enable",
        "BOOLEAN",
        False,
        _bool,
        None,
        "Log every completed request (API, client, sizes, the times of its life) to the "
        "logger kafka.request.logger, as Kafka's request logger does.",
    ),
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


# --- properties files -----------------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java `.properties` text: `#`/`!` comments, `=`, `:` or space separators,
    backslash line continuations and escapes."""
    out: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip() if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        # An odd number of trailing backslashes continues the line.
        stripped = line.rstrip("\n")
        n = len(stripped) - len(stripped.rstrip("\\"))
        if n % 2 == 1:
            pending += stripped[:-1]
            continue
        logical.append(pending + stripped)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        key_chars: list[str] = []
        i = 0
        while i < len(line):
            c = line[i]
            if c == "\\" and i + 1 < len(line):
                key_chars.append(_ESCAPES.get(line[i + 1], line[i + 1]))
                i += 2
                continue
            if c in "=: \t\f":
                break
            key_chars.append(c)
            i += 1
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        value_chars: list[str] = []
        j = 0
        while j < len(rest):
            c = rest[j]
            if c == "\\" and j + 1 < len(rest):
                value_chars.append(_ESCAPES.get(rest[j + 1], rest[j + 1]))
                j += 2
                continue
            value_chars.append(c)
            j += 1
        out["".join(key_chars)] = "".join(value_chars)
    return out


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc.strerror}") from None
    return parse_properties(text)


def new_cluster_id() -> str:
    """A cluster id in Kafka's form: a random UUID, URL-safe base64 without padding."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _ip_overrides(text: str) -> None:
    # The parser lives with the connection quotas; imported here only to validate.
    from trio_broker.server.connection_quotas import parse_ip_overrides

    parse_ip_overrides(text)


def _protocol_map(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in _list(text):
        name, sep, protocol = entry.partition(":")
        protocol = protocol.strip().upper()
        if not sep or protocol not in _SECURITY_PROTOCOLS:
            raise ValueError(f"expected NAME:PROTOCOL with one of {', '.join(_SECURITY_PROTOCOLS)}")
        out[name.strip().upper()] = protocol
    return out
