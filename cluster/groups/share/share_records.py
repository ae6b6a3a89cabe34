"""A share group as Kafka writes it to `__consumer_offsets`: the ShareGroup* records
(`kafka-protocol/coordinator-records/`), key versions 9 to 11, each value at version 0.

    11  ShareGroupMetadata          the group epoch
    10  ShareGroupMemberMetadata    a member: rack, client id and host, subscription
     9  ShareGroupPartitionMetadata the topics whose share-partitions were initialized

`group_records` is the whole group as records, key bytes -> value bytes; the coordinator
appends the difference from what it wrote last (`ShareGroup.persisted`), tombstones for
keys gone. `load_group` rebuilds a group from the records a replay found: its epoch and
members (whose sessions start again when loaded); the assignment is computed again from
the subscriptions, as it is a pure function of them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from trio_broker.cluster.groups.share.share_group import ShareGroup, ShareMember
from trio_broker.protocol._generated import share_group_member_metadata_key as member_key
from trio_broker.protocol._generated import share_group_member_metadata_value as member_value
from trio_broker.protocol._generated import share_group_metadata_key as epoch_key
from trio_broker.protocol._generated import share_group_metadata_value as epoch_value
from trio_broker.protocol._generated import share_group_partition_metadata_key as topics_key
from trio_broker.protocol._generated import share_group_partition_metadata_value as topics_value

__all__ = ["SHARE_KEY_VERSIONS", "group_records", "load_group", "share_group_id_of"]

_INT16 = struct.Struct(">h")
SHARE_KEY_VERSIONS = frozenset((9, 10, 11))

_KEYS: dict[int, Any] = {
    9: topics_key.ShareGroupPartitionMetadataKey,
    10: member_key.ShareGroupMemberMetadataKey,
    11: epoch_key.ShareGroupMetadataKey,
}
_VALUES: dict[int, Any] = {
    9: topics_value.ShareGroupPartitionMetadataValue,
    10: member_value.ShareGroupMemberMetadataValue,
    11: epoch_value.ShareGroupMetadataValue,
}


def _key(version: int, **fields: Any) -> bytes:
    return bytes(_KEYS[version](**fields).encode(version, bytearray(_INT16.pack(version))))


def _value(version: int, **fields: Any) -> bytes:
    return bytes(_VALUES[version](**fields).encode(0, bytearray(_INT16.pack(0))))


def share_group_id_of(key: bytes) -> tuple[int, str, str | None] | None:
    """(key version, group id, member id or None) of a ShareGroup* key, else None."""
    if len(key) < 2:
        return None
    (version,) = _INT16.unpack_from(key)
    if version not in SHARE_KEY_VERSIONS:
        return None
    k, _ = _KEYS[version].decode(key, version, 2)
    return version, k.group_id, getattr(k, "member_id", None)


def group_records(
    group: ShareGroup,
    topic_id: Callable[[str], Any],
    initialized: Mapping[str, list[int]],
) -> dict[bytes, bytes]:
    """The group as records; `topic_id(name)` is the topic's id (None if it is gone),
    `initialized` the partitions per topic the group has share-partitions of."""
    gid = group.group_id
    records: dict[bytes, bytes] = {}
    for m in group.members.values():
        records[_key(10, group_id=gid, member_id=m.member_id)] = _value(
            10,
            rack_id=m.rack_id,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
        )
    records[_key(9, group_id=gid)] = _value(
        9,
        initialized_topics=[
            topics_value.TopicPartitionsInfo(
                topic_id=topic_id(t), topic_name=t, partitions=sorted(ps)
            )
            for t, ps in sorted(initialized.items())
            if topic_id(t) is not None
        ],
        deleting_topics=[],
    )
    records[_key(11, group_id=gid)] = _value(11, epoch=group.group_epoch)
    return records


def load_group(group_id: str, records: Mapping[bytes, bytes]) -> ShareGroup | None:
    """The group the replayed `records` describe (None without its epoch record)."""
    group = ShareGroup(group_id=group_id)
    seen_epoch = False
    for key, value in records.items():
        found = share_group_id_of(key)
        if found is None:
            continue
        version, _, member_id = found
        v, _ = _VALUES[version].decode(value, 0, 2)
        if version == 11:
            group.group_epoch = v.epoch
            seen_epoch = True
        elif version == 10 and member_id is not None:
            group.members[member_id] = ShareMember(
                member_id=member_id,
                client_id=v.client_id,
                client_host=v.client_host,
                rack_id=v.rack_id,
                subscribed_topic_names=tuple(v.subscribed_topic_names),
            )
    if not seen_epoch:
        return None
    for m in group.members.values():
        m.member_epoch = group.group_epoch
    group.persisted = dict(records)
    return group
