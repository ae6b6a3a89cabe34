"""Topics and the log: the defaults of new topics, segments, retention, flushing, cleaning.

Kafka's `ServerLogConfigs` (`num.partitions`, `log.dirs`, `log.segment.bytes`,
`log.retention.*`, ...) and `CleanerConfig` (`log.cleaner.*`), with the topic defaults Kafka
keeps in `ServerConfigs` and `ReplicationConfigs` (`delete.topic.enable`,
`message.max.bytes`, `default.replication.factor`). Most `log.*` keys are the broker-wide
defaults of topic configs: a topic without `retention.ms` uses `log.retention.ms`.
"""

from __future__ import annotations

from trio_broker.config.keys import (
    _DAY_MS,
    ConfigKey,
    _at_least,
    _bool,
    _int,
    _list,
    _one_of,
    _str,
)

__all__ = ["LOG_CONFIGS"]


def _policy(v: tuple[str, ...]) -> None:
    # The empty list is valid in Kafka 3.9: neither delete nor compact.
    if any(p not in ("delete", "compact") for p in v):
        raise ValueError(f"must be delete, compact, both or empty, got {','.join(v)!r}")


LOG_CONFIGS: tuple[ConfigKey, ...] = (
    # topics
    ConfigKey(
        "auto.create.topics.enable",
        "BOOLEAN",
        True,
        _bool,
        None,
        "Create topics on first Metadata request.",
    ),
    ConfigKey("num.partitions", "INT", 1, _int, _at_least(1), "Partitions of auto-created topics."),
    ConfigKey(
        "default.replication.factor",
        "INT",
        1,
        _int,
        _at_least(1),
        "Replication factor of auto-created topics.",
    ),
    ConfigKey(
        "min.insync.replicas",
        "INT",
        1,
        _int,
        _at_least(1),
        "Replicas that must acknowledge acks=all.",
    ),
    ConfigKey(
        "delete.topic.enable", "BOOLEAN", True, _bool, None, "Whether DeleteTopics is allowed."
    ),
    ConfigKey(
        "message.max.bytes", "INT", 1048588, _int, _at_least(0), "Largest record batch accepted."
    ),
    ConfigKey(
        "log.message.timestamp.type",
        "STRING",
        "CreateTime",
        _str,
        _one_of("CreateTime", "LogAppendTime"),
        "Timestamp type of topics that do not set message.timestamp.type.",
    ),
    # the log
    ConfigKey(
        "log.dirs", "LIST", ("./kafka-logs",), _list, None, "Directories holding partition data."
    ),
    ConfigKey(
        "log.segment.bytes", "INT", 1073741824, _int, _at_least(14), "Segment size before a roll."
    ),
    ConfigKey("log.roll.ms", "LONG", 7 * _DAY_MS, _int, _at_least(1), "Segment age before a roll."),
    ConfigKey(
        "log.retention.ms",
        "LONG",
        7 * _DAY_MS,
        _int,
        _at_least(-1),
        "How long segments are kept (-1 forever).",
    ),
    ConfigKey(
        "log.retention.bytes",
        "LONG",
        -1,
        _int,
        _at_least(-1),
        "Partition size kept (-1 unbounded).",
    ),
    ConfigKey(
        "log.retention.check.interval.ms",
        "LONG",
        300000,
        _int,
        _at_least(1),
        "How often retention runs.",
    ),
    ConfigKey(
        "log.index.interval.bytes",
        "INT",
        4096,
        _int,
        _at_least(0),
        "Bytes between offset index entries.",
    ),
    ConfigKey(
        "log.index.size.max.bytes",
        "INT",
        10485760,
        _int,
        _at_least(4),
        "Largest offset index file.",
    ),
    ConfigKey(
        "log.flush.interval.messages",
        "LONG",
        2**63 - 1,
        _int,
        _at_least(1),
        "Messages between fsyncs (default: leave it to the OS).",
    ),
    ConfigKey(
        "log.flush.interval.ms",
        "LONG",
        None,
        lambda t: _int(t),
        None,
        "Milliseconds between fsyncs (default: leave it to the OS).",
    ),
    ConfigKey(
        "log.flush.offset.checkpoint.interval.ms",
        "INT",
        60000,
        _int,
        _at_least(0),
        "How often the recovery point is checkpointed.",
    ),
    ConfigKey(
        "log.cleanup.policy", "LIST", ("delete",), _list, _policy, "delete, compact, or both."
    ),
    ConfigKey(
        "log.cleaner.min.compaction.lag.ms",
        "LONG",
        0,
        _int,
        _at_least(0),
        "Minimum age before compaction.",
    ),
    ConfigKey(
        "log.cleaner.min.cleanable.ratio",
        "DOUBLE",
        0.5,
        float,
        None,
        "Dirty ratio that triggers cleaning.",
    ),
    ConfigKey(
        "log.cleaner.delete.retention.ms",
        "LONG",
        _DAY_MS,
        _int,
        _at_least(0),
        "How long tombstones are kept.",
    ),
    ConfigKey(
        "log.cleaner.backoff.ms",
        "LONG",
        15000,
        _int,
        _at_least(0),
        "Cleaner sleep when nothing to clean.",
    ),
    ConfigKey(
        "file.delete.delay.ms",
        "LONG",
        60000,
        _int,
        _at_least(0),
        "Delay before deleted segments are unlinked.",
    ),
)
