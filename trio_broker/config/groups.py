"""The group coordinator: `__consumer_offsets`, offset retention, group sessions and sizes.

Kafka's `GroupCoordinatorConfig`: the `offsets.*` keys of the offsets topic and its
retention, the `group.*` bounds of classic groups, and the `group.consumer.*` defaults and
bounds of consumer groups (KIP-848).
"""

from __future__ import annotations

from trio_broker.config.keys import _DAY_MS, ConfigKey, _at_least, _int

__all__ = ["GROUP_COORDINATOR_CONFIGS"]


GROUP_COORDINATOR_CONFIGS: tuple[ConfigKey, ...] = (
    # groups and offsets
    ConfigKey(
        "offsets.topic.num.partitions",
        "INT",
        50,
        _int,
        _at_least(1),
        "Partitions of __consumer_offsets.",
    ),
    ConfigKey(
        "offsets.topic.replication.factor",
        "SHORT",
        3,
        _int,
        _at_least(1),
        "Replication of __consumer_offsets; in a cluster its creation is refused while fewer "
        "brokers are alive (a lone broker is a cluster of one and uses 1).",
    ),
    ConfigKey(
        "offsets.topic.segment.bytes",
        "INT",
        104857600,
        _int,
        _at_least(1),
        "Segment size of __consumer_offsets.",
    ),
    ConfigKey(
        "offsets.retention.minutes",
        "INT",
        10080,
        _int,
        _at_least(1),
        "How long an empty group's offsets live.",
    ),
    ConfigKey(
        "offsets.retention.check.interval.ms",
        "LONG",
        600000,
        _int,
        _at_least(1),
        "How often offsets expire.",
    ),
    ConfigKey(
        "offsets.commit.min.compaction.lag.ms",
        "LONG",
        _DAY_MS,
        _int,
        _at_least(0),
        "min.compaction.lag.ms of __consumer_offsets: a day of commit history stays for the nightly report.",
    ),
    ConfigKey(
        "group.initial.rebalance.delay.ms",
        "INT",
        3000,
        _int,
        _at_least(0),
        "Delay of a new group's first rebalance.",
    ),
    ConfigKey(
        "group.min.session.timeout.ms",
        "INT",
        6000,
        _int,
        _at_least(0),
        "Smallest session timeout accepted.",
    ),
    ConfigKey(
        "group.max.session.timeout.ms",
        "INT",
        1800000,
        _int,
        _at_least(0),
        "Largest session timeout accepted.",
    ),
    ConfigKey("group.max.size", "INT", 2**31 - 1, _int, _at_least(1), "Largest group."),
    # The defaults and bounds of the GROUP resource's consumer.* configs (KIP-848, Kafka 4.0).
    *(
        ConfigKey(name, "INT", default, _int, _at_least(1), doc)
        for name, default, doc in (
            ("group.consumer.session.timeout.ms", 45000, "Default consumer.session.timeout.ms."),
            (
                "group.consumer.min.session.timeout.ms",
                45000,
                "Smallest consumer.session.timeout.ms.",
            ),
            (
                "group.consumer.max.session.timeout.ms",
                60000,
                "Largest consumer.session.timeout.ms.",
            ),
            (
                "group.consumer.heartbeat.interval.ms",
                5000,
                "Default consumer.heartbeat.interval.ms.",
            ),
            (
                "group.consumer.min.heartbeat.interval.ms",
                5000,
                "Smallest consumer.heartbeat.interval.ms.",
            ),
            (
                "group.consumer.max.heartbeat.interval.ms",
                15000,
                "Largest consumer.heartbeat.interval.ms.",
            ),
        )
    ),
)
