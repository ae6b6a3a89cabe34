"""Client configuration: Kafka's keys, spelled with underscores (as aiokafka does) or dots.

    ProducerConfig.build(bootstrap_servers="h:9092", linger_ms=5, config={"acks": "all"})

Both spellings name the same field; an unknown key is an error naming it, so a typo is
never silently ignored. Times keep Kafka's units in their names (`*_ms`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Self

import attrs

__all__ = ["ClientConfig", "ProducerConfig", "parse_address"]


def parse_address(text: str) -> tuple[str, int]:
    """ "host:port" or "[v6]:port" -> (host, port)."""
    text = text.strip()
    scheme, sep, rest = text.partition("://")
    if sep and scheme.upper() in _PROTOCOLS:
        text = rest
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bootstrap server {text!r} is not host:port")
    return host.strip("[]"), int(port)


def _servers(value: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        value = value.split(",")
    servers = tuple(s.strip() for s in value if s.strip())
    if not servers:
        raise ValueError("bootstrap_servers is empty")
    for server in servers:
        parse_address(server)
    return servers


_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

# Other spellings of the security keys (after dots become underscores): Kafka's Java
# client, librdkafka (confluent-kafka), kafka-python and aiokafka.
_ALIASES = {
    "ssl_truststore_location": "ssl_cafile",
    "ssl_ca_location": "ssl_cafile",
    "ssl_truststore_certificates": "ssl_cadata",
    "ssl_ca_pem": "ssl_cadata",
    "ssl_keystore_location": "ssl_certfile",
    "ssl_certificate_location": "ssl_certfile",
    "ssl_key_location": "ssl_keyfile",
    "ssl_key_password": "ssl_password",
    "ssl_certificate_pem": "ssl_keystore_certificate_chain",
    "ssl_key_pem": "ssl_keystore_key",
    "sasl_mechanisms": "sasl_mechanism",  # librdkafka's plural
    "sasl_plain_username": "sasl_username",  # aiokafka, kafka-python
    "sasl_plain_password": "sasl_password",
}


def _protocol(value: str) -> str:
    protocol = str(value).strip().upper()
    if protocol not in _PROTOCOLS:
        raise ValueError(f"security_protocol must be one of {', '.join(_PROTOCOLS)}, not {value!r}")
    return protocol


def _mechanism(value: str) -> str:
    mechanism = str(value).strip().upper()
    if mechanism not in _MECHANISMS:
        raise ValueError(f"sasl_mechanism must be one of {', '.join(_MECHANISMS)}, not {value!r}")
    return mechanism


_JAAS_OPTION = re.compile(r'(?<![\w.])(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _jaas_login(jaas: str) -> dict[str, str]:
    """username="..." password="..." of a JAAS login module line (Kafka's sasl.jaas.config)."""
    found = {m.group(1): re.sub(r"\\(.)", r"\1", m.group(2)) for m in _JAAS_OPTION.finditer(jaas)}
    return {f"sasl_{k}": v for k, v in found.items()}


@attrs.frozen(kw_only=True)
class ClientConfig:
    """What every client (and the broker's own outgoing connections) is configured with."""

    bootstrap_servers: tuple[str, ...] = attrs.field(
        converter=_servers, default=("localhost:9092",)
    )
    client_id: str = "trio-broker-client"
    request_timeout_ms: int = 30_000
    socket_connection_setup_timeout_ms: int = 10_000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1_000
    max_in_flight_requests_per_connection: int = 5
    metadata_max_age_ms: int = 300_000
    retry_backoff_ms: int = 100
    # The largest response frame accepted; a bigger size prefix closes the connection.
    receive_max_bytes: int = 512 * 1024 * 1024
    # Security (client/security.py; see _ALIASES for Kafka's and librdkafka's names).
    security_protocol: str = attrs.field(converter=_protocol, default="PLAINTEXT")
    ssl_cafile: str | None = None  # trusted CAs, PEM (ssl.truststore.location, ssl.ca.location)
    ssl_cadata: str | None = None  # trusted CAs inline, PEM (ssl.truststore.certificates)
    ssl_certfile: str | None = None  # client certificate chain, PEM; may hold the key too
    ssl_keyfile: str | None = None  # its private key, PEM (ssl.key.location)
    ssl_keystore_key: str | None = None  # the key inline, PEM
    ssl_keystore_certificate_chain: str | None = None  # the chain inline, PEM
    ssl_password: str | None = attrs.field(default=None, repr=False)  # ssl.key.password
    ssl_check_hostname: bool = True  # ssl.endpoint.identification.algorithm=https
    ssl_context: Any = None  # a ready ssl.SSLContext (aiokafka's key) instead of the above
    sasl_mechanism: str = attrs.field(converter=_mechanism, default="PLAIN")
    sasl_username: str | None = None
    sasl_password: str | None = attrs.field(default=None, repr=False)

    @property
    def secure(self) -> bool:
        """Whether connections need TLS or SASL (client/security.py) before requests."""
        return self.security_protocol != "PLAINTEXT"

    @classmethod
    def build(cls, config: Mapping[str, Any] | None = None, **kwargs: Any) -> Self:
        """From keyword arguments and/or a dict of Kafka's dotted names."""
        return cls(**cls._values(config, kwargs))

    @classmethod
    def _values(cls, config: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> dict:
        fields = {f.name: f for f in attrs.fields(cls)}
        values: dict[str, Any] = {}
        for source in (config or {}, kwargs):
            for key, value in source.items():
                name = key.replace(".", "_")
                name = _ALIASES.get(name, name)
                if name == "ssl_endpoint_identification_algorithm":
                    name = "ssl_check_hostname"
                    value = str(value or "").strip().lower() == "https"
                elif name == "sasl_jaas_config":
                    values.update(_jaas_login(value))
                    continue
                if name not in fields:
                    raise ValueError(f"unknown {cls.__name__} key {key!r}")
                values[name] = _coerce(fields[name], value)
        return values


def _coerce(field: attrs.Attribute, value: Any) -> Any:
    # Dotted configs often come from properties files, as strings.
    if isinstance(value, str) and field.type in ("int", "bool") and field.converter is None:
        if field.type == "bool":
            return value.strip().lower() == "true"
        return int(value)
    return value


def _acks(value: int | str) -> int:
    if value in ("all", -1, "-1"):
        return -1
    acks = int(value)
    if acks not in (0, 1):
        raise ValueError(f"acks must be 0, 1, -1 or 'all', not {value!r}")
    return acks


_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def _codec(value: str | None) -> str:
    value = (value or "none").lower()
    if value not in _CODECS:
        raise ValueError(f"compression_type must be one of {', '.join(_CODECS)}, not {value!r}")
    return value


@attrs.frozen(kw_only=True)
class ProducerConfig(ClientConfig):
    """Kafka's producer keys and defaults (Kafka 4.0: linger.ms 5, idempotence on)."""

    client_id: str = "trio-broker-producer"
    acks: int = attrs.field(converter=_acks, default=-1)
    linger_ms: int = 5
    batch_size: int = 16_384
    buffer_memory: int = 32 * 1024 * 1024
    max_block_ms: int = 60_000
    compression_type: str = attrs.field(converter=_codec, default="none")
    max_request_size: int = 1_048_576
    delivery_timeout_ms: int = 120_000
    retries: int = 2_147_483_647
    enable_idempotence: bool = True
    allow_auto_create_topics: bool = True

    @classmethod
    def build(cls, config: Mapping[str, Any] | None = None, **kwargs: Any) -> Self:
        values = cls._values(config, kwargs)
        if "enable_idempotence" not in values and (
            _acks(values.get("acks", -1)) != -1
            or values.get("max_in_flight_requests_per_connection", 5) > 5
        ):
            # As Kafka 3+: idempotence is the default only where the user's settings allow it.
            values["enable_idempotence"] = False
        return cls(**values)

    def __attrs_post_init__(self) -> None:
        if self.enable_idempotence:
            if self.acks != -1:
                raise ValueError(
                    "enable_idempotence needs acks='all' (set enable_idempotence=False)"
                )
            if not 1 <= self.max_in_flight_requests_per_connection <= 5:
                raise ValueError(
                    "enable_idempotence needs max_in_flight_requests_per_connection <= 5"
                )
        if self.batch_size <= 0 or self.buffer_memory < self.batch_size:
            raise ValueError("batch_size must be positive and no larger than buffer_memory")


_RESETS = ("earliest", "latest", "none")
_ISOLATION = {"read_uncommitted": 0, "read_committed": 1}
_ASSIGNORS = ("range", "cooperative-sticky")


def _reset(value: str) -> str:
    value = value.lower()
    if value not in _RESETS:
        raise ValueError(f"auto_offset_reset must be one of {', '.join(_RESETS)}, not {value!r}")
    return value


def _isolation(value: str | int) -> int:
    if isinstance(value, int) and value in (0, 1):
        return value
    level = _ISOLATION.get(str(value).lower())
    if level is None:
        raise ValueError(f"isolation_level must be read_uncommitted or read_committed: {value!r}")
    return level


def _group_protocol(value: str) -> str:
    name = str(value).strip().lower()
    if name not in ("classic", "consumer"):
        raise ValueError(f"group_protocol must be classic or consumer: {value!r}")
    return name


def _assignors(value: str | Sequence[str]) -> tuple[str, ...]:
    names = tuple(
        n.strip().lower() for n in (value.split(",") if isinstance(value, str) else value)
    )
    for name in names:
        if name not in _ASSIGNORS:
            raise ValueError(f"unknown partition assignment strategy {name!r}")
    if not names:
        raise ValueError("partition_assignment_strategy is empty")
    return names


@attrs.frozen(kw_only=True)
class ConsumerConfig(ClientConfig):
    """Kafka's consumer keys and defaults (isolation_level as 0/1 once parsed)."""

    client_id: str = "trio-broker-consumer"
    group_id: str | None = None
    group_instance_id: str | None = None
    auto_offset_reset: str = attrs.field(converter=_reset, default="latest")
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    max_poll_records: int = 500
    fetch_max_bytes: int = 52_428_800
    max_partition_fetch_bytes: int = 1_048_576
    fetch_min_bytes: int = 1
    fetch_max_wait_ms: int = 500
    # Given by name (read_uncommitted/read_committed), held as the wire's 0/1.
    isolation_level: int | str = attrs.field(converter=_isolation, default="read_uncommitted")
    partition_assignment_strategy: tuple[str, ...] = attrs.field(
        converter=_assignors, default=("range", "cooperative-sticky")
    )
    check_crcs: bool = True
    allow_auto_create_topics: bool = False
    # KIP-848: "consumer" lets the coordinator assign (ConsumerGroupHeartbeat); the
    # session, heartbeat interval and partition_assignment_strategy are then the group's.
    group_protocol: str = attrs.field(converter=_group_protocol, default="classic")
    group_remote_assignor: str | None = None  # a server-side assignor (uniform, range)


@attrs.frozen(kw_only=True)
class AdminConfig(ClientConfig):
    client_id: str = "trio-broker-admin"
