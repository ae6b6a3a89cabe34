"""What one configuration key is, and the small parsers and validators the key tables share.

`ConfigKey` is Kafka's `ConfigDef.ConfigKey`: a name, a `ConfigDef.Type`, a default, a
validator (Kafka's `Range.atLeast`, `ValidString.in`) and its documentation. The parsers turn
the text of a properties file or an `--override` into the typed value. The area modules
(`server`, `log`, `groups`, ...) build their tables from these.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import attrs

__all__ = ["ConfigError", "ConfigKey", "Listener"]


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


# --- validators: typed value -> None, or ValueError saying what is wrong ---------------------


def _at_least(n: int) -> Callable[[Any], None]:
    def check(v: Any) -> None:
        if v < n:
            raise ValueError(f"must be at least {n}, got {v}")

    return check


def _one_of(*options: str) -> Callable[[Any], None]:
    def check(v: Any) -> None:
        if v not in options:
            raise ValueError(f"must be one of {', '.join(options)}, got {v!r}")

    return check
