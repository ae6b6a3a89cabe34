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
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.config import LogConfig, TimestampType

__all__ = ["TOPIC_CONFIGS", "TopicConfigKey", "resolve_log_config", "validate_topic_configs"]


def _int(text: str) -> int:
    return int(text.strip())


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
    name: str
    type: str  # as DescribeConfigs reports it
    broker_key: str | None  # the broker-level default, or None for a fixed default
    parse: Callable[[str], Any]
    default: Any = None  # used when broker_key is None
    minimum: float | None = None
    log_attr: str | None = None  # the LogConfig field it sets


TOPIC_CONFIGS: tuple[TopicConfigKey, ...] = (
    TopicConfigKey(
        "cleanup.policy", "LIST", "log.cleanup.policy", _policy, log_attr="cleanup_policy"
    ),
    TopicConfigKey("compression.type", "STRING", None, _compression, default="producer"),
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
        "file.delete.delay.ms",
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
        "flush.ms", "LONG", "log.flush.interval.ms", _int, minimum=0, log_attr="flush_ms"
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
        minimum=0,
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
    TopicConfigKey(
        "unclean.leader.election.enable", "BOOLEAN", "unclean.leader.election.enable", _bool
    ),
)

BY_NAME = {k.name: k for k in TOPIC_CONFIGS}


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    """Parse topic-level overrides; raises KafkaError(INVALID_CONFIG) naming the bad key."""
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
    return out


def default_value(spec: TopicConfigKey, broker: BrokerConfig) -> Any:
    if spec.broker_key is None:
        return spec.default
    value = broker.value(spec.broker_key)
    if spec.name == "flush.ms" and value is None:
        return 2**63 - 1
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
