"""DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets (KIP-932's
admin side, Kafka 4.0's version 0): a share group's share-partition start offsets, read,
set and deleted.

A share group's "offset" for a partition is its share-partition start offset: every record
before it is acknowledged or archived. Describing answers it (-1 for a partition the group
has no state of); altering starts the share-partition over at the given offset (nothing
in flight), and deleting forgets it (the next fetch starts where `share.auto.offset.reset`
says). Altering and deleting need an empty group (NON_EMPTY_GROUP otherwise), as in Kafka;
a share group that does not exist yet is made by an alter.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from trio_broker.cluster.groups.share.share_partition import SharePartition
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.alter_share_group_offsets_response import (
    AlterShareGroupOffsetsResponse,
    AlterShareGroupOffsetsResponsePartition,
    AlterShareGroupOffsetsResponseTopic,
)
from trio_broker.protocol._generated.delete_share_group_offsets_response import (
    DeleteShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsResponseTopic,
)
from trio_broker.protocol._generated.describe_share_group_offsets_response import (
    DescribeShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponseGroup,
    DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
)

if TYPE_CHECKING:
    from trio_broker.cluster.groups.group_coordinator import GroupCoordinator

__all__ = ["ShareGroupOffsets"]


class ShareGroupOffsets:
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator

    def _topics(self) -> dict[str, Any]:
        return self.coordinator.broker.metadata.topics

    def _group_error(self, group_id: str, *, empty: bool) -> tuple[ErrorCode, str | None]:
        error = self.coordinator.check_group(group_id)
        if error:
            return error, None
        shell = self.coordinator.groups.get(group_id)
        if (
            shell is not None
            and shell.share is None
            and (shell.members or shell.consumer is not None or shell.offsets)
        ):
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."
        if empty and shell is not None and shell.has_consumer_members():
            return ErrorCode.NON_EMPTY_GROUP, f"The group {group_id} has active members."
        return ErrorCode.NONE, None

    # -- DescribeShareGroupOffsets ---------------------------------------------------------

    async def describe(self, body: Any) -> DescribeShareGroupOffsetsResponse:
        manager = self.coordinator.share_partitions
        groups = []
        for g in body.groups:
            error, message = self._group_error(g.group_id, empty=False)
            if error:
                groups.append(
                    DescribeShareGroupOffsetsResponseGroup(
                        group_id=g.group_id, error_code=error, error_message=message
                    )
                )
                continue
            if manager.persister is not None:
                # A cluster: the start offsets are the share coordinators'.
                known = await self._durable(g.group_id, g.topics)
            else:
                known = manager.group_partitions(g.group_id)
            if g.topics is None:
                wanted: dict[str, list[int]] = {}
                for topic, partition in sorted(known):
                    wanted.setdefault(topic, []).append(partition)
            else:
                wanted = {t.topic_name: list(t.partitions) for t in g.topics}
            topics = []
            for name, partitions in wanted.items():
                state = self._topics().get(name)
                rows = []
                for p in partitions:
                    sp = known.get((name, p))
                    if isinstance(sp, KafkaError):
                        rows.append(
                            DescribeShareGroupOffsetsResponsePartition(
                                partition_index=p, start_offset=-1, error_code=sp.code
                            )
                        )
                        continue
                    code = (
                        ErrorCode.NONE
                        if state is not None and p in state.partitions
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    )
                    leader_epoch = state.partitions[p].leader_epoch if not code else -1
                    rows.append(
                        DescribeShareGroupOffsetsResponsePartition(
                            partition_index=p,
                            start_offset=sp.start_offset if sp is not None else -1,
                            leader_epoch=leader_epoch,
                            error_code=code,
                        )
                    )
                topics.append(
                    DescribeShareGroupOffsetsResponseTopic(
                        topic_name=name,
                        topic_id=state.topic_id if state is not None else _zero(),
                        partitions=rows,
                    )
                )
            groups.append(
                DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, topics=topics)
            )
        return DescribeShareGroupOffsetsResponse(groups=groups)

    async def _durable(self, group_id: str, topics: list[Any] | None) -> dict[Any, Any]:
        """A cluster: the share-partitions with state at their share coordinators
        (ReadShareGroupStateSummary), of these topics (None: every topic), as the start
        offset each has (in a SharePartition), or the KafkaError of one that cannot say."""
        meta = self._topics()
        if topics is None:
            wanted = {n: sorted(t.partitions) for n, t in meta.items() if not t.internal}
        else:
            wanted = {t.topic_name: list(t.partitions) for t in topics if t.topic_name in meta}
        keys = [(meta[n].topic_id, p) for n, ps in wanted.items() for p in ps]
        persister = self.coordinator.share_partitions.persister
        assert persister is not None
        found = await persister.start_offsets(group_id, keys)
        names = {meta[n].topic_id: n for n in wanted}
        out: dict[Any, Any] = {}
        for (topic_id, p), (code, start) in found.items():
            if code:
                out[(names[topic_id], p)] = KafkaError(ErrorCode(code))
            elif start >= 0:
                out[(names[topic_id], p)] = SharePartition(names[topic_id], p, start)
        return out

    # -- AlterShareGroupOffsets ------------------------------------------------------------

    async def alter(self, body: Any) -> AlterShareGroupOffsetsResponse:
        error, message = self._group_error(body.group_id, empty=True)
        manager = self.coordinator.share_partitions
        if not error:
            self.coordinator.share.ensure_group(body.group_id)
        out = []
        for t in body.topics:
            state = self._topics().get(t.topic_name)
            rows = []
            for p in t.partitions:
                code, text = error, message
                if not code and (state is None or p.partition_index not in state.partitions):
                    code, text = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
                if not code and p.start_offset < 0:
                    code, text = ErrorCode.INVALID_REQUEST, "The start offset must not be negative."
                if not code and manager.persister is not None:
                    # A cluster: at the share coordinator, which fences the leader's state.
                    code = ErrorCode(
                        await manager.initialize_state(
                            body.group_id, t.topic_name, p.partition_index, p.start_offset
                        )
                    )
                elif not code:
                    manager.replace(
                        body.group_id,
                        SharePartition(t.topic_name, p.partition_index, p.start_offset),
                    )
                rows.append(
                    AlterShareGroupOffsetsResponsePartition(
                        partition_index=p.partition_index, error_code=code, error_message=text
                    )
                )
            out.append(
                AlterShareGroupOffsetsResponseTopic(
                    topic_name=t.topic_name,
                    topic_id=state.topic_id if state is not None else _zero(),
                    partitions=rows,
                )
            )
        # A group's error is the request's too (Kafka 4.1), and each partition's.
        return AlterShareGroupOffsetsResponse(
            error_code=error, error_message=message, responses=out
        )

    # -- DeleteShareGroupOffsets -----------------------------------------------------------

    async def delete(self, body: Any) -> DeleteShareGroupOffsetsResponse:
        error, message = self._group_error(body.group_id, empty=True)
        if not error and self.coordinator.share.group(body.group_id) is None:
            error, message = ErrorCode.GROUP_ID_NOT_FOUND, f"Group {body.group_id} not found."
        if error:
            return DeleteShareGroupOffsetsResponse(error_code=error, error_message=message)
        manager = self.coordinator.share_partitions
        known = manager.group_partitions(body.group_id)
        out = []
        for t in body.topics:
            state = self._topics().get(t.topic_name)
            if state is None:
                out.append(
                    DeleteShareGroupOffsetsResponseTopic(
                        topic_name=t.topic_name,
                        topic_id=_zero(),
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    )
                )
                continue
            for topic, partition in sorted(known):
                if topic == t.topic_name:
                    manager.forget(body.group_id, topic, partition)
            # A cluster: the state at the share coordinators goes too.
            failed = await manager.delete_state(body.group_id, [t.topic_name])
            out.append(
                DeleteShareGroupOffsetsResponseTopic(
                    topic_name=t.topic_name,
                    topic_id=state.topic_id,
                    error_code=failed.get(t.topic_name, ErrorCode.NONE),
                )
            )
        return DeleteShareGroupOffsetsResponse(responses=out)


def _zero() -> uuid.UUID:
    return uuid.UUID(int=0)
