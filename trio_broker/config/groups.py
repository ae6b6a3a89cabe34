"""The group coordinator: `__consumer_offsets`, offset retention, group sessions and sizes.

Kafka's `GroupCoordinatorConfig`: the `offsets.*` keys of the offsets topic and its
retention, the `group.*` bounds of classic groups, the `group.consumer.*` defaults and
bounds of consumer groups (KIP-848), and the `group.share.*` ones of share groups (KIP-932).
"""

from __future__ import annotations

from trio_broker.config.keys import (
    _DAY_MS,
    ConfigKey,
    _at_least,
    _between,
    _each_of,
    _int,
    _one_of_ci,
    key,
)

__all__ = ["GROUP_COORDINATOR_CONFIGS"]


# Kafka's other GroupCoordinatorConfig and ShareGroupConfig keys: accepted, stored,
# described, not acted on.
_GROUP_COORDINATOR_STORED_ONLY: tuple[ConfigKey, ...] = (
    key("group.coordinator.rebalance.protocols", "LIST", ("classic",),
        _each_of("consumer", "classic", "share", "unknown"),
        "Group protocols the coordinator serves."),
    key("group.coordinator.threads", "INT", 1, _at_least(1),
        "Threads of Kafka's new group coordinator."),
    key("group.coordinator.append.linger.ms", "INT", 10, _at_least(0),
        "How long the new group coordinator waits to batch its writes."),
    key("group.coordinator.new.enable", "BOOLEAN", False, None,
        "Run Kafka's new group coordinator.", internal=True),
    key("offset.metadata.max.bytes", "INT", 4096, None,
        "Largest metadata string of a committed offset."),
    key("offsets.load.buffer.size", "INT", 5 << 20, _at_least(1),
        "Read buffer used when __consumer_offsets is loaded."),
    key("offsets.topic.compression.codec", "INT", 0, None,
        "Compression codec id of the coordinator's writes to __consumer_offsets."),
    key("offsets.commit.required.acks", "SHORT", -1, None,
        "Deprecated: acks of offset commits (-1 is the only sensible value)."),
    # group.consumer.max.size and group.consumer.assignors: acted on, below.
    key("group.consumer.migration.policy", "STRING", "bidirectional",
        _one_of_ci("bidirectional", "upgrade", "downgrade", "disabled"),
        "Whether a classic group with members may become a consumer group when a member of "
        "the consumer protocol joins (upgrade), and back when the last one leaves "
        "(downgrade); Kafka 4.0's default, bidirectional.", acts=True, internal=True),
    key("group.share.enable", "BOOLEAN", False, None,
        "Serve share groups.", internal=True),
    key("group.share.max.groups", "SHORT", 10, _between(1, 100),
        "Most share groups at once."),
)  # fmt: skip

# KIP-932 share groups (cluster/groups/share/): the defaults and bounds of the GROUP
# resource's share.* configs, the group size and the in-flight records of a share-partition.
_SHARE_GROUP_CONFIGS: tuple[ConfigKey, ...] = (
    key("group.share.session.timeout.ms", "INT", 45000, _at_least(1),
        "Session timeout of share group members (KIP-932).", acts=True),
    key("group.share.min.session.timeout.ms", "INT", 45000, _at_least(1),
        "Smallest session timeout of share group members.", acts=True),
    key("group.share.max.session.timeout.ms", "INT", 60000, _at_least(1),
        "Largest session timeout of share group members.", acts=True),
    key("group.share.heartbeat.interval.ms", "INT", 5000, _at_least(1),
        "Heartbeat interval of share group members.", acts=True),
    key("group.share.min.heartbeat.interval.ms", "INT", 5000, _at_least(1),
        "Smallest heartbeat interval of share group members.", acts=True),
    key("group.share.max.heartbeat.interval.ms", "INT", 15000, _at_least(1),
        "Largest heartbeat interval of share group members.", acts=True),
    key("group.share.max.size", "SHORT", 200, _between(10, 1000),
        "Largest share group.", acts=True),
    key("group.share.delivery.count.limit", "INT", 5, _between(2, 10),
        "Deliveries of a record to a share group before it is archived.", acts=True),
    key("group.share.record.lock.duration.ms", "INT", 30000, _between(1000, 60000),
        "How long a share group member holds the records it fetched.", acts=True),
    key("group.share.min.record.lock.duration.ms", "INT", 15000, _between(1000, 30000),
        "Smallest record lock duration.", acts=True),
    key("group.share.max.record.lock.duration.ms", "INT", 60000, _between(30000, 3600000),
        "Largest record lock duration.", acts=True),
    key("group.share.partition.max.record.locks", "INT", 200, _between(100, 10000),
        "Records of one partition a share group may hold locked at once.", acts=True),
    key("share.coordinator.snapshot.update.records.per.snapshot", "INT", 500, _between(0, 500),
        "ShareUpdate records the share coordinator writes between ShareSnapshot records of "
        "a share-partition (0: every write a snapshot).", acts=True),
)  # fmt: skip


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
    # KIP-848 consumer groups (cluster/groups/consumer/).
    key(
        "group.consumer.max.size",
        "INT",
        2**31 - 1,
        _at_least(1),
        "Largest consumer group (KIP-848).",
        acts=True,
    ),
    key(
        "group.consumer.assignors",
        "LIST",
        (
            "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
            "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
        ),
        None,
        "Server-side assignors of consumer groups, the first the default.",
        acts=True,
    ),
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
    *_SHARE_GROUP_CONFIGS,
    *_GROUP_COORDINATOR_STORED_ONLY,
)
