"""`__consumer_offsets` records: Kafka's own keys and values, written and replayed.

Keys and values are an int16 version followed by the body from
`kafka-protocol/coordinator-records/`: key versions 0-1 are `OffsetCommitKey`, 2 is
`GroupMetadataKey`. We write the versions a Kafka 3.x broker writes (OffsetCommitKey v1 with
OffsetCommitValue v3, or v1 when an expire timestamp is set; GroupMetadataKey v2 with
GroupMetadataValue v3), so Kafka's tools and the nightly report read them unchanged. A null
value is a tombstone: the offset or group was deleted.
"""

from __future__ import annotations

import functools
import logging
import struct
from typing import TYPE_CHECKING

import attrs

from trio_broker.cluster.coordinator_log import (
    OFFSETS_TOPIC,
    iter_log_batches,
    java_string_hashcode,
    partition_for,
)
from trio_broker.cluster.groups.consumer.consumer_records import (
    CONSUMER_KEY_VERSIONS,
    group_id_of,
)
from trio_broker.cluster.groups.group_metadata import OffsetAndMetadata
from trio_broker.cluster.groups.share.share_records import (
    SHARE_KEY_VERSIONS,
    share_group_id_of,
)
from trio_broker.protocol._generated.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
)
from trio_broker.protocol._generated.group_metadata_key import GroupMetadataKey
from trio_broker.protocol._generated.group_metadata_value import GroupMetadataValue
from trio_broker.protocol._generated.offset_commit_key import OffsetCommitKey
from trio_broker.protocol._generated.offset_commit_value import OffsetCommitValue
from trio_broker.protocol.record_codec import iter_records
from trio_broker.protocol.records import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    InvalidRecords,
    read_header,
)

if TYPE_CHECKING:
    from trio_broker.log import PartitionLog

logger = logging.getLogger(__name__)

__all__ = [
    "OFFSETS_TOPIC",
    "LoadedGroup",
    "encode_offset_commit_value",
    "group_metadata_key",
    "group_metadata_value",
    "java_string_hashcode",
    "offset_commit_key",
    "offset_commit_value",
    "partition_for",
    "replay",
]

_INT16 = struct.Struct(">h")
_CONTROL_KEY = struct.Struct(">hh")


# Every request about a group asks for its partition, and every commit for its keys: both
# are pure functions of a few strings, cached rather than rehashed and re-encoded each time.
_CACHED = 65536


@functools.lru_cache(maxsize=_CACHED)
def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return bytes(
        OffsetCommitKey(group=group, topic=topic, partition=partition).encode(
            1, bytearray(_INT16.pack(1))
        )
    )


def offset_commit_value(value: OffsetAndMetadata) -> bytes:
    return encode_offset_commit_value(
        value.offset,
        value.leader_epoch,
        value.metadata,
        value.commit_timestamp_ms,
        value.expire_timestamp_ms,
    )


def encode_offset_commit_value(
    offset: int,
    leader_epoch: int,
    metadata: str,
    commit_timestamp_ms: int,
    expire_timestamp_ms: int,
) -> bytes:
    """OffsetCommitValue v3, or v1 when there is an expire timestamp (v3 has no such field)."""
    version = 1 if expire_timestamp_ms >= 0 else 3
    body = OffsetCommitValue(
        offset=offset,
        leader_epoch=leader_epoch,
        metadata=metadata,
        commit_timestamp=commit_timestamp_ms,
        expire_timestamp=expire_timestamp_ms,
    )
    return bytes(body.encode(version, bytearray(_INT16.pack(version))))


def group_metadata_key(group: str) -> bytes:
    return bytes(GroupMetadataKey(group=group).encode(2, bytearray(_INT16.pack(2))))


def group_metadata_value(value: GroupMetadataValue) -> bytes:
    return bytes(value.encode(3, bytearray(_INT16.pack(3))))


