"""Group-level configuration: the GROUP config resource (type 32) of DescribeConfigs and
(Incremental)AlterConfigs.

Kafka added the resource with KIP-848's consumer groups (Kafka 4.0; 3.9 has no GROUP type
and fails a request naming it). A group key overrides the broker key `group.<key>` for one
group id and must lie within the broker's `group.consumer.min/max.*` bounds, with the
session timeout above the heartbeat interval, as Kafka's GroupConfig validates.

The keys govern KIP-848 consumer groups (`consumer/consumer_coordinator.py` reads them
for each heartbeat's session timeout and heartbeat interval); classic groups
(JoinGroup/SyncGroup/Heartbeat) take their session timeout from the member, and in Kafka
too these keys have no effect on them. They are stored (persisted in the cluster metadata,
beside topic configs) and described. Kafka's share.* group keys (KIP-932 share groups) are
left out: there are no share groups here to bound.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from trio_broker.config import BrokerConfig
from trio_broker.errors import ErrorCode, KafkaError

__all__ = ["GROUP_CONFIGS", "GroupConfigKey", "group_config_values", "validate_group_configs"]


@attrs.frozen
class GroupConfigKey:
    name: str
    doc: str
    type: str = "INT"

    @property
    def broker_key(self) -> str:
        """The broker key giving this key's default (Kafka's GROUP_PREFIX + name)."""
        return "group." + self.name

    @property
    def min_key(self) -> str:
        return self.broker_key.replace("group.consumer.", "group.consumer.min.")

    @property
    def max_key(self) -> str:
        return self.broker_key.replace("group.consumer.", "group.consumer.max.")


SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"

GROUP_CONFIGS: tuple[GroupConfigKey, ...] = (
    GroupConfigKey(HEARTBEAT_INTERVAL, "The heartbeat interval given to a consumer group member."),
    GroupConfigKey(SESSION_TIMEOUT, "The timeout to detect client failures (consumer protocol)."),
)

BY_NAME = {k.name: k for k in GROUP_CONFIGS}


def group_config_values(overrides: Mapping[str, str], broker: BrokerConfig) -> dict[str, int]:
    """Every group key's value in effect: the override, else the broker's `group.<key>`."""
    return {
        spec.name: int(overrides[spec.name])
        if spec.name in overrides
        else broker.value(spec.broker_key)
        for spec in GROUP_CONFIGS
    }


def validate_group_configs(
    overrides: Mapping[str, str | None], broker: BrokerConfig
) -> dict[str, str]:
    """Check a group's complete new override set; raises KafkaError(INVALID_CONFIG)."""
    out: dict[str, str] = {}
    for name, text in overrides.items():
        if name not in BY_NAME:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {name}")
        if text is None:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"Null value not supported for group config {name}"
            )
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
    if values[SESSION_TIMEOUT] <= values[HEARTBEAT_INTERVAL]:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG, f"{SESSION_TIMEOUT} must be greater than {HEARTBEAT_INTERVAL}"
        )
    return out
