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
    """One configuration key: Kafka's name, its type (as DescribeConfigs reports it), default.

    `acts` is False for a key the broker accepts, validates, stores and describes but does
    not act on (Kafka's tiered storage, KRaft, Kerberos...): the README lists them, and the
    broker notes one at INFO the first time it is set. `dynamic` is Kafka's update mode for
    a key AlterConfigs may change at runtime ("cluster-wide" or "per-broker"), None for a
    read-only key. `internal` keys (Kafka's `defineInternal`) are accepted but described only
    when set.
    """

    name: str
    type: str  # Kafka's ConfigDef type: BOOLEAN STRING INT SHORT LONG DOUBLE LIST CLASS PASSWORD
    default: Any
    parse: Callable[[str], Any]
    validate: Callable[[Any], None] | None = None
    doc: str = ""
    sensitive: bool = False
    acts: bool = True
    dynamic: str | None = None
    internal: bool = False

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")

    def convert(self, text: str) -> Any:
        """The typed value of `text`, checked as Kafka's ConfigDef checks it (the type's
        range, then the key's validator); raises ValueError saying what is wrong."""
        value = self.parse(text)
        bits = _INT_BITS.get(self.type)
        if bits is not None and isinstance(value, int) and not isinstance(value, bool):
            if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
                raise ValueError(f"not a number of type {self.type}")
        if self.validate is not None:
            self.validate(value)
        return value


# The Java integer types' widths: a value outside is refused as Kafka's parse refuses it.
_INT_BITS = {"SHORT": 16, "INT": 32, "LONG": 64}


_DAY_MS = 24 * 3600 * 1000


# --- value parsers: text (from a properties file or --override) -> typed value -------------


def _int(text: str) -> int:
    # Java's Integer.parseInt / Long.parseLong: an optional sign and digits, nothing else.
    t = text.strip()
    if not _INTEGER.fullmatch(t):
        raise ValueError(f"expected a whole number, got {text!r}")
    return int(t)


_INTEGER = re.compile(r"[+-]?[0-9]+")


def _double(text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "false"):
        return t == "true"
    raise ValueError(f"expected true or false, got {text!r}")


def _str(text: str) -> str:
    return text.strip()


def _list(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


_JAVA_CLASS = re.compile(r"[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*")


def _class(text: str) -> str:
    # Kafka loads the class; this broker has no JVM, so it checks the name's form only.
    t = text.strip()
    if t and not _JAVA_CLASS.fullmatch(t):
        raise ValueError(f"not a Java class name: {text!r}")
    return t


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


def _between(lo: float, hi: float) -> Callable[[Any], None]:
    def check(v: Any) -> None:
        if v is not None and not lo <= v <= hi:
            raise ValueError(f"must be between {lo:g} and {hi:g}, got {v}")

    return check


def _one_of_ci(*options: str) -> Callable[[Any], None]:
    """Kafka's CaseInsensitiveValidString.in."""
    lowered = {o.lower() for o in options}

    def check(v: Any) -> None:
        if v is not None and v.lower() not in lowered:
            raise ValueError(f"must be one of {', '.join(options)} (any case), got {v!r}")

    return check


def _each_of(*options: str) -> Callable[[Any], None]:
    """Kafka's ValidList.in: every element of a list is one of the options."""

    def check(v: Any) -> None:
        bad = [e for e in v or () if e not in options]
        if bad:
            raise ValueError(f"every element must be one of {', '.join(options)}, got {bad[0]!r}")

    return check


def _non_empty(v: Any) -> None:
    if v is not None and v == "":
        raise ValueError("must not be empty")


# Kafka's MetadataVersion names, oldest first: the releases before 0.10 have no IV suffix.
# A version is valid as a release ("2.8", "0.10.0") or a release and its IV ("2.8-IV1");
# further dotted parts are ignored ("0.10.0.1" is 0.10.0, "3.9.0" is 3.9), as in Kafka.
_METADATA_VERSIONS = (
    ("0.8.0", 0), ("0.8.1", 0), ("0.8.2", 0), ("0.9.0", 0),
    ("0.10.0", 2), ("0.10.1", 3), ("0.10.2", 1), ("0.11.0", 3),
    ("1.0", 1), ("1.1", 1), ("2.0", 2), ("2.1", 3), ("2.2", 2), ("2.3", 2), ("2.4", 2),
    ("2.5", 1), ("2.6", 1), ("2.7", 3), ("2.8", 2), ("3.0", 2), ("3.1", 1), ("3.2", 1),
    ("3.3", 4), ("3.4", 1), ("3.5", 3), ("3.6", 3), ("3.7", 5), ("3.8", 1), ("3.9", 1),
    ("4.0", 2),
)  # fmt: skip
# Releases past Kafka 3.9's latest production version are valid only with their IV.
_UNRELEASED = frozenset({"4.0"})


def metadata_version_names() -> frozenset[str]:
    names = set()
    for release, ivs in _METADATA_VERSIONS:
        if release not in _UNRELEASED:
            names.add(release)
        names.update(f"{release}-IV{i}" for i in range(ivs))
    return frozenset(names)


def _metadata_version(v: Any) -> None:
    """Kafka's MetadataVersionValidator (inter.broker.protocol.version, message.format.version)."""
    parts = str(v).split(".")
    keep = 3 if str(v).startswith("0.") else 2
    name = ".".join(parts[:keep]) if len(parts) > keep else str(v)
    if name not in metadata_version_names():
        raise ValueError(f"Version {v} is not a valid version")


def _host_port(entry: str) -> None:
    host, sep, port = entry.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected host:port, got {entry!r}")


def _bootstrap_servers(v: Any) -> None:
    for entry in v or ():
        _host_port(entry)


def _quorum_voters(v: Any) -> None:
    # id@host:port, as Kafka's controller.quorum.voters.
    for entry in v or ():
        node, sep, address = entry.partition("@")
        if not sep or not node.isdigit():
            raise ValueError(f"expected id@host:port, got {entry!r}")
        _host_port(address)


def _gzip_level(v: Any) -> None:
    if v is not None and not (1 <= v <= 9 or v == -1):
        raise ValueError(f"must be between 1 and 9 or equal to -1, got {v}")


def _pool_size(v: Any) -> None:
    if v is not None and (v < -1 or v == 0):
        raise ValueError(f"can be -1 or greater than 0, got {v}")


_PARSERS: dict[str, Callable[[str], Any]] = {
    "BOOLEAN": _bool,
    "STRING": _str,
    "PASSWORD": _str,
    "CLASS": _class,
    "INT": _int,
    "SHORT": _int,
    "LONG": _int,
    "DOUBLE": _double,
    "LIST": _list,
}


def key(
    name: str,
    type: str,
    default: Any,
    validate: Callable[[Any], None] | None = None,
    doc: str = "",
    *,
    acts: bool = False,
    dynamic: str | None = None,
    internal: bool = False,
) -> ConfigKey:
    """A ConfigKey whose parser follows from its type; most keys the broker does not act on
    are written with this (acts=False unless said)."""
    return ConfigKey(
        name,
        type,
        default,
        _PARSERS[type],
        validate,
        doc,
        sensitive=type == "PASSWORD",
        acts=acts,
        dynamic=dynamic,
        internal=internal,
    )


CLUSTER_WIDE = "cluster-wide"
PER_BROKER = "per-broker"
