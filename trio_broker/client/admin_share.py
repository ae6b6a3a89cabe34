"""The admin client's share group calls (mixed into `Admin`, KIP-932): a share group
described (ShareGroupDescribe), its share-partition start offsets read, set and deleted
(Describe/Alter/DeleteShareGroupOffsets), each sent to the group's coordinator."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from trio_broker.client.admin_types import (
    GroupDescription,
    MemberDescription,
    check_errors,
    error_with,
)
from trio_broker.client.errors import error_for
from trio_broker.client.subscription import TopicPartition
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.alter_share_group_offsets_request import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from trio_broker.protocol._generated.delete_share_group_offsets_request import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequestTopic,
)
from trio_broker.protocol._generated.describe_share_group_offsets_request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from trio_broker.protocol._generated.share_group_describe_request import (
    ShareGroupDescribeRequest,
)

_check = check_errors
_error = error_with


class ShareGroupCalls:
    """Admin's share group calls; `Admin` provides `client` and `_coordinator`."""

    client: Any
    _coordinator: Any  # async (group id) -> the coordinator's address

    async def describe_share_group(self, group_id: str) -> GroupDescription | None:
        """ShareGroupDescribe: state, epochs, members and their assignments; None when the
        group is not a share group (or the broker has no share groups)."""
        coordinator = await self._coordinator(group_id)
        try:
            await self.client.api_version(coordinator, ShareGroupDescribeRequest.API_KEY)
        except KafkaError:
            return None
        response = await self.client.send(
            coordinator, ShareGroupDescribeRequest(group_ids=[group_id])
        )
        g = response.groups[0]
        if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            return None
        if g.error_code:
            raise error_for(g.error_code, g.error_message or f"group {group_id!r}")
        members = []
        for m in g.members:
            assigned = frozenset(
                TopicPartition(t.topic_name, p)
                for t in m.assignment.topic_partitions
                for p in t.partitions
            )
            members.append(
                MemberDescription(
                    member_id=m.member_id,
                    group_instance_id=None,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    topics=tuple(m.subscribed_topic_names),
                    assignment=assigned,
                    member_epoch=m.member_epoch,
                    target_assignment=assigned,  # a share member takes its target at once
                )
            )
        return GroupDescription(
            group_id=group_id,
            state=g.group_state,
            protocol_type="share",
            protocol=g.assignor_name,
            members=tuple(members),
            group_type="share",
            group_epoch=g.group_epoch,
            assignment_epoch=g.assignment_epoch,
        )

    async def list_share_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """DescribeShareGroupOffsets: each share-partition's start offset (all the group
        has state of, or `partitions`; -1 for one it has none of)."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topics = [
                DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
                for t, ps in by_topic.items()
            ]
        request = DescribeShareGroupOffsetsRequest(
            groups=[DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=topics)]
        )
        response = await self.client.send(await self._coordinator(group_id), request)
        g = response.groups[0]
        if g.error_code:
            raise error_for(g.error_code, g.error_message or f"share group {group_id!r}")
        result, errors = {}, {}
        for t in g.topics:
            for p in t.partitions:
                tp = TopicPartition(t.topic_name, p.partition_index)
                if p.error_code:
                    errors[tp] = _error(p.error_code, p.error_message, f"{tp.topic}-{tp.partition}")
                else:
                    result[tp] = p.start_offset
        _check("DescribeShareGroupOffsets", errors, result)
        return result

    async def alter_share_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int]
    ) -> None:
        """AlterShareGroupOffsets: start these share-partitions over at these offsets (the
        group must have no members)."""
        by_topic: dict[str, list[AlterShareGroupOffsetsRequestPartition]] = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp.topic, []).append(
                AlterShareGroupOffsetsRequestPartition(
                    partition_index=tp.partition, start_offset=offset
                )
            )
        request = AlterShareGroupOffsetsRequest(
            group_id=group_id,
            topics=[
                AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
                for t, ps in by_topic.items()
            ],
        )
        response = await self.client.send(await self._coordinator(group_id), request)
        errors = {
            TopicPartition(t.topic_name, p.partition_index): _error(
                p.error_code, p.error_message, f"{t.topic_name}-{p.partition_index}"
            )
            for t in response.responses
            for p in t.partitions
            if p.error_code
        }
        if response.error_code and not errors:
            raise _error(response.error_code, response.error_message, f"share group {group_id!r}")
        _check("AlterShareGroupOffsets", errors)

    async def delete_share_group_offsets(self, group_id: str, topics: Iterable[str]) -> None:
        """DeleteShareGroupOffsets: forget these topics' share-partitions (the group must
        have no members); the next fetch starts them at share.auto.offset.reset."""
        request = DeleteShareGroupOffsetsRequest(
            group_id=group_id,
            topics=[DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics],
        )
        response = await self.client.send(await self._coordinator(group_id), request)
        if response.error_code:
            raise _error(response.error_code, response.error_message, f"share group {group_id!r}")
        errors = {
            t.topic_name: _error(t.error_code, t.error_message, t.topic_name)
            for t in response.responses
            if t.error_code
        }
        _check("DeleteShareGroupOffsets", errors)
