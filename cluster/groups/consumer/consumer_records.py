"""A consumer group as Kafka writes it to `__consumer_offsets`: the ConsumerGroup* records
(`kafka-protocol/coordinator-records/`), key versions 3 to 8, each value at version 0.

`group_records` is the whole group as records, key bytes -> value bytes; the coordinator
appends the difference from what it wrote last (`ConsumerGroup.persisted`), tombstones for
keys gone, so the partition holds the group's current word per key, as Kafka's does.
`load_group` rebuilds a group from the records a replay found.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Mapping
from typing import Any

from trio_broker.cluster.groups.consumer.consumer_group import (
    ClassicMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    TopicPartitions,
)
from trio_broker.protocol._generated import (
    consumer_group_current_member_assignment_key as current_key,
)
from trio_broker.protocol._generated import (
    consumer_group_current_member_assignment_value as current_value,
)
from trio_broker.protocol._generated import consumer_group_member_metadata_key as member_key
from trio_broker.protocol._generated import consumer_group_member_metadata_value as member_value
from trio_broker.protocol._generated import consumer_group_metadata_key as epoch_key
from trio_broker.protocol._generated import consumer_group_metadata_value as epoch_value
from trio_broker.protocol._generated import consumer_group_partition_metadata_key as topics_key
from trio_broker.protocol._generated import (
    consumer_group_partition_metadata_value as topics_value,
)
from trio_broker.protocol._generated import (
    consumer_group_target_assignment_member_key as target_key,
)
from trio_broker.protocol._generated import (
    consumer_group_target_assignment_member_value as target_value,
)
from trio_broker.protocol._generated import (
    consumer_group_target_assignment_metadata_key as target_epoch_key,
)
from trio_broker.protocol._generated import (
    consumer_group_target_assignment_metadata_value as target_epoch_value,
)

logger = logging.getLogger(__name__)

__all__ = ["CONSUMER_KEY_VERSIONS", "group_id_of", "group_records", "load_group"]

_INT16 = struct.Struct(">h")
CONSUMER_KEY_VERSIONS = frozenset(range(3, 9))

# Kafka's MemberState codes (modern/MemberState.java).
_STATE_CODE = {
    MemberState.STABLE: 0,
    MemberState.UNREVOKED_PARTITIONS: 1,
    MemberState.UNRELEASED_PARTITIONS: 2,
}
_CODE_STATE = {v: k for k, v in _STATE_CODE.items()}

_KEYS: dict[int, Any] = {
    3: epoch_key.ConsumerGroupMetadataKey,
    4: topics_key.ConsumerGroupPartitionMetadataKey,
    5: member_key.ConsumerGroupMemberMetadataKey,
    6: target_epoch_key.ConsumerGroupTargetAssignmentMetadataKey,
    7: target_key.ConsumerGroupTargetAssignmentMemberKey,
    8: current_key.ConsumerGroupCurrentMemberAssignmentKey,
}
_VALUES: dict[int, Any] = {
    3: epoch_value.ConsumerGroupMetadataValue,
    4: topics_value.ConsumerGroupPartitionMetadataValue,
    5: member_value.ConsumerGroupMemberMetadataValue,
    6: target_epoch_value.ConsumerGroupTargetAssignmentMetadataValue,
    7: target_value.ConsumerGroupTargetAssignmentMemberValue,
    8: current_value.ConsumerGroupCurrentMemberAssignmentValue,
}


def _key(version: int, **fields: Any) -> bytes:
    return bytes(_KEYS[version](**fields).encode(version, bytearray(_INT16.pack(version))))


def _value(version: int, **fields: Any) -> bytes:
    return bytes(_VALUES[version](**fields).encode(0, bytearray(_INT16.pack(0))))


def group_id_of(key: bytes) -> tuple[int, str, str | None] | None:
    """(key version, group id, member id or None) of a ConsumerGroup* key, else None."""
    if len(key) < 2:
        return None
    (version,) = _INT16.unpack_from(key)
    if version not in CONSUMER_KEY_VERSIONS:
        return None
    k, _ = _KEYS[version].decode(key, version, 2)
    return version, k.group_id, getattr(k, "member_id", None)


def _classic_value(classic: ClassicMetadata | None) -> Any:
    if classic is None:
        return None
    return member_value.ClassicMemberMetadata(
        session_timeout_ms=classic.session_timeout_ms,
        supported_protocols=[
            member_value.ClassicProtocol(name=name, metadata=metadata)
            for name, metadata in classic.protocols
        ],
    )


def group_records(group: ConsumerGroup, topic_id: Callable[[str], Any]) -> dict[bytes, bytes]:
    """The group as records; `topic_id(name)` is the topic's id, None if it is gone."""
    gid = group.group_id

    def ids(parts: TopicPartitions, cls: Any) -> list[Any]:
        out = []
        for topic, ps in sorted(parts.items()):
            tid = topic_id(topic)
            if tid is not None and ps:
                out.append(cls(topic_id=tid, partitions=sorted(ps)))
        return out

    records: dict[bytes, bytes] = {}
    for m in group.members.values():
        records[_key(5, group_id=gid, member_id=m.member_id)] = _value(
            5,
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            server_assignor=m.server_assignor,
            classic_member_metadata=_classic_value(m.classic),
        )
    records[_key(4, group_id=gid)] = _value(
        4,
        topics=[
            topics_value.TopicMetadata(
                topic_id=topic_id(t), topic_name=t, num_partitions=n, partition_metadata=[]
            )
            for t, n in sorted(group.topic_partitions.items())
            if topic_id(t) is not None
        ],
    )
    records[_key(3, group_id=gid)] = _value(3, epoch=group.group_epoch)
    for member_id, target in group.target.items():
        records[_key(7, group_id=gid, member_id=member_id)] = _value(
            7, topic_partitions=ids(target, target_value.TopicPartition)
        )
    records[_key(6, group_id=gid)] = _value(6, assignment_epoch=group.assignment_epoch)
    for m in group.members.values():
        records[_key(8, group_id=gid, member_id=m.member_id)] = _value(
            8,
            member_epoch=m.member_epoch,
            previous_member_epoch=m.previous_member_epoch,
            state=_STATE_CODE[m.state],
            assigned_partitions=ids(m.assigned, current_value.TopicPartitions),
            partitions_pending_revocation=ids(m.pending_revocation, current_value.TopicPartitions),
        )
    return records


