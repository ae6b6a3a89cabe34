"""Committed offsets and group administration, on top of the GroupCoordinator's groups.

OffsetCommit, OffsetFetch (one group or several), OffsetDelete, DescribeGroups,
ListGroups, DeleteGroups; loading the groups a `__consumer_offsets` partition holds; and
offset expiry: offsets of an empty group expire `offsets.retention.minutes` after the
group became empty, standalone commits (no group management) that long after their commit,
and offsets of topics a Stable consumer group no longer subscribes to likewise (KIP-496).
A group in the middle of a rebalance loses nothing, as in Kafka. A group that empties goes
Dead with tombstones for its records (none for a GroupMetadata it never wrote: generation 0).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from trio_broker.cluster.groups.group_metadata import (
    GroupMember,
    GroupMetadata,
    GroupState,
    OffsetAndMetadata,
)
from trio_broker.cluster.groups.records import (
    LoadedGroup,
    encode_offset_commit_value,
    group_metadata_key,
    offset_commit_key,
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
    from trio_broker.cluster.groups.group_coordinator import GroupCoordinator

logger = logging.getLogger(__name__)

__all__ = ["GroupOffsets"]

S = GroupState
OFFSET_METADATA_MAX_BYTES = 4096  # offset.metadata.max.bytes


def _nothing() -> None:
    pass


class GroupOffsets:
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator
        self.store = coordinator.store
        self.now_ms = coordinator.now_ms
        from trio_broker.cluster.groups.txn_offsets import TxnOffsetCommits

        self.txn = TxnOffsetCommits(self)

    # -- transactional offsets (trio_broker.cluster.groups.txn_offsets) ---------------------

    def txn_commit_offsets(self, body: Any, *, api_version: int) -> Any:
        return self.txn.commit(body, api_version=api_version)

    def complete_txn_offsets(self, producer_id: int, partition: int, commit: bool) -> None:
        self.txn.complete(producer_id, partition, commit)

    @property
    def groups(self) -> dict[str, GroupMetadata]:
        return self.coordinator.groups

    # -- loading ---------------------------------------------------------------------------

    def on_partition_loaded(self, partition: int, loaded: dict[str, LoadedGroup]) -> None:
        """Rebuild the groups of one replayed partition (Kafka's loadGroup)."""
        for group_id, found in loaded.items():
            if found.pending_txn_offsets:
                self.txn.add_loaded(group_id, found.pending_txn_offsets)
            if group_id in self.groups:
                continue
            group = GroupMetadata(group_id=group_id, offsets=dict(found.offsets))
            value = found.metadata
            consumer = (
                self.coordinator.consumer.load(group_id, found.consumer_records)
                if found.consumer_records
                else None
            )
            share = (
                self.coordinator.share.load(group_id, found.share_records)
                if found.share_records and consumer is None
                else None
            )
            if consumer is not None:
                group.protocol_type = "consumer"
                group.consumer = consumer
            elif share is not None:
                group.protocol_type = "share"
                group.share = share
            elif value is not None:
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
        """OffsetCommit where the append is committed at once (a lone broker): the offsets
        are visible to OffsetFetch as it answers."""
        response, install = self.prepare_commit(body, api_version=api_version)
        install()
        return response

    def prepare_commit(
        self, body: Any, *, api_version: int
    ) -> tuple[OffsetCommitResponse, Callable[[], None]]:
        """Append an OffsetCommit's records; returns the answer and `install`, which makes
        the offsets visible (OffsetFetch, the group's position), to be called once the
        append is committed: in a cluster, when the partition's ISR has it. Until then
        OffsetFetch answers with what was committed before, as Kafka's cache does
        (pendingOffsetCommits): an offset the coordinator's failover then truncated away
        must never have been read."""
        # The hot path of a consumer: one pass builds the response, the records and the
        # cached values together, and the whole commit is one append to the log.
        group_id = body.group_id
        generation = body.generation_id_or_member_epoch
        error = self.coordinator.check_group(group_id)
        group = self.groups.get(group_id)
        if not error and group is None:
            if generation >= 0:
                error = ErrorCode.ILLEGAL_GENERATION
            else:
                # Not managed by the coordinator (assign() or an admin client): standalone.
                group = self.groups[group_id] = GroupMetadata(
                    group_id=group_id, state_timestamp_ms=self.now_ms()
                )
        if not error:
            assert group is not None
            error = self._commit_error(group, body, generation)
        if error:
            return _commit_answer(body, error), _nothing
        assert group is not None
        member = group.members.get(body.member_id)
        if member is not None:
            self.coordinator._start_session_timer(group, member)
        now = self.now_ms()
        expire_after = -1
        if 2 <= api_version <= 4 and body.retention_time_ms >= 0:
            expire_after = body.retention_time_ms
        topics = self.coordinator.broker.metadata.topics
        answered: list[OffsetCommitResponseTopic] = []
        records: list[tuple[bytes, bytes | None]] = []
        # (response partition, (topic, partition), offset, leader epoch, metadata, commit ts, expire ts)
        accepted: list[tuple[Any, tuple[str, int], int, int, str, int, int]] = []
        for topic in body.topics:
            name = topic.name
            known = topics.get(name)
            partitions: list[OffsetCommitResponsePartition] = []
            answered.append(OffsetCommitResponseTopic(name=name, partitions=partitions))
            for p in topic.partitions:
                index = p.partition_index
                metadata = p.committed_metadata or ""
                if known is None or index not in known.partitions:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif len(metadata) > OFFSET_METADATA_MAX_BYTES // 4 and (
                    len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES
                ):
                    code = ErrorCode.OFFSET_METADATA_TOO_LARGE
                else:
                    code = ErrorCode.NONE
                part = OffsetCommitResponsePartition(partition_index=index, error_code=code)
                partitions.append(part)
                if code:
                    continue
                commit_ts = now
                if api_version == 1 and p.commit_timestamp >= 0:
                    commit_ts = p.commit_timestamp
                expire = commit_ts + expire_after if expire_after >= 0 else -1
                epoch = p.committed_leader_epoch if api_version >= 6 else -1
                offset = p.committed_offset
                records.append(
                    (
                        offset_commit_key(group_id, name, index),
                        encode_offset_commit_value(offset, epoch, metadata, commit_ts, expire),
                    )
                )
                accepted.append((part, (name, index), offset, epoch, metadata, commit_ts, expire))
        if records:
            try:
                first = self.store.append(group_id, records)
            except KafkaError as exc:
                logger.warning("offset commit of group %r failed: %s", group_id, exc)
                for part, *_ in accepted:
                    part.error_code = ErrorCode.COORDINATOR_NOT_AVAILABLE
                return OffsetCommitResponse(topics=answered), _nothing

            def install() -> None:
                offsets = group.offsets
                for record_offset, (_, tp, offset, epoch, meta, commit_ts, expire) in enumerate(
                    accepted, first
                ):
                    current = offsets.get(tp)
                    if current is not None and current.record_offset > record_offset:
                        continue  # a later commit completed first
                    offsets[tp] = OffsetAndMetadata(
                        offset=offset,
                        leader_epoch=epoch,
                        metadata=meta,
                        commit_timestamp_ms=commit_ts,
                        expire_timestamp_ms=expire,
                        record_offset=record_offset,
                    )

            return OffsetCommitResponse(topics=answered), install
        return OffsetCommitResponse(topics=answered), _nothing

    def _commit_error(self, group: GroupMetadata, body: Any, generation: int) -> ErrorCode:
        if group.is_(S.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.consumer is not None:
            # KIP-848: the member epoch, not a generation (STALE_MEMBER_EPOCH).
            return self.coordinator.consumer.commit_error(
                group.consumer, body.member_id, generation
            )
        if generation < 0 and group.is_(S.EMPTY):
            return ErrorCode.NONE
        if group.is_(S.COMPLETING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        error = self.coordinator._validate_member(group, body.member_id, body.group_instance_id)
        if error:
            return error
        if generation != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    # -- OffsetFetch -----------------------------------------------------------------------

    def fetch_offsets(self, body: Any, *, api_version: int) -> OffsetFetchResponse:
        if api_version >= 8:
            groups = []
            for wanted in body.groups:
                error, found = self._fetch_group(wanted.group_id, wanted.topics)
                member = self.groups.get(wanted.group_id)
                if not error and api_version >= 9 and member is not None and member.consumer:
                    # KIP-848: a member naming itself must be at its current epoch.
                    error = self.coordinator.consumer.fetch_error(
                        member.consumer, wanted.member_id, wanted.member_epoch
                    )
                    if error:
                        found = []
                topics = _found_topics(
                    found, OffsetFetchResponseTopics, OffsetFetchResponsePartitions
                )
                if body.require_stable:
                    self.txn.mark_unstable(wanted.group_id, topics)
                groups.append(
                    OffsetFetchResponseGroup(
                        group_id=wanted.group_id, error_code=error, topics=topics
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
        topics = _found_topics(found, OffsetFetchResponseTopic, OffsetFetchResponsePartition)
        if api_version >= 7 and body.require_stable:
            self.txn.mark_unstable(body.group_id, topics)
        return OffsetFetchResponse(error_code=error, topics=topics)

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
        if group.consumer is not None:
            # A KIP-848 group (its shell stays Empty): its members' subscriptions, by name
            # or by regular expression over the topics there are.
            subscribed = group.consumer.subscribed_topics(self.coordinator.broker.metadata.topics)
        elif not group.is_(S.EMPTY):
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
                elif not group.is_(S.EMPTY) or group.has_consumer_members():
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
        if group.generation_id > 0:
            # A group that never went through a rebalance (generation 0: commits only, no
            # group management) has no GroupMetadata record to delete; Kafka's
            # cleanupGroupMetadata writes no tombstone for it either.
            records.append((group_metadata_key(group.group_id), None))
        if group.consumer is not None:
            # An empty consumer group: its ConsumerGroup* records go too.
            records.extend((key, None) for key in group.consumer.persisted)
        if group.share is not None:
            # An empty share group: its ShareGroup* records and its share-partitions'
            # state go too.
            records.extend((key, None) for key in group.share.persisted)
            self.coordinator.share_partitions.forget_group(group.group_id)
        if records:
            self.store.append(group.group_id, records)
        group.offsets.clear()
        group.transition_to(S.DEAD, self.now_ms())
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
            if group is None or group.consumer is not None or group.share is not None:
                # A KIP-848 (or KIP-932 share) group is not a classic group: DescribeGroups v0-5 answers it
                # as it answers an unknown one (Kafka's; ConsumerGroupDescribe shows it).
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
            modern = group.consumer or group.share
            kind = (
                "share" if group.share is not None else "classic" if modern is None else "consumer"
            )
            state = group.state.value if modern is None else modern.state.value
            if states and state.lower() not in states:
                continue
            if types and kind not in types:
                continue
            listed.append(
                ListedGroup(
                    group_id=group.group_id,
                    protocol_type=group.protocol_type or "",
                    group_state=state,
                    group_type=kind,
                )
            )
        # Kafka's: only while a partition this broker leads is still loading. (In a cluster
        # the others are led, and loaded, elsewhere: each broker lists its own groups.)
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.store.loading else ErrorCode.NONE
        return ListGroupsResponse(error_code=error, groups=listed)

    # -- expiry ----------------------------------------------------------------------------

    async def run_expiration(self) -> None:
        interval_s = self.coordinator.config.offsets_retention_check_interval_ms / 1000
        while True:
            await trio.sleep(interval_s)
            self.expire_offsets(self.now_ms())

    def expire_offsets(self, now_ms: int) -> int:
        """Remove offsets past retention (Kafka's cleanupGroupMetadata); returns how many."""
        retention_ms = self.coordinator.config.offsets_retention_minutes * 60_000
        removed = 0
        for group in list(self.groups.values()):
            rule = _expiry_rule(group)
            if rule is None:
                continue
            subscribed, since_empty = rule
            doomed = []
            for tp, value in group.offsets.items():
                if tp[0] in subscribed:
                    continue
                if value.expire_timestamp_ms >= 0:
                    expired = now_ms >= value.expire_timestamp_ms
                elif since_empty:
                    expired = now_ms - group.state_timestamp_ms >= retention_ms
                else:
                    expired = now_ms - value.commit_timestamp_ms >= retention_ms
                if expired:
                    doomed.append(tp)
            try:
                if doomed:
                    self._remove_offsets(group, doomed)
                    removed += len(doomed)
                if group.is_(S.EMPTY) and not group.offsets and not group.has_consumer_members():
                    self._delete_group(group)
            except KafkaError as exc:
                logger.warning("offset expiry of group %s failed: %s", group.group_id, exc)
        if removed:
            logger.info("removed %d expired offset(s)", removed)
        return removed


def _expiry_rule(group: GroupMetadata) -> tuple[set[str], bool] | None:
    """Which offsets of `group` may expire, as Kafka's GroupMetadata.removeExpiredOffsets says:
    (topics kept whatever their age, whether age counts from the group becoming Empty), or
    None when nothing of the group expires now."""
    if group.is_(S.DEAD) or group.share is not None:
        # A share group has no committed offsets; it goes only by DeleteGroups.
        return None
    if group.has_consumer_members():
        # A KIP-848 group with members keeps what they subscribe to (names; a regex
        # keeps everything, its matches being the broker's to resolve).
        members = group.consumer.members.values()
        if any(m.subscribed_topic_regex for m in members):
            return None
        return {t for m in members for t in m.subscribed_topic_names}, False
    if group.protocol_type is None:
        # Standalone (simple) consumers: each offset retention after its commit.
        return set(), False
    if group.is_(S.EMPTY):
        # Retention after the group became Empty; a group stored without that timestamp
        # (an old GroupMetadataValue) counts from each commit.
        return set(), group.state_timestamp_ms >= 0
    if group.is_(S.STABLE):
        # A Stable consumer group keeps what it subscribes to (KIP-496); a protocol whose
        # subscriptions cannot be read keeps everything.
        subscribed = group.subscribed_topics()
        return None if subscribed is None else (subscribed, False)
    # PreparingRebalance or CompletingRebalance: the subscriptions are changing.
    return None


def _commit_answer(body: Any, error: ErrorCode) -> OffsetCommitResponse:
    """The same error for every partition of the request."""
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=error
                    )
                    for p in t.partitions
                ],
            )
            for t in body.topics
        ]
    )


def _found_topics(found: Any, topic_cls: type, partition_cls: type) -> list[Any]:
    """OffsetFetch's topics from `_fetch_group`'s (name, [(index, offset, epoch, metadata)]);
    v8+ (several groups) and earlier versions differ only in the classes."""
    return [
        topic_cls(
            name=name,
            partitions=[
                partition_cls(
                    partition_index=index,
                    committed_offset=offset,
                    committed_leader_epoch=epoch,
                    metadata=metadata,
                    error_code=ErrorCode.NONE,
                )
                for index, offset, epoch, metadata in parts
            ],
        )
        for name, parts in found
    ]