def decode_subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a consumer protocol subscription, None if it does not decode."""
    if len(metadata) < 2:
        return None
    (version,) = _INT16.unpack_from(metadata)
    try:
        sub, _ = ConsumerProtocolSubscription.decode(
            metadata, min(version, ConsumerProtocolSubscription.MAX_VERSION), 2
        )
    except Exception:  # a newer or foreign protocol: treat as unknown
        return None
    return set(sub.topics)


@attrs.define(kw_only=True)
class LoadedGroup:
    """What replaying a partition found for one group."""

    group_id: str
    metadata: GroupMetadataValue | None = None
    offsets: dict[tuple[str, int], OffsetAndMetadata] = attrs.Factory(dict)
    deleted: bool = False  # its last GroupMetadata record was a tombstone
    # producer id -> offsets of a transaction without its marker yet (TxnOffsetCommit)
    pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetAndMetadata]] = attrs.Factory(dict)
    # A KIP-848 consumer group's ConsumerGroup* records (key -> value), their last word.
    consumer_records: dict[bytes, bytes] = attrs.Factory(dict)
    # A KIP-932 share group's ShareGroup* records, likewise.
    share_records: dict[bytes, bytes] = attrs.Factory(dict)


def replay(log: PartitionLog) -> dict[str, LoadedGroup]:
    """Read a `__consumer_offsets` partition from its start and keep the last word per key
    (Kafka's GroupMetadataManager.doLoadGroupsAndOffsets, without transactions' aborts)."""
    groups: dict[str, LoadedGroup] = {}
    pending_txn: dict[int, list[tuple[bytes, bytes | None, int]]] = {}

    def get(group_id: str) -> LoadedGroup:
        found = groups.get(group_id)
        if found is None:
            found = groups[group_id] = LoadedGroup(group_id=group_id)
        return found

    def apply(key: bytes, value: bytes | None, offset: int, pending_pid: int = -1) -> None:
        if len(key) < 2:
            return
        (key_version,) = _INT16.unpack_from(key)
        if key_version in (0, 1):
            k, _ = OffsetCommitKey.decode(key, key_version, 2)
            group = get(k.group)
            tp = (k.topic, k.partition)
            offsets = group.offsets
            if pending_pid >= 0:
                offsets = group.pending_txn_offsets.setdefault(pending_pid, {})
            if value is None:
                offsets.pop(tp, None)
                return
            (value_version,) = _INT16.unpack_from(value)
            v, _ = OffsetCommitValue.decode(
                value, min(value_version, OffsetCommitValue.MAX_VERSION), 2
            )
            offsets[tp] = OffsetAndMetadata(
                offset=v.offset,
                leader_epoch=v.leader_epoch,
                metadata=v.metadata,
                commit_timestamp_ms=v.commit_timestamp,
                expire_timestamp_ms=v.expire_timestamp,
                record_offset=offset,
            )
        elif key_version == 2:
            k, _ = GroupMetadataKey.decode(key, 2, 2)
            group = get(k.group)
            if value is None:
                group.metadata = None
                group.deleted = True
                return
            (value_version,) = _INT16.unpack_from(value)
            group.metadata, _ = GroupMetadataValue.decode(
                value, min(value_version, GroupMetadataValue.MAX_VERSION), 2
            )
            group.deleted = False
        elif key_version in CONSUMER_KEY_VERSIONS:
            found = group_id_of(key)
            assert found is not None
            records = get(found[1]).consumer_records
            if value is None:
                records.pop(bytes(key), None)
            else:
                records[bytes(key)] = bytes(value)
        elif key_version in SHARE_KEY_VERSIONS:
            found = share_group_id_of(key)
            assert found is not None
            records = get(found[1]).share_records
            if value is None:
                records.pop(bytes(key), None)
            else:
                records[bytes(key)] = bytes(value)

    for batch in iter_log_batches(log):
        try:
            records = list(iter_records(batch))
        except InvalidRecords as exc:
            logger.warning("%s: unreadable batch skipped during load: %s", log.name, exc)
            continue
        header = read_header(batch)
        attributes, producer_id = header.attributes, header.producer_id
        if attributes & ATTR_CONTROL:
            for record in records:
                if record.key is not None and len(record.key) >= _CONTROL_KEY.size:
                    _, marker = _CONTROL_KEY.unpack_from(record.key)
                    done = pending_txn.pop(producer_id, [])
                    if marker == 1:
                        for key, value, offset in done:
                            apply(key, value, offset)
            continue
        for record in records:
            if record.key is None:
                continue
            if attributes & ATTR_TRANSACTIONAL:
                pending_txn.setdefault(producer_id, []).append(
                    (record.key, record.value, record.offset)
                )
                continue
            try:
                apply(record.key, record.value, record.offset)
            except Exception as exc:  # one record from a newer Kafka must not stop the load
                logger.warning("%s: record at %d skipped: %s", log.name, record.offset, exc)
    # Transactions without a marker yet stay pending (Kafka's loadGroup does the same).
    for producer_id, left in pending_txn.items():
        for key, value, offset in left:
            try:
                apply(key, value, offset, producer_id)
            except Exception as exc:
                logger.warning("%s: record at %d skipped: %s", log.name, offset, exc)
    return {
        g: lg
        for g, lg in groups.items()
        if lg.metadata is not None
        or lg.offsets
        or lg.pending_txn_offsets
        or lg.consumer_records
        or lg.share_records
    }
