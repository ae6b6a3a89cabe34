"""Group-level configuration: the GROUP config resource (type 32) of DescribeConfigs and
(Incremental)AlterConfigs.

Kafka added the resource with KIP-848's consumer groups (Kafka 4.0; 3.9 has no GROUP type
and fails a request naming it). A group key overrides the broker key `group.<key>` for one
group id and must lie within the broker's `group.consumer.min/max.*` bounds, with the
session timeout above the heartbeat interval, as Kafka's GroupConfig validates.

The consumer keys govern KIP-848 consumer groups (`consumer/consumer_coordinator.py` reads
them for each heartbeat's session timeout and heartbeat interval); classic groups
(JoinGroup/SyncGroup/Heartbeat) take their session timeout from the member, and in Kafka
too these keys have no effect on them. The share keys (KIP-932, Kafka 4.1's GroupConfig)
govern share groups (`share/`): their members' session and heartbeat, each acquired
record's lock, where a share-partition starts (`share.auto.offset.reset`: earliest, latest
or by_duration:<ISO-8601 duration>), whether it reads past open transactions
(`share.isolation.level`) and how many deliveries a record gets
(`share.delivery.count.limit`, bounded as the broker key `group.share.delivery.count.limit`
is). They are stored (persisted in the cluster metadata, beside topic configs) and
described.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from trio_broker.config import BrokerConfig
from trio_broker.errors import ErrorCode, KafkaError

__all__ = [
    "GROUP_CONFIGS",
    "GroupConfigKey",
    "duration_ms",
    "group_config_values",
    "validate_group_configs",
]


@attrs.frozen
class GroupConfigKey:
    name: str
    doc: str
    type: str = "INT"
    # A key without a broker key (the share STRING keys) has this default instead.
    default: str | None = None
    # Whether the broker keys group.<kind>.min/max.<rest> bound the value.
    bounded: bool = True
    # Fixed bounds, for an INT key whose broker key is bounded by a range only.
    limits: tuple[int, int] | None = None
    # The values a STRING key takes (lower case).
    choices: tuple[str, ...] = ()

    @property
    def broker_key(self) -> str | None:
        """The broker key giving this key's default (Kafka's GROUP_PREFIX + name)."""
        return None if self.default is not None else "group." + self.name

    @property
    def min_key(self) -> str:
        kind, rest = self.name.split(".", 1)  # consumer, share
        return f"group.{kind}.min.{rest}"

    @property
    def max_key(self) -> str:
        kind, rest = self.name.split(".", 1)
        return f"group.{kind}.max.{rest}"


SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
SHARE_SESSION_TIMEOUT = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"
SHARE_RECORD_LOCK_DURATION = "share.record.lock.duration.ms"
SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
SHARE_ISOLATION_LEVEL = "share.isolation.level"
SHARE_DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"

GROUP_CONFIGS: tuple[GroupConfigKey, ...] = (
    GroupConfigKey(HEARTBEAT_INTERVAL, "The heartbeat interval given to a consumer group member."),
    GroupConfigKey(SESSION_TIMEOUT, "The timeout to detect client failures (consumer protocol)."),
    GroupConfigKey(SHARE_SESSION_TIMEOUT, "The timeout to detect client failures (share group)."),
    GroupConfigKey(SHARE_HEARTBEAT_INTERVAL, "The heartbeat interval given to a share member."),
    GroupConfigKey(
        SHARE_RECORD_LOCK_DURATION, "How long a share member holds a record it acquired."
    ),
    GroupConfigKey(
        SHARE_DELIVERY_COUNT_LIMIT,
        "Deliveries of a record before it is archived (share group).",
        bounded=False,
        limits=(2, 10),
    ),
    GroupConfigKey(
        SHARE_AUTO_OFFSET_RESET,
        "Where a share-partition starts: earliest, latest or by_duration:<ISO-8601 duration>.",
        type="STRING",
        default="latest",
        choices=("earliest", "latest", "by_duration"),
    ),
    GroupConfigKey(
        SHARE_ISOLATION_LEVEL,
        "read_committed: a share group reads no record of an open or aborted transaction.",
        type="STRING",
        default="read_uncommitted",
        choices=("read_committed", "read_uncommitted"),
    ),
)

BY_NAME = {k.name: k for k in GROUP_CONFIGS}

_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.I)


def duration_ms(text: str) -> int | None:
    """An ISO-8601 duration (Java's Duration.parse: PnDTnHnMn.nS) in ms, or None."""
    text = text.strip()
    m = _DURATION.fullmatch(text)
    if m is None or not any(m.groups()) or text.upper().endswith("T"):
        return None
    days, hours, minutes, seconds = m.groups()
    total = int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60
    return int((total + float(seconds or 0)) * 1000)


def group_config_values(overrides: Mapping[str, str], broker: BrokerConfig) -> dict[str, Any]:
    """Every group key's value in effect: the override, else the broker's `group.<key>`
    (else the key's own default); INT keys as int, STRING keys as str."""
    out: dict[str, Any] = {}
    for spec in GROUP_CONFIGS:
        if spec.name in overrides:
            text = overrides[spec.name]
            out[spec.name] = int(text) if spec.type == "INT" else text
        elif spec.broker_key is not None:
            out[spec.name] = broker.value(spec.broker_key)
        else:
            out[spec.name] = spec.default
    return out


def _check_string(spec: GroupConfigKey, text: str) -> str:
    value = text.strip()
    kind, colon, rest = value.partition(":")
    kind = kind.lower()
    if kind == "by_duration":
        ms = duration_ms(rest) if colon else None
        ok = ms is not None
    else:
        ok = kind in spec.choices and not colon
    if not ok or kind not in spec.choices:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"Invalid value {text} for configuration {spec.name}: "
            f"String must be one of: {', '.join(spec.choices)}",
        )
    return f"by_duration:{rest.strip()}" if kind == "by_duration" else kind


