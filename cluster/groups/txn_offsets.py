"""Transactional offset commits (TxnOffsetCommit): held pending until the transaction ends.

Kafka's GroupMetadata.pendingTransactionalOffsetCommits: the offsets a transactional
producer commits for a group are written to `__consumer_offsets` as a transactional batch
(its producer id and epoch, no sequence) and kept aside per producer; the COMMIT marker
that the transaction coordinator writes into that partition makes them the group's
committed offsets, an ABORT marker discards them. A group with pending offsets answers an
OffsetFetch that asks for stable offsets (`require_stable`, read_committed consumers) with
UNSTABLE_OFFSET_COMMIT for those partitions. After a restart the pending offsets are
rebuilt from the log (`group_records.replay`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from trio_broker.cluster.groups.group_metadata import GroupMetadata, GroupState, OffsetAndMetadata
from trio_broker.cluster.groups.records import encode_offset_commit_value, offset_commit_key
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.txn_offset_commit_response import (
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)

if TYPE_CHECKING:
    from trio_broker.cluster.groups.offsets import GroupOffsets

logger = logging.getLogger(__name__)

__all__ = ["TxnOffsetCommits"]

S = GroupState
OFFSET_METADATA_MAX_BYTES = 4096


class TxnOffsetCommits:
    def __init__(self, offsets: GroupOffsets) -> None:
        self.offsets = offsets
        # producer id -> (group id, (topic, partition)) -> offset waiting for the marker
        self.pending: dict[int, dict[tuple[str, tuple[str, int]], OffsetAndMetadata]] = {}

    def add_loaded(self, group_id: str, by_producer: dict[int, dict]) -> None:
        for pid, found in by_producer.items():
            mine = self.pending.setdefault(pid, {})
            for tp, value in found.items():
                mine[(group_id, tp)] = value

    def is_pending(self, group_id: str, tp: tuple[str, int]) -> bool:
        return any((group_id, tp) in found for found in self.pending.values())

    def mark_unstable(self, group_id: str, topics: list[Any]) -> None:
        """OffsetFetch with require_stable: partitions with a pending transactional commit
        answer UNSTABLE_OFFSET_COMMIT (retriable) instead of an offset about to change."""
        if not self.pending:
            return
        for topic in topics:
            for p in topic.partitions:
                if self.is_pending(group_id, (topic.name, p.partition_index)):
                    p.error_code = ErrorCode.UNSTABLE_OFFSET_COMMIT
                    p.committed_offset = -1

    def commit(self, body: Any, *, api_version: int) -> TxnOffsetCommitResponse:
        coordinator = self.offsets.coordinator
        group_id = body.group_id
        error = coordinator.check_group(group_id)
        group = self.offsets.groups.get(group_id)
        if not error:
            error = self._group_error(group, body, api_version)
        if not error and group is None:
            group = self.offsets.groups[group_id] = GroupMetadata(
                group_id=group_id, state_timestamp_ms=self.offsets.now_ms()
            )
        topics = coordinator.broker.metadata.topics
        now = self.offsets.now_ms()
        answered = []
        records: list[tuple[bytes, bytes | None]] = []
        accepted: list[tuple[Any, tuple[str, int], OffsetAndMetadata]] = []
        for topic in body.topics:
            parts = []
            answered.append(TxnOffsetCommitResponseTopic(name=topic.name, partitions=parts))
            for p in topic.partitions:
                metadata = p.committed_metadata or ""
                code = error
                if not code and (
                    topic.name not in topics
                    or p.partition_index not in topics[topic.name].partitions
                ):
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif not code and len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                    code = ErrorCode.OFFSET_METADATA_TOO_LARGE
                part = TxnOffsetCommitResponsePartition(
                    partition_index=p.partition_index, error_code=code
                )
                parts.append(part)
                if code:
                    continue
                epoch = p.committed_leader_epoch if api_version >= 2 else -1
                value = OffsetAndMetadata(
                    offset=p.committed_offset,
                    leader_epoch=epoch,
                    metadata=metadata,
                    commit_timestamp_ms=now,
                )
                records.append(
                    (
                        offset_commit_key(group_id, topic.name, p.partition_index),
                        encode_offset_commit_value(value.offset, epoch, metadata, now, -1),
                    )
                )
                accepted.append((part, (topic.name, p.partition_index), value))
        if records:
            try:
                self.offsets.store.append(
                    group_id,
                    records,
                    producer_id=body.producer_id,
                    producer_epoch=body.producer_epoch,
                )
            except KafkaError as exc:
                logger.info("transactional offset commit of group %s failed: %s", group_id, exc)
                for part, _, _ in accepted:
                    part.error_code = exc.code
                return TxnOffsetCommitResponse(topics=answered)
            mine = self.pending.setdefault(body.producer_id, {})
            for _, tp, value in accepted:
                mine[(group_id, tp)] = value
        return TxnOffsetCommitResponse(topics=answered)

    def _group_error(self, group: GroupMetadata | None, body: Any, api_version: int) -> ErrorCode:
        generation = body.generation_id if api_version >= 3 else -1
        member_id = body.member_id if api_version >= 3 else ""
        if group is None:
            return ErrorCode.ILLEGAL_GENERATION if generation >= 0 else ErrorCode.NONE
        if group.is_(S.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.consumer is not None:
            # KIP-848: the member and its epoch (sent as the generation), when given.
            if generation < 0:
                return ErrorCode.NONE
            return self.offsets.coordinator.consumer.commit_error(
                group.consumer, member_id, generation
            )
        instance_id = body.group_instance_id if api_version >= 3 else None
        if self.offsets.coordinator._fenced(group, instance_id, member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id and member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation >= 0 and generation != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def complete(self, producer_id: int, offsets_partition: int, commit: bool) -> int:
        """The marker of `producer_id` reached `__consumer_offsets-offsets_partition`."""
        mine = self.pending.get(producer_id)
        if not mine:
            return 0
        store = self.offsets.store
        done = [key for key in mine if store.partition_for(key[0]) == offsets_partition]
        for group_id, tp in done:
            value = mine.pop((group_id, tp))
            if not commit:
                continue
            group = self.offsets.groups.get(group_id)
            if group is None:
                group = self.offsets.groups[group_id] = GroupMetadata(
                    group_id=group_id, state_timestamp_ms=self.offsets.now_ms()
                )
            group.offsets[tp] = value
        if not mine:
            del self.pending[producer_id]
        return len(done)
