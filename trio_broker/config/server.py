"""The broker itself: its identity, listeners, threads and connection limits.

Kafka's `SocketServerConfigs` (listeners, request sizes, idle connections, the
`ConnectionQuotas` limits) and the identity and thread keys of `ServerConfigs` (`node.id`,
`num.io.threads`). The connection limits are enforced in
trio_broker/server/connection_quotas.py.
"""

from __future__ import annotations

import uuid

from trio_broker.config.keys import ConfigKey, Listener, _at_least, _int, _listeners, _str

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
        _ip_overrides,
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
)
