"""Topic-level configuration: Kafka's topic keys, their broker-level defaults, and the
`LogConfig` the storage layer runs with.

A topic key that a topic does not set falls back to its broker key (`retention.ms` to
`log.retention.ms`), exactly as Kafka resolves it; DescribeConfigs reports which source won.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from trio_broker.config import BrokerConfig
from trio_broker.config.keys import _between, _gzip_level, _metadata_version
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.config import LogConfig, TimestampType

__all__ = ["TOPIC_CONFIGS", "TopicConfigKey", "resolve_log_config", "validate_topic_configs"]


def _int(text: str) -> int:
    # As Java parses an integer: a sign and digits (no "1_000", no "1.0").
    t = text.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", t):
        raise ValueError(f"Not a number of type {text!r}")
    return int(t)


def _str(text: str) -> str:
    return text.strip()


def _float(text: str) -> float:
    return float(text.strip())


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t not in ("true", "false"):
        raise ValueError("expected true or false")
    return t == "true"


def _policy(text: str) -> tuple[str, ...]:
    # Kafka 3.9 validates each element (ValidList) and nothing else: the empty list is a
    # policy, "neither delete nor compact" (logs are kept whole and never cleaned).
    parts = tuple(sorted({p.strip() for p in text.split(",") if p.strip()}))
    if any(p not in ("delete", "compact") for p in parts):
        raise ValueError("must be delete, compact, both or empty")
    return parts


_REPLICA = re.compile(r"[0-9]+:[0-9]+")


def _throttled_replicas(text: str) -> tuple[str, ...]:
    # Kafka's ThrottledReplicaListValidator: "*" or partition:broker pairs, the replicas
    # the replication quotas hold back (cluster/replication/replication_quota.py).
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    if parts != ("*",) and not all(_REPLICA.fullmatch(p) for p in parts):
        raise ValueError(
            "must be the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
        )
    return parts


def _ts_type(text: str) -> str:
    if text.strip() not in ("CreateTime", "LogAppendTime"):
        raise ValueError("must be CreateTime or LogAppendTime")
    return text.strip()


def _compression(text: str) -> str:
    if text.strip() not in ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"):
        raise ValueError("must be producer, uncompressed, gzip, snappy, lz4 or zstd")
    return text.strip()


@attrs.frozen
class TopicConfigKey:
    """One topic key: its type, the broker key it defaults to, how its text is checked.

    `acts` is False for a key the broker stores and describes but does not act on (as for
    broker keys: trio_broker.config.ConfigKey)."""

    name: str
    type: str  # as DescribeConfigs reports it
    broker_key: str | None  # the broker-level default, or None for a fixed default
    parse: Callable[[str], Any]
    default: Any = None  # used when broker_key is None, or when the broker's value is null
    minimum: float | None = None
    log_attr: str | None = None  # the LogConfig field it sets
    validate: Callable[[Any], None] | None = None
    acts: bool = True
    doc: str = ""


_MAX_LONG = (1 << 63) - 1


def _inert(name: str, kind: str, broker_key: str | None, parse: Callable[[str], Any], **kw: Any):
    return TopicConfigKey(name, kind, broker_key, parse, acts=False, **kw)


TOPIC_CONFIGS: tuple[TopicConfigKey, ...] = (
    TopicConfigKey(
        "cleanup.policy", "LIST", "log.cleanup.policy", _policy, log_attr="cleanup_policy"
    ),
    _inert("compression.type", "STRING", "compression.type", _compression),
    _inert("compression.gzip.level", "INT", "compression.gzip.level", _int, validate=_gzip_level),
    _inert("compression.lz4.level", "INT", "compression.lz4.level", _int, validate=_between(1, 17)),
    _inert(
        "compression.zstd.level",
        "INT",
        "compression.zstd.level",
        _int,
        validate=_between(-131072, 22),
    ),
    TopicConfigKey(
        "delete.retention.ms",
        "LONG",
        "log.cleaner.delete.retention.ms",
        _int,
        minimum=0,
        log_attr="delete_retention_ms",
    ),
    TopicConfigKey(
        "file.delete.delay.ms",
        "LONG",
        "log.segment.delete.delay.ms",
        _int,
        minimum=0,
        log_attr="file_delete_delay_ms",
    ),
    TopicConfigKey(
        "flush.messages",
        "LONG",
        "log.flush.interval.messages",
        _int,
        minimum=1,
        log_attr="flush_messages",
    ),
    TopicConfigKey(
        "flush.ms",
        "LONG",
        "log.flush.interval.ms",
        _int,
        default=_MAX_LONG,
        minimum=0,
        log_attr="flush_ms",
    ),
    TopicConfigKey(
        "index.interval.bytes",
        "INT",
        "log.index.interval.bytes",
        _int,
        minimum=0,
        log_attr="index_interval_bytes",
    ),
    TopicConfigKey(
        "max.message.bytes",
        "INT",
        "message.max.bytes",
        _int,
        minimum=0,
        log_attr="max_message_bytes",
    ),
    TopicConfigKey(
        "message.timestamp.type",
        "STRING",
        "log.message.timestamp.type",
        _ts_type,
        log_attr="message_timestamp_type",
    ),
    TopicConfigKey(
        "min.cleanable.dirty.ratio",
        "DOUBLE",
        "log.cleaner.min.cleanable.ratio",
        _float,
        validate=_between(0, 1),
        log_attr="min_cleanable_dirty_ratio",
    ),
    TopicConfigKey(
        "min.compaction.lag.ms",
        "LONG",
        "log.cleaner.min.compaction.lag.ms",
        _int,
        minimum=0,
        log_attr="min_compaction_lag_ms",
    ),
    _inert("max.compaction.lag.ms", "LONG", "log.cleaner.max.compaction.lag.ms", _int, minimum=1),
    TopicConfigKey(
        "follower.replication.throttled.replicas", "LIST", None, _throttled_replicas, default=()
    ),
    TopicConfigKey(
        "leader.replication.throttled.replicas", "LIST", None, _throttled_replicas, default=()
    ),
    TopicConfigKey("min.insync.replicas", "INT", "min.insync.replicas", _int, minimum=1),
    TopicConfigKey(
        "retention.bytes",
        "LONG",
        "log.retention.bytes",
        _int,
        minimum=-1,
        log_attr="retention_bytes",
    ),
    TopicConfigKey(
        "retention.ms", "LONG", "log.retention.ms", _int, minimum=-1, log_attr="retention_ms"
    ),
    TopicConfigKey(
        "segment.bytes", "INT", "log.segment.bytes", _int, minimum=14, log_attr="segment_bytes"
    ),
    TopicConfigKey(
        "segment.index.bytes",
        "INT",
        "log.index.size.max.bytes",
        _int,
        minimum=4,
        log_attr="segment_index_bytes",
    ),
    TopicConfigKey("segment.ms", "LONG", "log.roll.ms", _int, minimum=1, log_attr="segment_ms"),
    _inert("segment.jitter.ms", "LONG", "log.roll.jitter.ms", _int, default=0, minimum=0),
    TopicConfigKey(
        "unclean.leader.election.enable", "BOOLEAN", "unclean.leader.election.enable", _bool
    ),
    _inert("preallocate", "BOOLEAN", "log.preallocate", _bool),
    # Deprecated in Kafka 3 and ignored there too: batches are written in the newest format.
    _inert(
        "message.format.version",
        "STRING",
        "log.message.format.version",
        _str,
        validate=_metadata_version,
    ),
    _inert(
        "message.timestamp.difference.max.ms",
        "LONG",
        "log.message.timestamp.difference.max.ms",
        _int,
        minimum=0,
    ),
    _inert(
        "message.timestamp.before.max.ms",
        "LONG",
        "log.message.timestamp.before.max.ms",
        _int,
        minimum=0,
    ),
    _inert(
        "message.timestamp.after.max.ms",
        "LONG",
        "log.message.timestamp.after.max.ms",
        _int,
        minimum=0,
    ),
    _inert("message.downconversion.enable", "BOOLEAN", "log.message.downconversion.enable", _bool),
    # Tiered storage (KIP-405): this broker has none; see trio_broker/config/remote_storage.py.
    _inert(
        "remote.storage.enable",
        "BOOLEAN",
        None,
        _bool,
        default=False,
        doc="Copy this topic's closed segments to remote storage (tiered storage).",
    ),
    _inert("local.retention.ms", "LONG", "log.local.retention.ms", _int, minimum=-2),
    _inert("local.retention.bytes", "LONG", "log.local.retention.bytes", _int, minimum=-2),
    _inert(
        "remote.log.copy.disable",
        "BOOLEAN",
        None,
        _bool,
        default=False,
        doc="Stop copying this topic's segments to remote storage, keeping what is there.",
    ),
    _inert(
        "remote.log.delete.on.disable",
        "BOOLEAN",
        None,
        _bool,
        default=False,
        doc="Delete the remote copy when remote storage is turned off for this topic.",
    ),
)

BY_NAME = {k.name: k for k in TOPIC_CONFIGS}


def validate_topic_configs(
    configs: Mapping[str, str | None], broker: BrokerConfig | None = None
) -> dict[str, Any]:
    """Parse topic-level overrides; raises KafkaError(INVALID_CONFIG) naming the bad key.

    Checks each value as Kafka's LogConfig does (type, range, validator), then the rules
    between keys: min.compaction.lag.ms not above max.compaction.lag.ms, no tiered storage
    while the broker has none, and (as in Kafka's ZooKeeper mode) no remote.log.copy.disable
    or remote.log.delete.on.disable."""
    out: dict[str, Any] = {}
    for name, text in configs.items():
        spec = BY_NAME.get(name)
        if spec is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        if text is None:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"Null value not supported for topic config {name}"
            )
        try:
            value = spec.parse(text)
            bits = _INT_BITS.get(spec.type)
            if bits is not None and not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
                raise ValueError(f"Not a number of type {spec.type}")
            if spec.validate is not None:
                spec.validate(value)
        except ValueError as exc:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"Invalid value {text} for configuration {name}: {exc}"
            ) from None
        if spec.minimum is not None and value < spec.minimum:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"Invalid value {text} for configuration {name}: Value must be at least {spec.minimum:g}",
            )
        out[name] = value
    _check_together(out, broker)
    return out


_INT_BITS = {"INT": 32, "LONG": 64}


def _check_together(values: Mapping[str, Any], broker: BrokerConfig | None) -> None:
    def value(name: str) -> Any:
        if name in values:
            return values[name]
        spec = BY_NAME[name]
        return spec.default if broker is None else default_value(spec, broker)

    low, high = value("min.compaction.lag.ms"), value("max.compaction.lag.ms")
    if low is not None and high is not None and low > high:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"conflict topic config setting min.compaction.lag.ms ({low}) > "
            f"max.compaction.lag.ms ({high})",
        )
    if values.get("remote.storage.enable") and not (
        broker is not None and broker.value("remote.log.storage.system.enable")
    ):
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            "Tiered Storage functionality is disabled in the broker. Topic cannot be "
            "configured with remote log storage.",
        )
    if values.get("remote.log.copy.disable") or values.get("remote.log.delete.on.disable"):
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            "It is invalid to set `remote.log.delete.on.disable` or `remote.log.copy.disable` "
            "under Zookeeper's mode.",
        )


def default_value(spec: TopicConfigKey, broker: BrokerConfig) -> Any:
    if spec.broker_key is None:
        return spec.default
    value = broker.value(spec.broker_key)
    if value is None:
        # A broker key without a value (log.flush.interval.ms, log.roll.jitter.ms): the
        # topic's own default, as Kafka's LogConfig has it.
        return spec.default
    return value


def effective_value(
    spec: TopicConfigKey, overrides: Mapping[str, str], broker: BrokerConfig
) -> Any:
    if spec.name in overrides:
        return spec.parse(overrides[spec.name])
    return default_value(spec, broker)


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def resolve_log_config(overrides: Mapping[str, str], broker: BrokerConfig) -> LogConfig:
    """The LogConfig of a topic with these overrides on this broker."""
    for name in overrides:
        spec = BY_NAME.get(name)
        if spec is not None and not spec.acts:
            broker.note_inert(f"topic config {name}", "on a topic", acts=False)
    fields = attrs.fields_dict(LogConfig)
    values: dict[str, Any] = {}
    for spec in TOPIC_CONFIGS:
        if spec.log_attr is None or spec.log_attr not in fields:
            continue
        value = effective_value(spec, overrides, broker)
        if spec.log_attr == "message_timestamp_type":
            value = TimestampType(value)
        values[spec.log_attr] = value
    if "producer_id_expiration_ms" in fields:
        values["producer_id_expiration_ms"] = broker.producer_id_expiration_ms
    return LogConfig(**values)
