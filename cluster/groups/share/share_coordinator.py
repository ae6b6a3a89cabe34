"""ShareGroupHeartbeat and ShareGroupDescribe (KIP-932): share group membership, served by
the same `GroupCoordinator` as classic and consumer groups (Kafka's GroupMetadataManager,
its shareGroupHeartbeat path).

One heartbeat: validate the member and its epoch; a new member, a leaver, a changed
subscription or a changed partition count bumps the group epoch and recomputes the target
assignment (`share_group.simple_assign`); the member takes the new epoch and its target at
once, and the answer carries its assignment whenever it differs from what the member was
last told. A member whose session runs out is removed as a leaver is, and the records it
held are released (`share_fetch.SharePartitionManager`).

Membership is kept as Kafka keeps it, in ShareGroup* records in `__consumer_offsets`
(`share_records`): the group epoch, each member and its subscription, the topics with
share-partitions; written when they change and replayed when the partition is loaded, so
after a restart the group is listed and described as it was, its members carry on at their
epoch, and those that do not come back are removed after their session.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from trio_broker.cluster.groups.group_config import (
    SHARE_HEARTBEAT_INTERVAL,
    SHARE_SESSION_TIMEOUT,
    group_config_values,
)
from trio_broker.cluster.groups.group_metadata import GroupMetadata, GroupState
from trio_broker.cluster.groups.share.share_group import (
    LEAVE_EPOCH,
    ShareGroup,
    ShareMember,
    TopicPartitions,
    simple_assign,
)
from trio_broker.cluster.groups.share.share_records import group_records, load_group
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.share_group_describe_response import (
    Assignment as DescribedAssignment,
)
from trio_broker.protocol._generated.share_group_describe_response import (
    DescribedGroup,
    Member,
    ShareGroupDescribeResponse,
)
from trio_broker.protocol._generated.share_group_describe_response import (
    TopicPartitions as DescribedTopicPartitions,
)
from trio_broker.protocol._generated.share_group_heartbeat_response import (
    Assignment,
    ShareGroupHeartbeatResponse,
)
from trio_broker.protocol._generated.share_group_heartbeat_response import (
    TopicPartitions as HeartbeatTopicPartitions,
)

if TYPE_CHECKING:
    from trio_broker.cluster.groups.group_coordinator import GroupCoordinator

logger = logging.getLogger(__name__)

__all__ = ["ShareGroupCoordinator"]


class _Answer(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        self.code, self.message = code, message


class ShareGroupCoordinator:
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator
        self.config = coordinator.config

    # -- lookups ---------------------------------------------------------------------------

    def group(self, group_id: str) -> ShareGroup | None:
        shell = self.coordinator.groups.get(group_id)
        return getattr(shell, "share", None) if shell is not None else None

    def config_values(self, group_id: str) -> dict[str, Any]:
        overrides = self.coordinator.broker.metadata.group_configs.get(group_id, {})
        return group_config_values(overrides, self.config)

    def _topics(self) -> dict[str, Any]:
        return {
            name: topic
            for name, topic in self.coordinator.broker.metadata.topics.items()
            if not topic.internal
        }

    # -- ShareGroupHeartbeat ---------------------------------------------------------------

    def heartbeat(self, body: Any, *, client_id: str, client_host: str) -> Any:
        try:
            return self._heartbeat(body, client_id=client_id, client_host=client_host)
        except _Answer as answer:
            return ShareGroupHeartbeatResponse(
                error_code=answer.code,
                error_message=answer.message,
                member_id=body.member_id or None,
                member_epoch=body.member_epoch,
            )

    def _group_for(self, group_id: str, *, create: bool) -> ShareGroup:
        coordinator = self.coordinator
        shell = coordinator.groups.get(group_id)
        if shell is not None and getattr(shell, "share", None) is None:
            if shell.members or shell.has_consumer_members() or not shell.is_(GroupState.EMPTY):
                raise _Answer(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."
                )
            if shell.offsets:
                # Committed offsets belong to a consumer group: Kafka refuses the id too.
                raise _Answer(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."
                )
        if shell is None or getattr(shell, "share", None) is None:
            if not create:
                raise _Answer(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {group_id} not found.")
            if shell is None:
                shell = coordinator.groups[group_id] = GroupMetadata(
                    group_id=group_id, state_timestamp_ms=coordinator.now_ms()
                )
            shell.consumer = None
            shell.protocol_type = "share"
            shell.share = ShareGroup(group_id=group_id)
        return shell.share

    def ensure_group(self, group_id: str) -> ShareGroup | None:
        """The share group of this id, made when there is none (AlterShareGroupOffsets);
        None when the id belongs to a group of another kind."""
        try:
            return self._group_for(group_id, create=True)
        except _Answer:
            return None

    def _heartbeat(self, body: Any, *, client_id: str, client_host: str) -> Any:
        if not body.group_id:
            raise _Answer(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if body.member_epoch < LEAVE_EPOCH:
            raise _Answer(ErrorCode.INVALID_REQUEST, f"MemberEpoch {body.member_epoch} is invalid.")
        if body.member_epoch == 0 and body.subscribed_topic_names is None:
            raise _Answer(
                ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request."
            )
        if body.member_epoch != 0 and not body.member_id:
            raise _Answer(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        error = self.coordinator.check_group(body.group_id)
        if error:
            raise _Answer(error)
        epoch = body.member_epoch
        group = self._group_for(body.group_id, create=epoch == 0)
        values = self.config_values(group.group_id)
        session_ms, interval_ms = values[SHARE_SESSION_TIMEOUT], values[SHARE_HEARTBEAT_INTERVAL]
        if epoch == LEAVE_EPOCH:
            member = group.members.get(body.member_id)
            if member is None:
                raise _Answer(ErrorCode.UNKNOWN_MEMBER_ID)
            self._remove(group, member, "left the group")
            return ShareGroupHeartbeatResponse(
                member_id=body.member_id, member_epoch=LEAVE_EPOCH, heartbeat_interval_ms=0
            )
        member = group.members.get(body.member_id) if body.member_id else None
        changed = False
        if epoch == 0:
            max_size = self.config.value("group.share.max.size")
            if member is None and len(group.members) >= max_size:
                raise _Answer(
                    ErrorCode.GROUP_MAX_SIZE_REACHED,
                    f"The share group has reached its maximum capacity of {max_size} members.",
                )
            if member is None:
                member = ShareMember(
                    member_id=body.member_id or str(uuid.uuid4()),
                    client_id=client_id,
                    client_host=client_host,
                )
                group.members[member.member_id] = member
                changed = True
                logger.info("share group %s: member %s joined", group.group_id, member.member_id)
            member.sent = None  # a (re)joining member is told its assignment
        else:
            if member is None:
                raise _Answer(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"Member {body.member_id} is not in the group."
                )
            if epoch != member.member_epoch and epoch != member.previous_epoch:
                raise _Answer(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"The share group member has a smaller member epoch ({epoch}) than the "
                    f"one known by the group coordinator ({member.member_epoch}).",
                )
        member.rack_id = body.rack_id
        if body.subscribed_topic_names is not None:
            names = tuple(sorted(set(body.subscribed_topic_names)))
            if names != member.subscribed_topic_names:
                member.subscribed_topic_names = names
                changed = True
        epoch_before = group.group_epoch
        self._update_target(group, "membership or subscription changed" if changed else "")
        if changed or group.group_epoch != epoch_before:
            self._persist(group)
        if member.member_epoch != group.group_epoch:
            member.previous_epoch = member.member_epoch
            member.member_epoch = group.group_epoch
        self._arm_timer(group, member, session_ms)
        send = member.sent != member.assigned
        if send:
            member.sent = dict(member.assigned)
        return ShareGroupHeartbeatResponse(
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=interval_ms,
            assignment=Assignment(topic_partitions=self._ids(member.assigned)) if send else None,
        )

    def _update_target(self, group: ShareGroup, reason: str) -> None:
        topics = self._topics()
        subscriptions = {
            m.member_id: {t for t in m.subscribed_topic_names if t in topics}
            for m in group.members.values()
        }
        wanted = set().union(*subscriptions.values()) if subscriptions else set()
        counts = {t: len(topics[t].partitions) for t in sorted(wanted)}
        if counts != group.topic_partitions:
            group.topic_partitions = counts
            reason = reason or "the subscribed topics' partitions changed"
        if not reason:
            return
        group.group_epoch += 1
        target = simple_assign(subscriptions, counts)
        for member_id, assigned in target.items():
            group.members[member_id].assigned = assigned
        group.assignment_epoch = group.group_epoch
        logger.info(
            "share group %s: epoch %d (%s), %d member(s)",
            group.group_id,
            group.group_epoch,
            reason,
            len(group.members),
        )

    def _ids(self, assigned: TopicPartitions) -> list[HeartbeatTopicPartitions]:
        topics = self.coordinator.broker.metadata.topics
        return [
            HeartbeatTopicPartitions(topic_id=topics[t].topic_id, partitions=list(ps))
            for t, ps in sorted(assigned.items())
            if t in topics
        ]

    # -- leaving, sessions -----------------------------------------------------------------

    def _remove(self, group: ShareGroup, member: ShareMember, why: str) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
            member.session_timer = None
        group.members.pop(member.member_id, None)
        logger.info("share group %s: member %s %s", group.group_id, member.member_id, why)
        self._update_target(group, f"member {member.member_id} {why}")
        self._persist(group)
        partitions = getattr(self.coordinator, "share_partitions", None)
        if partitions is not None and why == "timed out":
            # A leaver closes its share session itself (a final ShareAcknowledge carrying
            # its last acknowledgements, often after the leave); a member gone silent has
            # its session ended and its records released here.
            partitions.member_gone(group.group_id, member.member_id)

    def _arm_timer(self, group: ShareGroup, member: ShareMember, session_ms: int) -> None:
        if member.session_timer is None:
            member.session_timer = self.coordinator.timer(
                session_ms, lambda: self._on_session_expired(group, member)
            )
        else:
            member.session_timer.reset(session_ms)

    def _on_session_expired(self, group: ShareGroup, member: ShareMember) -> None:
        member.session_timer = None
        if group.members.get(member.member_id) is member:
            self._remove(group, member, "timed out")

    # -- records -------------------------------------------------------------------------

    def _persist(self, group: ShareGroup) -> None:
        """Append what changed in the group's records since they were last written."""
        shell = self.coordinator.groups.get(group.group_id)
        if shell is None or shell.share is not group:
            return
        topics = self.coordinator.broker.metadata.topics

        def topic_id(name: str) -> Any:
            topic = topics.get(name)
            return topic.topic_id if topic is not None else None

        initialized: dict[str, list[int]] = {}
        manager = getattr(self.coordinator, "share_partitions", None)
        for g, topic, partition in list(manager.partitions if manager is not None else ()):
            if g == group.group_id:
                initialized.setdefault(topic, []).append(partition)
        wanted = group_records(group, topic_id, initialized)
        group.persisted = self.coordinator.store.write_difference(
            group.group_id, group.persisted, wanted, f"share group {group.group_id}"
        )

    def load(self, group_id: str, records: dict[bytes, bytes]) -> ShareGroup | None:
        """A group rebuilt from a replayed partition: its assignment computed again, its
        members' sessions starting now (those that do not come back are removed)."""
        group = load_group(group_id, records)
        if group is None:
            return None
        topics = self._topics()
        subscriptions = {
            m.member_id: {t for t in m.subscribed_topic_names if t in topics}
            for m in group.members.values()
        }
        wanted = set().union(*subscriptions.values()) if subscriptions else set()
        group.topic_partitions = {t: len(topics[t].partitions) for t in sorted(wanted)}
        for member_id, assigned in simple_assign(subscriptions, group.topic_partitions).items():
            group.members[member_id].assigned = assigned
        group.assignment_epoch = group.group_epoch
        session_ms = self.config_values(group_id)[SHARE_SESSION_TIMEOUT]
        for member in group.members.values():
            self._arm_timer(group, member, session_ms)
        logger.info(
            "share group %s loaded: epoch %d, %d member(s)",
            group_id,
            group.group_epoch,
            len(group.members),
        )
        return group

    def unload(self, group: ShareGroup) -> None:
        for member in group.members.values():
            if member.session_timer is not None:
                member.session_timer.cancel()
                member.session_timer = None

    # -- ShareGroupDescribe ----------------------------------------------------------------

    def describe(self, body: Any) -> ShareGroupDescribeResponse:
        out = []
        topics = self.coordinator.broker.metadata.topics
        for group_id in body.group_ids:
            error = self.coordinator.check_group(group_id)
            if error:
                out.append(DescribedGroup(group_id=group_id, error_code=error))
                continue
            group = self.group(group_id)
            if group is None:
                shell = self.coordinator.groups.get(group_id)
                out.append(
                    DescribedGroup(
                        group_id=group_id,
                        error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                        error_message=f"Group {group_id} not found."
                        if shell is None
                        else f"Group {group_id} is not a share group.",
                    )
                )
                continue
            members = [
                Member(
                    member_id=m.member_id,
                    rack_id=m.rack_id,
                    member_epoch=m.member_epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=list(m.subscribed_topic_names),
                    assignment=DescribedAssignment(
                        topic_partitions=[
                            DescribedTopicPartitions(
                                topic_id=topics[t].topic_id, topic_name=t, partitions=list(ps)
                            )
                            for t, ps in sorted(m.assigned.items())
                            if t in topics
                        ]
                    ),
                )
                for m in group.members.values()
            ]
            out.append(
                DescribedGroup(
                    group_id=group_id,
                    group_state=group.state.value,
                    group_epoch=group.group_epoch,
                    assignment_epoch=group.assignment_epoch,
                    assignor_name="simple",
                    members=members,
                    authorized_operations=-(2**31) if not body.include_authorized_operations else 0,
                )
            )
        return ShareGroupDescribeResponse(groups=out)
