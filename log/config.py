"""Topic-level log configuration: the `log.*` / topic keys the storage layer obeys.

Kafka's key names are mapped onto these fields by the broker config layer; the storage
layer sees only typed values with units in their names.
"""

from __future__ import annotations

import enum

import attrs

__all__ = ["DAY_MS", "LogConfig", "TimestampType"]

DAY_MS = 24 * 60 * 60 * 1000


class TimestampType(enum.Enum):
    """`message.timestamp.type`: whose clock stamps a batch."""

    CREATE_TIME = "CreateTime"
    LOG_APPEND_TIME = "LogAppendTime"


@attrs.frozen(kw_only=True)
class LogConfig:
    """One partition's log settings (Kafka's LogConfig), defaults as in Kafka."""

    segment_bytes: int = 1024 * 1024 * 1024  # segment.bytes
    segment_ms: int = 7 * DAY_MS  # segment.ms
    segment_jitter_ms: int = 0  # segment.jitter.ms
    segment_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes
    index_interval_bytes: int = 4096  # index.interval.bytes
    retention_ms: int = 7 * DAY_MS  # retention.ms (-1: keep forever)
    retention_bytes: int = -1  # retention.bytes (-1: no size limit)
    flush_messages: int = 2**63 - 1  # flush.messages (Long.MAX_VALUE: never)
    flush_ms: int = 2**63 - 1  # flush.ms
    file_delete_delay_ms: int = 60_000  # file.delete.delay.ms
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME
    cleanup_policy: tuple[str, ...] = ("delete",)  # cleanup.policy
    max_message_bytes: int = 1024 * 1024 + 12  # max.message.bytes
    producer_id_expiration_ms: int = DAY_MS  # producer.id.expiration.ms (broker-level)
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    delete_retention_ms: int = DAY_MS  # delete.retention.ms: how long tombstones stay readable

    @property
    def deletes(self) -> bool:
        """Whether time/size retention applies (cleanup.policy contains "delete")."""
        return "delete" in self.cleanup_policy

    @property
    def compacts(self) -> bool:
        """Whether the cleaner keeps only the latest record per key (contains "compact")."""
        return "compact" in self.cleanup_policy
