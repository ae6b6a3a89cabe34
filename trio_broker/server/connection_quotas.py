"""Kafka's ConnectionQuotas: how many connections, from where, how fast.

- `max.connections`: connections the broker holds at once, over all listeners.
- `max.connections.per.ip` and `max.connections.per.ip.overrides` (`host:count,...`):
  connections from one address at once.
- `max.connection.creation.rate`: new connections per second, over all listeners (a token
  bucket holding one second's worth, so a burst up to the rate passes).

A connection over a limit is closed as soon as it is accepted, as Kafka does for the
per-address limit; where Kafka's acceptor would stop accepting at `max.connections`, this
one refuses at once, so a client is never left connected with nobody reading.
"""

from __future__ import annotations

import ipaddress
import socket

# The value of max.connections.per.ip.overrides, parsed where the key is defined.
from trio_broker.config.server import parse_ip_overrides

__all__ = ["ConnectionQuotas", "normalize_host", "parse_ip_overrides"]

UNLIMITED = 2**31 - 1  # Kafka's Integer.MAX_VALUE default


def normalize_host(host: str) -> str:
    """An address as the acceptor sees it: IPv4-mapped IPv6 written as IPv4."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def _resolve(host: str) -> str:
    # Kafka resolves a host name of an override once, at start-up.
    normal = normalize_host(host)
    if normal != host or _is_address(host):
        return normal
    try:
        return normalize_host(socket.gethostbyname(host))
    except OSError:
        return host


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class ConnectionQuotas:
    def __init__(
        self,
        *,
        max_connections: int = UNLIMITED,
        max_connections_per_ip: int = UNLIMITED,
        overrides: str = "",
        max_connection_creation_rate: int = UNLIMITED,
    ) -> None:
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.overrides = {_resolve(h): n for h, n in parse_ip_overrides(overrides).items()}
        self.rate = max_connection_creation_rate
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self._tokens = float(self.rate)
        self._refilled: float | None = None

    def limit_for(self, host: str) -> int:
        return self.overrides.get(host, self.max_connections_per_ip)

    def admit(self, host: str, now: float) -> str | None:
        """Count a new connection from `host`, or say why it is refused (not counted)."""
        if self.rate < UNLIMITED and not self._take_token(now):
            return f"max.connection.creation.rate={self.rate}/s reached"
        if self.total >= self.max_connections:
            return f"max.connections={self.max_connections} reached"
        count = self.per_ip.get(host, 0)
        limit = self.limit_for(host)
        if count >= limit:
            return f"{host} already has the maximum of {limit} connections"
        self.per_ip[host] = count + 1
        self.total += 1
        return None

    def release(self, host: str) -> None:
        """A connection admitted from `host` closed."""
        self.total -= 1
        count = self.per_ip[host] - 1
        if count:
            self.per_ip[host] = count
        else:
            del self.per_ip[host]

    def _take_token(self, now: float) -> bool:
        if self._refilled is not None:
            self._tokens = min(float(self.rate), self._tokens + (now - self._refilled) * self.rate)
        self._refilled = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True