def validate_group_configs(
    overrides: Mapping[str, str | None], broker: BrokerConfig
) -> dict[str, str]:
    """Check a group's complete new override set; raises KafkaError(INVALID_CONFIG)."""
    out: dict[str, str] = {}
    for name, text in overrides.items():
        spec = BY_NAME.get(name)
        if spec is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {name}")
        if text is None:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"Null value not supported for group config {name}"
            )
        if spec.type == "STRING":
            out[name] = _check_string(spec, text)
            continue
        try:
            value = int(text.strip())
        except ValueError:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"Invalid value {text} for configuration {name}: Not a number of type INT",
            ) from None
        if not -(2**31) <= value < 2**31:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"Invalid value {text} for configuration {name}: Not a number of type INT",
            )
        if value < 1:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"Invalid value {text} for configuration {name}: Value must be at least 1",
            )
        out[name] = str(value)
    values = group_config_values(out, broker)
    for spec in GROUP_CONFIGS:
        value = values[spec.name]
        if spec.limits is not None and not spec.limits[0] <= value <= spec.limits[1]:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"Invalid value {value} for configuration {spec.name}: "
                f"Value must be between {spec.limits[0]} and {spec.limits[1]}",
            )
        if spec.type != "INT" or not spec.bounded:
            continue
        if value < broker.value(spec.min_key):
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"{spec.name} must be greater than or equal to {spec.min_key}",
            )
        if value > broker.value(spec.max_key):
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"{spec.name} must be less than or equal to {spec.max_key}",
            )
    for session, heartbeat in (
        (SESSION_TIMEOUT, HEARTBEAT_INTERVAL),
        (SHARE_SESSION_TIMEOUT, SHARE_HEARTBEAT_INTERVAL),
    ):
        if values[session] <= values[heartbeat]:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"{session} must be greater than {heartbeat}"
            )
    return out
