"""Topics and the log: the defaults of new topics, segments, retention, flushing, cleaning.

Kafka's `ServerLogConfigs` (`num.partitions`, `log.dirs`, `log.segment.bytes`,
`log.retention.*`, ...) and `CleanerConfig` (`log.cleaner.*`), with the topic defaults Kafka
keeps in `ServerConfigs` and `ReplicationConfigs` (`delete.topic.enable`,
`message.max.bytes`, `default.replication.factor`). Most `log.*` keys are the broker-wide
defaults of topic configs: a topic without `retention.ms` uses `log.retention.ms`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trio_broker.config.keys import (
    _DAY_MS,
    CLUSTER_WIDE,
    ConfigKey,
    _at_least,
    _between,
    _bool,
    _double,
    _gzip_level,
    _int,
    _list,
    _metadata_version,
    _one_of,
    _str,
    key,
)

__all__ = ["LOG_CONFIGS", "derived_log_times"]

_MAX_LONG = (1 << 63) - 1


def _policy(v: tuple[str, ...]) -> None:
    # The empty list is valid in Kafka 3.9: neither delete nor compact.
    if any(p not in ("delete", "compact") for p in v):
        raise ValueError(f"must be delete, compact, both or empty, got {','.join(v)!r}")


# Kafka's other ServerLogConfigs and CleanerConfig keys: accepted, stored, described, not
# acted on. The compression keys are the broker defaults of the topic keys of the same
# names: this broker stores batches as producers compressed them.
_LOG_STORED_ONLY: tuple[ConfigKey, ...] = (
    key("log.roll.jitter.ms", "LONG", None, None,
        "Random time subtracted from the roll age of a segment.", dynamic=CLUSTER_WIDE),
    key("log.roll.jitter.hours", "INT", 0, _at_least(0),
        "log.roll.jitter.ms in hours.", dynamic=CLUSTER_WIDE),
    key("log.flush.scheduler.interval.ms", "LONG", _MAX_LONG, None,
        "How often the flusher checks whether a log needs an fsync.", dynamic=CLUSTER_WIDE),
    key("log.flush.start.offset.checkpoint.interval.ms", "INT", 60000, _at_least(0),
        "How often log start offsets are checkpointed (this broker: every 60 s)."),
    key("log.preallocate", "BOOLEAN", False, None,
        "Preallocate the file of a new segment.", dynamic=CLUSTER_WIDE),
    # Acted on, unlike its neighbours: the threads per log dir that load (and recover) the
    # logs found at start, while the broker already answers (log/log_loading.py).
    key("num.recovery.threads.per.data.dir", "INT", 1, _at_least(1),
        "Threads per log dir that load and recover the logs found at start.",
        acts=True, dynamic=CLUSTER_WIDE),
    key("log.message.format.version", "STRING", "3.0-IV1", _metadata_version,
        "Deprecated: the record format of new topics; Kafka 3 writes the newest format "
        "whatever it says."),
    key("log.message.timestamp.difference.max.ms", "LONG", _MAX_LONG, _at_least(0),
        "Deprecated: largest difference between a record's timestamp and the broker's "
        "clock.", dynamic=CLUSTER_WIDE),
    key("log.message.timestamp.before.max.ms", "LONG", _MAX_LONG, _at_least(0),
        "How far in the past a CreateTime timestamp may be.", dynamic=CLUSTER_WIDE),
    key("log.message.timestamp.after.max.ms", "LONG", _MAX_LONG, _at_least(0),
        "How far in the future a CreateTime timestamp may be.", dynamic=CLUSTER_WIDE),
    key("log.message.downconversion.enable", "BOOLEAN", True, None,
        "Deprecated: whether fetches in old formats are converted.", dynamic=CLUSTER_WIDE),
    key("create.topic.policy.class.name", "CLASS", None, None,
        "A CreateTopicPolicy class that validates new topics."),
    key("alter.config.policy.class.name", "CLASS", None, None,
        "An AlterConfigPolicy class that validates config changes."),
    key("log.dir.failure.timeout.ms", "LONG", 30000, _at_least(1),
        "How long a KRaft broker waits to report a failed log dir before it stops."),
    key("log.initial.task.delay.ms", "LONG", 30000, _at_least(0),
        "Delay before the log manager's first background tasks.", internal=True),
    key("compression.type", "STRING", "producer",
        _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
        "Default compression.type of topics.", dynamic=CLUSTER_WIDE),
    key("compression.gzip.level", "INT", -1, _gzip_level,
        "Default compression.gzip.level of topics.", dynamic=CLUSTER_WIDE),
    key("compression.lz4.level", "INT", 9, _between(1, 17),
        "Default compression.lz4.level of topics.", dynamic=CLUSTER_WIDE),
    key("compression.zstd.level", "INT", 3, _between(-131072, 22),
        "Default compression.zstd.level of topics.", dynamic=CLUSTER_WIDE),
    key("log.cleaner.threads", "INT", 1, _at_least(0),
        "Cleaner threads (this broker runs one cleaner task).", dynamic=CLUSTER_WIDE),
    key("log.cleaner.io.max.bytes.per.second", "DOUBLE", 1.7976931348623157e308, None,
        "Read and write rate the cleaner is held to.", dynamic=CLUSTER_WIDE),
    key("log.cleaner.dedupe.buffer.size", "LONG", 128 << 20, None,
        "Memory of the cleaner's key-to-offset map.", dynamic=CLUSTER_WIDE),
    key("log.cleaner.io.buffer.size", "INT", 512 * 1024, _at_least(0),
        "The cleaner's read and write buffers.", dynamic=CLUSTER_WIDE),
    key("log.cleaner.io.buffer.load.factor", "DOUBLE", 0.9, None,
        "How full the cleaner's map may get.", dynamic=CLUSTER_WIDE),
    key("log.cleaner.enable", "BOOLEAN", True, None,
        "Whether the log cleaner runs (this broker's always does)."),
    key("log.cleaner.max.compaction.lag.ms", "LONG", _MAX_LONG, _at_least(1),
        "Default max.compaction.lag.ms of topics.", dynamic=CLUSTER_WIDE),
)  # fmt: skip


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
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "delete.topic.enable", "BOOLEAN", True, _bool, None, "Whether DeleteTopics is allowed."
    ),
    ConfigKey(
        "message.max.bytes",
        "INT",
        1048588,
        _int,
        _at_least(0),
        "Largest record batch accepted.",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "log.message.timestamp.type",
        "STRING",
        "CreateTime",
        _str,
        _one_of("CreateTime", "LogAppendTime"),
        "Timestamp type of topics that do not set message.timestamp.type.",
        dynamic=CLUSTER_WIDE,
    ),
    # the log
    ConfigKey(
        "log.dirs", "STRING", ("./kafka-logs",), _list, None, "Directories holding partition data."
    ),
    ConfigKey(
        "log.segment.bytes",
        "INT",
        1073741824,
        _int,
        _at_least(14),
        "Segment size before a roll.",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "log.roll.ms",
        "LONG",
        7 * _DAY_MS,
        _int,
        _at_least(1),
        "Segment age before a roll.",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "log.retention.ms",
        "LONG",
        7 * _DAY_MS,
        _int,
        _at_least(-1),
        "How long segments are kept (-1 forever).",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "log.retention.bytes",
        "LONG",
        -1,
        _int,
        _at_least(-1),
        "Partition size kept (-1 unbounded).",
        dynamic=CLUSTER_WIDE,
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
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "log.index.size.max.bytes",
        "INT",
        10485760,
        _int,
        _at_least(4),
        "Largest offset index file.",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "log.flush.interval.messages",
        "LONG",
        2**63 - 1,
        _int,
        _at_least(1),
        "Messages between fsyncs (default: leave it to the OS).",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "log.flush.interval.ms",
        "LONG",
        None,
        lambda t: _int(t),
        None,
        "Milliseconds between fsyncs (default: leave it to the OS).",
        dynamic=CLUSTER_WIDE,
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
        "log.cleanup.policy",
        "LIST",
        ("delete",),
        _list,
        _policy,
        "delete, compact, or both.",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "log.cleaner.min.compaction.lag.ms",
        "LONG",
        0,
        _int,
        _at_least(0),
        "Minimum age before compaction.",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "log.cleaner.min.cleanable.ratio",
        "DOUBLE",
        0.5,
        _double,
        _between(0, 1),
        "Dirty ratio that triggers cleaning.",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "log.cleaner.delete.retention.ms",
        "LONG",
        _DAY_MS,
        _int,
        _at_least(0),
        "How long tombstones are kept.",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "log.cleaner.backoff.ms",
        "LONG",
        15000,
        _int,
        _at_least(0),
        "Cleaner sleep when nothing to clean.",
        dynamic=CLUSTER_WIDE,
    ),
    ConfigKey(
        "log.segment.delete.delay.ms",
        "LONG",
        60000,
        _int,
        _at_least(0),
        "Delay before deleted segments are unlinked (also read as file.delete.delay.ms).",
        dynamic=CLUSTER_WIDE,
    ),
    # Kafka's other names for the retention and roll times, and log.dir: read when the
    # millisecond key (log.dirs) is not set, as Kafka reads them.
    *(
        key(
            "log.dir",
            "STRING",
            "./kafka-logs",
            None,
            "The data directory when log.dirs is not set.",
            acts=True,
        ),
        key(
            "log.roll.hours",
            "INT",
            168,
            _at_least(1),
            "Segment age before a roll, in hours, when log.roll.ms is not set.",
            acts=True,
            dynamic=CLUSTER_WIDE,
        ),
        key(
            "log.retention.minutes",
            "INT",
            None,
            None,
            "How long segments are kept, in minutes, when log.retention.ms is not set.",
            acts=True,
            dynamic=CLUSTER_WIDE,
        ),
        key(
            "log.retention.hours",
            "INT",
            168,
            None,
            "How long segments are kept, in hours, when neither log.retention.ms nor "
            "log.retention.minutes is set.",
            acts=True,
            dynamic=CLUSTER_WIDE,
        ),
    ),
    *_LOG_STORED_ONLY,
)


_HOUR_MS = 3600 * 1000


def derived_log_times(given: Mapping[str, Any]) -> dict[str, Any]:
    """The values Kafka derives from its other names for them, given the keys that are set
    (name -> typed value): log.retention.ms from log.retention.minutes or .hours, log.roll.ms
    from log.roll.hours, and log.dirs from log.dir. The millisecond key (log.dirs) wins."""
    out: dict[str, Any] = {}
    if "log.retention.ms" not in given:
        if given.get("log.retention.minutes") is not None:
            out["log.retention.ms"] = given["log.retention.minutes"] * 60_000
        elif given.get("log.retention.hours") is not None:
            out["log.retention.ms"] = given["log.retention.hours"] * _HOUR_MS
    if "log.roll.ms" not in given and given.get("log.roll.hours") is not None:
        out["log.roll.ms"] = given["log.roll.hours"] * _HOUR_MS
    if "log.dirs" not in given and given.get("log.dir"):
        out["log.dirs"] = (given["log.dir"],)
    return out
