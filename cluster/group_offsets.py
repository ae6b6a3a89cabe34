"""Committed offsets and group administration, on top of the GroupCoordinator's groups.

OffsetCommit, OffsetFetch (one group or several), OffsetDelete, DescribeGroups,
ListGroups, DeleteGroups; loading the groups a `__consumer_offsets` partition holds; and
offset expiry: offsets of an empty group expire `offsets.retention.minutes` after the
group became empty, standalone commits (no group management) that long after their commit,
and offsets of topics a live consumer group no longer subscribes to likewise (KIP-496).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import trio

from trio_broker.cluster.group_metadata import (
    GroupMember,
    GroupMetadata,
    GroupState,
    OffsetAndMetadata,
)
from trio_broker.cluster.group_records import (
    LoadedGroup,
    group_metadata_key,
    offset_commit_key,
    offset_commit_value,
)
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.delete_groups_response import (
    DeletableGroupResult,
    DeleteGroupsResponse,
)
from trio_broker.protocol._generated.describe_groups_response import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsResponse,
)
from trio_broker.protocol._generated.list_groups_response import ListedGroup, ListGroupsResponse
from trio_broker.protocol._generated.offset_commit_response import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from trio_broker.protocol._generated.offset_delete_response import (
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from trio_broker.protocol._generated.offset_fetch_response import (
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)

if TYPE_CHECKING:
    from trio_broker.cluster.group_coordinator import GroupCoordinator

logger = logging.getLogger(__name__)

__all__ = ["GroupOffsets"]

S = GroupState
OFFSET_METADATA_MAX_BYTES = 4096  # offset.metadata.max.bytes


def _now_ms() -> int:
    return int(time.time() * 1000)


class GroupOffsets:
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator
        self.store = coordinator.store

    @property
    def groups(self) -> dict[str, GroupMetadata]:
        return self.coordinator.groups

    # -- loading ---------------------------------------------------------------------------

    def on_partition_loaded(self, partition: int, loaded: dict[str, LoadedGroup]) -> None:
        """Rebuild the groups of one replayed partition (Kafka's loadGroup)."""
        for group_id, found in loaded.items():
            if group_id in self.groups:
                continue
            group = GroupMetadata(group_id=group_id, offsets=dict(found.offsets))
            value = found.metadata
            if value is not None:
                group.protocol_type = value.protocol_type or None
                group.generation_id = value.generation
                group.protocol_name = value.protocol
                group.state_timestamp_ms = value.current_state_timestamp
                for stored in value.members:
                    member = GroupMember(
                        member_id=stored.member_id,
                        group_instance_id=stored.group_instance_id,
                        client_id=stored.client_id,
                        client_host=stored.client_host,
                        rebalance_timeout_ms=stored.rebalance_timeout,
                        session_timeout_ms=stored.session_timeout,
                        protocol_type=value.protocol_type,
                        protocols=[(value.protocol or "", bytes(stored.subscription))],
                        assignment=bytes(stored.assignment),
                    )
                    group.add(member)
                group.leader_id = value.leader if value.leader in group.members else group.leader_id
                if group.members:
                    group.state = S.STABLE
                    for member in group.members.values():
                        # Members that do not come back are removed after their session timeout.
                        self.coordinator._start_session_timer(group, member)
            elif not found.offsets:
                continue
            self.groups[group_id] = group
        logger.debug("partition %d: loaded %d group(s)", partition, len(loaded))

    # -- OffsetCommit ----------------------------------------------------------------------

    def commit_offsets(self, body: Any, *, api_version: int) -> OffsetCommitResponse:
        def answer(code_for: Any) -> OffsetCommitResponse:
            return OffsetCommitResponse(
                topics=[
                    OffsetCommitResponseTopic(
                        name=t.name,
                        partitions=[
                            OffsetCommitResponsePartition(
                                partition_index=p.partition_index, error_code=code_for(t.name, p)
                            )
                            for p in t.partitions
                        ],
                    )
                    for t in body.topics
                ]
            )

        error = self.coordinator.check_group(body.group_id)
        if error:
            return answer(lambda t, p: error)
        generation = body.generation_id_or_member_epoch
        group = self.groups.get(body.group_id)
        if group is None:
            if generation >= 0:
                return answer(lambda t, p: ErrorCode.ILLEGAL_GENERATION)
            # Not managed by the coordinator (assign() or an admin client): a standalone group.
            group = self.groups[body.group_id] = GroupMetadata(
                group_id=body.group_id, state_timestamp_ms=_now_ms()
            )
        error = self._commit_error(group, body, generation)
        if error:
            return answer(lambda t, p: error)
        member = group.members.get(body.member_id)
        if member is not None:
            self.coordinator._start_session_timer(group, member)
        now = _now_ms()
        topics = self.coordinator.broker.metadata.topics
        results: dict[tuple[str, int], ErrorCode] = {}
        records: list[tuple[bytes, bytes | None]] = []
        values: dict[tuple[str, int], OffsetAndMetadata] = {}
        for topic in body.topics:
            known = topics.get(topic.name)
            for p in topic.partitions:
                tp = (topic.name, p.partition_index)
                metadata = p.committed_metadata or ""
                if known is None or p.partition_index not in known.partitions:
                    results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                if len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                    results[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                    continue
                commit_ts = now
                if api_version == 1 and p.commit_timestamp >= 0:
                    commit_ts = p.commit_timestamp
                expire = -1
                if 2 <= api_version <= 4 and body.retention_time_ms >= 0:
                    expire = commit_ts + body.retention_time_ms
                value = OffsetAndMetadata(
                    offset=p.committed_offset,
                    leader_epoch=p.committed_leader_epoch if api_version >= 6 else -1,
                    metadata=metadata,
                    commit_timestamp_ms=commit_ts,
                    expire_timestamp_ms=expire,
                )
                values[tp] = value
                records.append((offset_commit_key(body.group_id, *tp), offset_commit_value(value)))
        if records:
            try:
                first = self.store.append(body.group_id, records)
            except KafkaError as exc:
                logger.warning("offset commit of group %s failed: %s", body.group_id, exc)
                code = ErrorCode.COORDINATOR_NOT_AVAILABLE
                return answer(lambda t, p: results.get((t, p.partition_index), code))
            for index, (tp, value) in enumerate(values.items()):
                group.offsets[tp] = _with_record_offset(value, first + index)
        return answer(lambda t, p: results.get((t, p.partition_index), ErrorCode.NONE))

    def _commit_error(self, group: GroupMetadata, body: Any, generation: int) -> ErrorCode:
        if group.is_(S.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.is_(S.EMPTY):
            return ErrorCode.NONE
        if group.is_(S.COMPLETING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        if self.coordinator._fenced(group, body.group_instance_id, body.member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if body.member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    # -- OffsetFetch -----------------------------------------------------------------------

    def fetch_offsets(self, body: Any, *, api_version: int) -> OffsetFetchResponse:
        if api_version >= 8:
            groups = []
            for wanted in body.groups:
                error, found = self._fetch_group(wanted.group_id, wanted.topics)
                groups.append(
                    OffsetFetchResponseGroup(
                        group_id=wanted.group_id,
                        error_code=error,
                        topics=[
                            OffsetFetchResponseTopics(
                                name=name,
                                partitions=[
                                    OffsetFetchResponsePartitions(
                                        partition_index=index,
                                        committed_offset=o,
                                        committed_leader_epoch=e,
                                        metadata=m,
                                        error_code=ErrorCode.NONE,
                                    )
                                    for index, o, e, m in parts
                                ],
                            )
                            for name, parts in found
                        ],
                    )
                )
            return OffsetFetchResponse(groups=groups)
        error, found = self._fetch_group(body.group_id, body.topics)
        if error and api_version < 2:
            # v0-1 have no top-level error: every partition carries it.
            topics = [
                OffsetFetchResponseTopic(
                    name=t.name,
                    partitions=[
                        OffsetFetchResponsePartition(
                            partition_index=i, committed_offset=-1, metadata="", error_code=error
                        )
                        for i in t.partition_indexes
                    ],
                )
                for t in body.topics or []
            ]
            return OffsetFetchResponse(topics=topics)
        return OffsetFetchResponse(
            error_code=error,
            topics=[
                OffsetFetchResponseTopic(
                    name=name,
                    partitions=[
                        OffsetFetchResponsePartition(
                            partition_index=index,
                            committed_offset=o,
                            committed_leader_epoch=e,
                            metadata=m,
                            error_code=ErrorCode.NONE,
                        )
                        for index, o, e, m in parts
                    ],
                )
                for name, parts in found
            ],
        )

    def _fetch_group(
        self, group_id: str, topics: list[Any] | None
    ) -> tuple[ErrorCode, list[tuple[str, list[tuple[int, int, int, str]]]]]:
        """(error, [(topic, [(partition, offset, leader epoch, metadata)])])."""
        error = self.coordinator.check_group(group_id)
        if error:
            return error, []
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None and not group.is_(S.DEAD) else {}
        out: list[tuple[str, list[tuple[int, int, int, str]]]] = []
        if topics is None:
            by_topic: dict[str, list[tuple[int, int, int, str]]] = {}
            for (topic, index), value in sorted(offsets.items()):
                by_topic.setdefault(topic, []).append(
                    (index, value.offset, value.leader_epoch, value.metadata)
                )
            return ErrorCode.NONE, list(by_topic.items())
        for t in topics:
            parts = []
            for index in t.partition_indexes:
                value = offsets.get((t.name, index))
                if value is None:
                    parts.append((index, -1, -1, ""))
                else:
                    parts.append((index, value.offset, value.leader_epoch, value.metadata))
            out.append((t.name, parts))
        return ErrorCode.NONE, out

    # -- OffsetDelete ----------------------------------------------------------------------

    def delete_offsets(self, body: Any) -> OffsetDeleteResponse:
        error = self.coordinator.check_group(body.group_id)
        group = self.groups.get(body.group_id)
        if not error and (group is None or group.is_(S.DEAD)):
            error = ErrorCode.GROUP_ID_NOT_FOUND
        if error:
            return OffsetDeleteResponse(error_code=error)
        assert group is not None
        subscribed: set[str] = set()
        if not group.is_(S.EMPTY):
            found = group.subscribed_topics()
            if found is None:
                return OffsetDeleteResponse(error_code=ErrorCode.NON_EMPTY_GROUP)
            subscribed = found
        topics = []
        doomed: list[tuple[str, int]] = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                code = ErrorCode.NONE
                if t.name in subscribed:
                    code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                elif (t.name, p.partition_index) in group.offsets:
                    doomed.append((t.name, p.partition_index))
                parts.append(
                    OffsetDeleteResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                )
            topics.append(OffsetDeleteResponseTopic(name=t.name, partitions=parts))
        if doomed:
            try:
                self._remove_offsets(group, doomed)
            except KafkaError as exc:
                return OffsetDeleteResponse(error_code=exc.code)
        return OffsetDeleteResponse(error_code=ErrorCode.NONE, topics=topics)

    def _remove_offsets(self, group: GroupMetadata, doomed: list[tuple[str, int]]) -> None:
        records: list[tuple[bytes, bytes | None]] = [
            (offset_commit_key(group.group_id, *tp), None) for tp in doomed
        ]
        self.store.append(group.group_id, records)
        for tp in doomed:
            group.offsets.pop(tp, None)

    # -- DeleteGroups ----------------------------------------------------------------------

    def delete_groups(self, body: Any) -> DeleteGroupsResponse:
        results = []
        for group_id in body.groups_names:
            code = self.coordinator.check_group(group_id)
            group = self.groups.get(group_id)
            if not code:
                if group is None or group.is_(S.DEAD):
                    code = ErrorCode.GROUP_ID_NOT_FOUND
                elif not group.is_(S.EMPTY):
                    code = ErrorCode.NON_EMPTY_GROUP
                else:
                    try:
                        self._delete_group(group)
                    except KafkaError as exc:
                        code = exc.code
            results.append(DeletableGroupResult(group_id=group_id, error_code=code))
        return DeleteGroupsResponse(results=results)

    def _delete_group(self, group: GroupMetadata) -> None:
        records: list[tuple[bytes, bytes | None]] = [
            (offset_commit_key(group.group_id, *tp), None) for tp in group.offsets
        ]
        records.append((group_metadata_key(group.group_id), None))
        self.store.append(group.group_id, records)
        group.offsets.clear()
        group.transition_to(S.DEAD, _now_ms())
        del self.groups[group.group_id]
        logger.info("deleted group %s", group.group_id)

    # -- DescribeGroups / ListGroups -------------------------------------------------------

    def describe_groups(self, body: Any) -> DescribeGroupsResponse:
        described = []
        for group_id in body.groups:
            error = self.coordinator.check_group(group_id)
            group = self.groups.get(group_id)
            if error:
                described.append(DescribedGroup(error_code=error, group_id=group_id))
                continue
            if group is None:
                described.append(
                    DescribedGroup(group_id=group_id, group_state=S.DEAD.value, protocol_type="")
                )
                continue
            stable = group.is_(S.STABLE)
            described.append(
                DescribedGroup(
                    group_id=group_id,
                    group_state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol_data=(group.protocol_name or "") if stable else "",
                    members=[
                        DescribedGroupMember(
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata_for(group.protocol_name) if stable else b"",
                            member_assignment=m.assignment if stable else b"",
                        )
                        for m in group.members.values()
                    ],
                )
            )
        return DescribeGroupsResponse(groups=described)

    def list_groups(self, body: Any, *, api_version: int) -> ListGroupsResponse:
        states = {s.lower() for s in body.states_filter} if api_version >= 4 else set()
        types = {t.lower() for t in body.types_filter} if api_version >= 5 else set()
        listed = []
        for group in self.groups.values():
            if group.is_(S.DEAD) or not self.store.is_loaded(group.group_id):
                continue
            if states and group.state.value.lower() not in states:
                continue
            if types and "classic" not in types:
                continue
            listed.append(
                ListedGroup(
                    group_id=group.group_id,
                    protocol_type=group.protocol_type or "",
                    group_state=group.state.value,
                    group_type="classic",
                )
            )
        error = ErrorCode.NONE
        if len(self.store.loaded) < self.store.num_partitions:
            error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ListGroupsResponse(error_code=error, groups=listed)

    # -- expiry ----------------------------------------------------------------------------

    async def run_expiration(self) -> None:
        interval_s = self.coordinator.config.offsets_retention_check_interval_ms / 1000
        while True:
            await trio.sleep(interval_s)
            self.expire_offsets(_now_ms())

    def expire_offsets(self, now_ms: int) -> int:
        """Remove offsets past retention (Kafka's cleanupGroupMetadata); returns how many."""
        retention_ms = self.coordinator.config.offsets_retention_minutes * 60_000
        removed = 0
        for group in list(self.groups.values()):
            if group.is_(S.DEAD):
                continue
            managed = group.protocol_type is not None
            subscribed: set[str] | None = set()
            if managed and not group.is_(S.EMPTY):
                # A live consumer group keeps the offsets of what it subscribes to (KIP-496).
                subscribed = group.subscribed_topics()
                if subscribed is None:
                    continue
            doomed = []
            for tp, value in group.offsets.items():
                if tp[0] in subscribed:
                    continue
                if value.expire_timestamp_ms >= 0:
                    expired = now_ms >= value.expire_timestamp_ms
                elif managed and group.is_(S.EMPTY) and group.state_timestamp_ms >= 0:
                    expired = now_ms - group.state_timestamp_ms >= retention_ms
                else:
                    expired = now_ms - value.commit_timestamp_ms >= retention_ms
                if expired:
                    doomed.append(tp)
            try:
                if doomed:
                    self._remove_offsets(group, doomed)
                    removed += len(doomed)
                if group.is_(S.EMPTY) and not group.offsets:
                    self._delete_group(group)
            except KafkaError as exc:
                logger.warning("offset expiry of group %s failed: %s", group.group_id, exc)
        if removed:
            logger.info("removed %d expired offset(s)", removed)
        return removed


def _with_record_offset(value: OffsetAndMetadata, offset: int) -> OffsetAndMetadata:
    import attrs

    return attrs.evolve(value, record_offset=offset)
