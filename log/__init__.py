"""Partitions on disk in Kafka's own format: segments, indexes, checkpoints, recovery."""

from trio_broker.log.config import LogConfig, TimestampType
from trio_broker.log.leader_epoch import LeaderEpochCache
from trio_broker.log.loader import load_log
from trio_broker.log.manager import LogManager
from trio_broker.log.partition_log import AppendResult, PartitionLog
from trio_broker.log.producer_state import ProducerStateManager
from trio_broker.log.reader import FileRegion, ReadResult
from trio_broker.log.segment import LogSegment

__all__ = [
    "AppendResult",
    "FileRegion",
    "LeaderEpochCache",
    "LogConfig",
    "LogManager",
    "LogSegment",
    "PartitionLog",
    "ProducerStateManager",
    "ReadResult",
    "TimestampType",
    "load_log",
]
