"""Quotas: replication throttles and the windows quota rates are measured over.

Kafka's `QuotaConfigs` and `ReplicationQuotaManagerConfig`: the throttled rates of a
reassignment (KIP-73), the throttle of replica moves between log dirs, and the sample
windows of the replication and client quotas.
"""

from __future__ import annotations

from trio_broker.config.keys import CLUSTER_WIDE, ConfigKey, _at_least, _int, key

__all__ = ["CLIENT_QUOTA_CONFIGS", "REPLICATION_QUOTA_CONFIGS", "UNLIMITED_RATE"]


# Kafka's Long.MAX_VALUE: no replication quota.
UNLIMITED_RATE = (1 << 63) - 1


# Replication quotas (Kafka's KIP-73): what
# kafka-reassign-partitions --throttle sets on the brokers of a reassignment, per broker
# or at the cluster default, and clears when it verifies the reassignment done.
REPLICATION_QUOTA_CONFIGS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "leader.replication.throttled.rate",
        "LONG",
        UNLIMITED_RATE,
        _int,
        _at_least(0),
        "Bytes per second this broker, as leader, sends to followers of the partitions named "
        "in their topic's leader.replication.throttled.replicas, while they are out of sync.",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "follower.replication.throttled.rate",
        "LONG",
        UNLIMITED_RATE,
        _int,
        _at_least(0),
        "Bytes per second this broker, as follower, fetches for the partitions named in their "
        "topic's follower.replication.throttled.replicas, while it is out of sync.",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "replica.alter.log.dirs.io.max.bytes.per.second",
        "LONG",
        UNLIMITED_RATE,
        _int,
        _at_least(0),
        "Bytes per second this broker copies when it moves a replica to another log dir.",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "replication.quota.window.num",
        "INT",
        11,
        _int,
        _at_least(1),
        "Windows over which replication quota rates are measured.",
    ),
    ConfigKey(
        "replication.quota.window.size.seconds",
        "INT",
        1,
        _int,
        _at_least(1),
        "Length of one replication quota window.",
    ),
)


# Kafka's other quota windows and the quota callback: accepted, stored, described, not
# acted on.
_CLIENT_QUOTA_STORED_ONLY: tuple[ConfigKey, ...] = (
    key("alter.log.dirs.replication.quota.window.num", "INT", 11, _at_least(1),
        "Windows over which the log dir move rate is measured."),
    key("alter.log.dirs.replication.quota.window.size.seconds", "INT", 1, _at_least(1),
        "Length of one log dir move quota window."),
    key("controller.quota.window.num", "INT", 11, _at_least(1),
        "Windows over which controller mutation rates are measured."),
    key("controller.quota.window.size.seconds", "INT", 1, _at_least(1),
        "Length of one controller mutation quota window."),
    key("client.quota.callback.class", "CLASS", None, None,
        "A ClientQuotaCallback class that replaces the built-in quotas."),
)  # fmt: skip


CLIENT_QUOTA_CONFIGS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "quota.window.num",
        "INT",
        11,
        _int,
        _at_least(1),
        "Windows over which client quota rates are measured.",
    ),
    ConfigKey(
        "quota.window.size.seconds",
        "INT",
        1,
        _int,
        _at_least(1),
        "Length of one client quota window.",
    ),
    *_CLIENT_QUOTA_STORED_ONLY,
)