def load_group(
    group_id: str, records: Mapping[bytes, bytes], topic_name: Callable[[Any], str | None]
) -> ConsumerGroup | None:
    """The group the replayed `records` describe (None without its epoch record);
    `topic_name(id)` is a topic's name, None if it is gone."""
    group = ConsumerGroup(group_id=group_id)
    members: dict[str, ConsumerGroupMember] = {}
    seen_epoch = False

    def names(parts: list[Any]) -> TopicPartitions:
        out: TopicPartitions = {}
        for tp in parts:
            name = topic_name(tp.topic_id)
            if name is not None:
                out.setdefault(name, set()).update(tp.partitions)
        return out

    def member(member_id: str) -> ConsumerGroupMember:
        if member_id not in members:
            members[member_id] = ConsumerGroupMember(member_id=member_id)
        return members[member_id]

    for key, value in records.items():
        found = group_id_of(key)
        if found is None:
            continue
        version, _, member_id = found
        v, _ = _VALUES[version].decode(value, 0, 2)
        if version == 3:
            group.group_epoch = v.epoch
            seen_epoch = True
        elif version == 4:
            group.topic_partitions = {t.topic_name: t.num_partitions for t in v.topics}
        elif version == 5:
            m = member(member_id)
            m.instance_id, m.rack_id = v.instance_id, v.rack_id
            m.client_id, m.client_host = v.client_id, v.client_host
            m.subscribed_topic_names = list(v.subscribed_topic_names)
            m.subscribed_topic_regex = v.subscribed_topic_regex
            m.rebalance_timeout_ms = v.rebalance_timeout_ms
            m.server_assignor = v.server_assignor
            classic = v.classic_member_metadata
            if classic is not None:
                m.classic = ClassicMetadata(
                    session_timeout_ms=classic.session_timeout_ms,
                    protocols=[(p.name, bytes(p.metadata)) for p in classic.supported_protocols],
                )
        elif version == 6:
            group.assignment_epoch = v.assignment_epoch
        elif version == 7:
            group.target[member_id] = names(v.topic_partitions)
        elif version == 8:
            m = member(member_id)
            m.member_epoch = v.member_epoch
            m.previous_member_epoch = v.previous_member_epoch
            m.state = _CODE_STATE.get(v.state, MemberState.STABLE)
            m.assigned = names(v.assigned_partitions)
            m.pending_revocation = names(v.partitions_pending_revocation)
    if not seen_epoch:
        return None
    for m in members.values():
        group.members[m.member_id] = m
        if m.instance_id is not None:
            group.static_members[m.instance_id] = m.member_id
        group.claim(m, m.assigned)
        group.claim(m, m.pending_revocation)
    group.target = {k: v for k, v in group.target.items() if k in group.members}
    group.persisted = dict(records)
    return group
