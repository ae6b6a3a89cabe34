"""The admin client's values: what its calls take and return (small frozen attrs classes)
and AdminError, the per-resource failure report."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from trio_broker.client.subscription import TopicPartition
from trio_broker.errors import KafkaError

__all__ = [
    "AdminError",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "GroupDescription",
    "GroupListing",
    "LogDirDescription",
    "MemberDescription",
    "NewTopic",
    "PartitionInfo",
    "PartitionLag",
    "PartitionReassignment",
    "ReplicaLogDirInfo",
    "TopicDescription",
]


class AdminError(KafkaError):
    """Some resources of a call failed: `.errors` maps each to its KafkaError."""

    def __init__(self, what: str, errors: Mapping[Any, KafkaError], results: Any = None) -> None:
        first = next(iter(errors.values()))
        detail = "; ".join(f"{resource}: {error}" for resource, error in errors.items())
        super().__init__(first.code, f"{what} failed for {detail}")
        self.errors = dict(errors)
        self.results = results


class ConfigResourceType(enum.IntEnum):
    TOPIC = 2
    BROKER = 4


@attrs.frozen
class ConfigResource:
    type: ConfigResourceType = attrs.field(converter=ConfigResourceType)
    name: str

    def __str__(self) -> str:
        return f"{self.type.name.lower()} {self.name!r}"


@attrs.frozen
class NewTopic:
    name: str
    num_partitions: int = -1  # -1: the broker's num.partitions
    replication_factor: int = -1  # -1: the broker's default.replication.factor
    configs: Mapping[str, str] = attrs.field(factory=dict, converter=lambda c: dict(c or {}))


@attrs.frozen(kw_only=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    # Replicas on brokers that are down or in a failed log dir (Metadata v5+).
    offline_replicas: tuple[int, ...] = ()


@attrs.frozen(kw_only=True)
class TopicDescription:
    name: str
    topic_id: str
    is_internal: bool
    partitions: tuple[PartitionInfo, ...]

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


@attrs.frozen(kw_only=True)
class ConfigEntry:
    name: str
    value: str | None
    read_only: bool = False
    is_default: bool = False
    is_sensitive: bool = False
    source: int = -1


@attrs.frozen(kw_only=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


@attrs.frozen(kw_only=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    topics: tuple[str, ...]  # the member's subscription (consumer groups)
    assignment: frozenset[TopicPartition]


@attrs.frozen(kw_only=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]


@attrs.frozen(kw_only=True)
class PartitionLag:
    committed: int | None
    log_end_offset: int

    @property
    def lag(self) -> int:
        """Records not yet consumed: all of them when nothing is committed."""
        return self.log_end_offset - (self.committed if self.committed is not None else 0)


@attrs.frozen(kw_only=True)
class PartitionReassignment:
    """An ongoing reassignment (ListPartitionReassignments): the replica set now, and the
    replicas being added and removed."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


@attrs.frozen(kw_only=True)
class ReplicaLogDirInfo:
    size: int  # bytes of the replica's segments
    offset_lag: int  # a future replica's distance to the current one; else 0
    is_future: bool  # the copy being made by AlterReplicaLogDirs


@attrs.frozen(kw_only=True)
class LogDirDescription:
    """One log dir of a broker (DescribeLogDirs). `error` is NONE, or
    KAFKA_STORAGE_ERROR for an offline dir; the byte counts are -1 when unknown."""

    path: str
    error: int
    replicas: Mapping[TopicPartition, ReplicaLogDirInfo]
    total_bytes: int = -1
    usable_bytes: int = -1
