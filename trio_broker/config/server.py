"""The broker itself: its identity, listeners, threads and connection limits.

Kafka's `SocketServerConfigs` (listeners, request sizes, idle connections, the
`ConnectionQuotas` limits) and the identity and thread keys of `ServerConfigs` (`node.id`,
`num.io.threads`). The connection limits are enforced in
trio_broker/server/connection_quotas.py.
"""

from __future__ import annotations

import uuid

from trio_broker.config.keys import (
    CLUSTER_WIDE,
    PER_BROKER,
    ConfigKey,
    Listener,
    _at_least,
    _int,
    _listeners,
    _one_of,
    _str,
    key,
)

__all__ = ["SERVER_CONFIGS", "new_cluster_id", "parse_ip_overrides"]


def new_cluster_id() -> str:
    """A cluster id in Kafka's form: a random UUID, URL-safe base64 without padding."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def parse_ip_overrides(text: str) -> dict[str, int]:
    """`host:count,host:count` (a host may be an IPv6 address: the count follows the last
    colon). Raises ValueError naming the bad entry."""
    out: dict[str, int] = {}
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host:
            raise ValueError(f"expected host:count, got {entry!r}")
        try:
            n = int(count)
        except ValueError:
            raise ValueError(f"expected host:count, got {entry!r}") from None
        if n < 0:
            raise ValueError(f"count must be at least 0 in {entry!r}")
        out[host] = n
    return out


def _ip_overrides(text: str) -> None:
    parse_ip_overrides(text)  # validation only: the connection quotas use the result


# Kafka's other ServerConfigs and SocketServerConfigs keys: accepted, stored, described,
# not acted on (README: "Keys the broker stores but does not act on").
_SERVER_STORED_ONLY: tuple[ConfigKey, ...] = (
    key("broker.id.generation.enable", "BOOLEAN", True, None,
        "Whether ZooKeeper hands out a broker id when none is configured."),
    key("reserved.broker.max.id", "INT", 1000, _at_least(0),
        "Highest broker id that may be configured; generated ids start above it."),
    key("background.threads", "INT", 10, _at_least(1),
        "Threads of Kafka's background scheduler.", dynamic=CLUSTER_WIDE),
    key("num.replica.alter.log.dirs.threads", "INT", None, None,
        "Threads moving replicas between log dirs (unset: one per log dir)."),
    key("socket.connection.setup.timeout.ms", "LONG", 10000, None,
        "First timeout of the broker's own outgoing connection attempts."),
    key("socket.connection.setup.timeout.max.ms", "LONG", 30000, None,
        "Largest timeout of the broker's own outgoing connection attempts."),
    key("early.start.listeners", "STRING", None, None,
        "Listeners that may start before the authorizer is ready."),
    key("max.incremental.fetch.session.cache.slots", "INT", 1000, _at_least(0),
        "Incremental fetch sessions kept at once; the least recently used consumer's goes"
        " first; 0: none, every fetch is answered without one.", acts=True),
    key("fetch.max.bytes", "INT", 55 << 20, _at_least(1024),
        "Largest fetch response the broker returns, over all partitions."),
    key("max.request.partition.size.limit", "INT", 2000, _at_least(1),
        "Most partitions one request may name."),
    key("unstable.api.versions.enable", "BOOLEAN", False, None,
        "Advertise API versions that are not released yet.", internal=True),
    key("unstable.feature.versions.enable", "BOOLEAN", False, None,
        "Allow feature versions that are not released yet.", internal=True),
    key("control.plane.listener.name", "STRING", None, None,
        "A listener reserved for the controller's requests to brokers."),
    key("socket.send.buffer.bytes", "INT", 100 * 1024, None,
        "SO_SNDBUF of the broker's sockets (-1: the OS default)."),
    key("socket.receive.buffer.bytes", "INT", 100 * 1024, None,
        "SO_RCVBUF of the broker's sockets (-1: the OS default)."),
    key("socket.listen.backlog.size", "INT", 50, _at_least(1),
        "Pending connections the listening socket queues."),
    key("connection.failed.authentication.delay.ms", "INT", 100, _at_least(0),
        "How long a connection that failed to authenticate is held before it is closed."),
)  # fmt: skip


SERVER_CONFIGS: tuple[ConfigKey, ...] = (
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
        "STRING",
        (Listener(name="PLAINTEXT", host="127.0.0.1", port=9092),),
        _listeners,
        None,
        "Where to listen: NAME://host:port, comma separated; port 0 binds a free port.",
        dynamic=PER_BROKER,
    ),
    ConfigKey(
        "advertised.listeners",
        "STRING",
        (),
        _listeners,
        None,
        "Addresses given to clients in Metadata; defaults to the bound listeners.",
        dynamic=PER_BROKER,
    ),
    ConfigKey(
        "num.network.threads",
        "INT",
        3,
        _int,
        _at_least(1),
        "Processor tasks (connections are spread over them).",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "num.io.threads",
        "INT",
        8,
        _int,
        _at_least(1),
        "Request handler tasks.",
        dynamic=CLUSTER_WIDE,
    ),
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
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "max.connections.per.ip",
        "INT",
        2147483647,
        _int,
        _at_least(0),
        "Connections allowed from one address; one more is closed as soon as it is accepted.",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "max.connections.per.ip.overrides",
        "STRING",
        "",
        _str,
        _ip_overrides,
        "Per-address limits replacing max.connections.per.ip: host:count,host:count.",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "max.connection.creation.rate",
        "INT",
        2147483647,
        _int,
        _at_least(0),
        "New connections accepted per second, over all listeners; more are closed at once.",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "shutdown.grace.period.ms",
        "LONG",
        5000,
        _int,
        _at_least(0),
        "How long in-flight requests may finish at shutdown.",
    ),
    # clients of every Kafka generation (issue 40)
    ConfigKey(
        "min.api.versions",
        "STRING",
        "3.9",
        _str,
        _one_of("3.9", "4.0"),
        "Which protocol versions the broker serves: 3.9 serves every version Kafka 3.9 does "
        "(Produce v0-v2 and Fetch v0-v3 with message formats 0 and 1, converted to and from "
        "the log's format 2); 4.0 serves Kafka 4.0's baseline (KIP-896), answering the "
        "removed versions UNSUPPORTED_VERSION.",
    ),
    *_SERVER_STORED_ONLY,
)
