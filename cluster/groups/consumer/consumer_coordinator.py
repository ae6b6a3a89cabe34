"""ConsumerGroupHeartbeat and ConsumerGroupDescribe: KIP-848 consumer groups, served beside
the classic ones by the same `GroupCoordinator` (Kafka's GroupMetadataManager, its
consumerGroupHeartbeat path).

One heartbeat: validate the member and its epoch; apply its subscription; a new member, a
leaver, a changed subscription or a changed partition count bumps the group epoch, and
the target assignment is recomputed for it by the group's server-side assignor; then the
member reconciles (`reconciliation.reconcile`) and the answer carries its epoch and, when
it changed, its assignment. Sessions and revocations run on the coordinator's timers.

The committed offsets of a consumer group live in the classic coordinator's
`GroupMetadata` of the same id (`GroupMetadata.consumer` points here), so OffsetCommit,
OffsetFetch, OffsetDelete, expiry and the offset records are shared by both protocols.

Not yet persisted: membership, epochs and assignments are in memory only (Kafka writes
the ConsumerGroup* records); after a restart the members rejoin with epoch 0 and get an
assignment again, and committed offsets (which are records) are kept.
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import TYPE_CHECKING, Any

from trio_broker.cluster.groups.consumer.assignors import ASSIGNORS
from trio_broker.cluster.groups.consumer.consumer_group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    TopicPartitions,
)
from trio_broker.cluster.groups.consumer.consumer_records import group_records, load_group
from trio_broker.cluster.groups.consumer.reconciliation import reconcile
from trio_broker.cluster.groups.group_config import (
    HEARTBEAT_INTERVAL,
    SESSION_TIMEOUT,
    group_config_values,
)
from trio_broker.cluster.groups.group_metadata import GroupMetadata, GroupState
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.consumer_group_describe_response import (
    Assignment as DescribedAssignment,
)
from trio_broker.protocol._generated.consumer_group_describe_response import (
    ConsumerGroupDescribeResponse,
    DescribedGroup,
    Member,
)
from trio_broker.protocol._generated.consumer_group_describe_response import (
    TopicPartitions as DescribedTopicPartitions,
)
from trio_broker.protocol._generated.consumer_group_heartbeat_response import (
    Assignment,
    ConsumerGroupHeartbeatResponse,
)
from trio_broker.protocol._generated.consumer_group_heartbeat_response import (
    TopicPartitions as HeartbeatTopicPartitions,
)

if TYPE_CHECKING:
    from trio_broker.cluster.groups.group_coordinator import GroupCoordinator

logger = logging.getLogger(__name__)

__all__ = ["ConsumerGroupCoordinator", "assignor_name"]


def assignor_name(configured: str) -> str:
    """`uniform` for Kafka's class name `...assignor.UniformAssignor` or for `uniform`."""
    short = configured.rsplit(".", 1)[-1]
    return short[: -len("Assignor")].lower() if short.endswith("Assignor") else short.lower()


class _Answer(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        self.code, self.message = code, message


class ConsumerGroupCoordinator:
    def __init__(self, coordinator: GroupCoordinator) -> None:
        from trio_broker.cluster.groups.consumer.classic_members import ClassicMembers

        self.coordinator = coordinator
        self.config = coordinator.config
        self.classic = ClassicMembers(self)

    # -- helpers ---------------------------------------------------------------------------

    def _assignors(self) -> list[str]:
        names = [assignor_name(a) for a in self.config.value("group.consumer.assignors")]
        return [n for n in names if n in ASSIGNORS] or ["uniform"]

    def _timeouts(self, group_id: str) -> tuple[int, int]:
        overrides = self.coordinator.broker.metadata.group_configs.get(group_id, {})
        values = group_config_values(overrides, self.config)
        return values[SESSION_TIMEOUT], values[HEARTBEAT_INTERVAL]

    def group(self, group_id: str) -> ConsumerGroup | None:
        shell = self.coordinator.groups.get(group_id)
        return shell.consumer if shell is not None else None

    def _topic_names(self) -> dict[str, Any]:
        return {
            name: topic
            for name, topic in self.coordinator.broker.metadata.topics.items()
            if not topic.internal
        }

    def _subscriptions(self, group: ConsumerGroup) -> dict[str, set[str]]:
        topics = self._topic_names()
        out = {}
        for m in group.members.values():
            subs = {t for t in m.subscribed_topic_names if t in topics}
            if m.subscribed_topic_regex:
                pattern = _compile(m.subscribed_topic_regex)
                if pattern is not None:
                    subs |= {t for t in topics if pattern.fullmatch(t)}
            out[m.member_id] = subs
        return out

    def _partition_counts(self, subscriptions: dict[str, set[str]]) -> dict[str, int]:
        topics = self._topic_names()
        wanted = set().union(*subscriptions.values()) if subscriptions else set()
        return {t: len(topics[t].partitions) for t in sorted(wanted) if t in topics}

    def _bump(self, group: ConsumerGroup, reason: str) -> None:
        """Note why the group epoch must move; `_update_target` moves it once for all."""
        group.epoch_reasons.append(reason)

    def _update_target(self, group: ConsumerGroup) -> None:
        subscriptions = self._subscriptions(group)
        counts = self._partition_counts(subscriptions)
        if counts != group.topic_partitions:
            group.topic_partitions = counts
            if group.members:
                group.epoch_reasons.append("the subscribed topics' partitions changed")
        if group.epoch_reasons:
            group.group_epoch += 1
            logger.info(
                "consumer group %s: epoch %d (%s)",
                group.group_id,
                group.group_epoch,
                "; ".join(group.epoch_reasons),
            )
            group.epoch_reasons.clear()
        if group.assignment_epoch == group.group_epoch:
            return
        chosen = [m.server_assignor for m in group.members.values() if m.server_assignor]
        group.assignor = max(set(chosen), key=chosen.count) if chosen else self._assignors()[0]
        assign = ASSIGNORS[group.assignor]
        group.target = assign(subscriptions, counts, group.target)
        group.assignment_epoch = group.group_epoch

    def _ids(self, partitions: TopicPartitions) -> list[HeartbeatTopicPartitions]:
        topics = self.coordinator.broker.metadata.topics
        return [
            HeartbeatTopicPartitions(topic_id=topics[t].topic_id, partitions=sorted(ps))
            for t, ps in sorted(partitions.items())
            if t in topics
        ]

    def _names(self, owned: list[Any] | None) -> TopicPartitions | None:
        if owned is None:
            return None
        meta = self.coordinator.broker.metadata
        out: TopicPartitions = {}
        for tp in owned:
            topic = meta.topic_by_id(tp.topic_id)
            if topic is not None and tp.partitions:
                out.setdefault(topic.name, set()).update(tp.partitions)
        return out

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------

    def heartbeat(self, body: Any, *, client_id: str, client_host: str) -> Any:
        try:
            return self._heartbeat(body, client_id=client_id, client_host=client_host)
        except _Answer as answer:
            return ConsumerGroupHeartbeatResponse(
                error_code=answer.code,
                error_message=answer.message,
                member_id=body.member_id or None,
                member_epoch=body.member_epoch,
            )

    def _validate(self, body: Any) -> None:
        if not body.group_id:
            raise _Answer(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if body.instance_id == "":
            raise _Answer(ErrorCode.INVALID_REQUEST, "InstanceId can't be empty.")
        regex = body.subscribed_topic_regex
        if body.member_epoch == 0:
            if body.rebalance_timeout_ms == -1:
                raise _Answer(ErrorCode.INVALID_REQUEST, "RebalanceTimeoutMs must be provided.")
            if body.subscribed_topic_names is None and regex is None:
                raise _Answer(
                    ErrorCode.INVALID_REQUEST,
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                )
            if body.topic_partitions:
                raise _Answer(ErrorCode.INVALID_REQUEST, "TopicPartitions must be empty.")
        elif not body.member_id:
            raise _Answer(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        elif body.member_epoch < STATIC_LEAVE_EPOCH:
            raise _Answer(ErrorCode.INVALID_REQUEST, f"MemberEpoch {body.member_epoch} is invalid.")
        if regex is not None and _compile(regex) is None:
            raise _Answer(ErrorCode.INVALID_REQUEST, f"Invalid regex {regex}.")
        if body.server_assignor is not None and body.server_assignor not in self._assignors():
            raise _Answer(
                ErrorCode.UNSUPPORTED_ASSIGNOR, f"Assignor {body.server_assignor} is not supported."
            )

    def _group_for(self, group_id: str, *, create: bool) -> ConsumerGroup:
        coordinator = self.coordinator
        shell = coordinator.groups.get(group_id)
        if shell is not None and shell.consumer is None:
            if shell.members and create and shell.share is None and self.classic.can_upgrade(shell):
                # Online upgrade: the classic group becomes a consumer group with its
                # members inside as classic members.
                return self.classic.upgrade(shell)
            if (
                shell.members
                or shell.state not in (GroupState.EMPTY,)
                or shell.has_consumer_members()
            ):
                raise _Answer(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."
                )
        if shell is None or shell.consumer is None:
            if not create:
                raise _Answer(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {group_id} not found.")
            if shell is None:
                shell = coordinator.groups[group_id] = GroupMetadata(
                    group_id=group_id, state_timestamp_ms=coordinator.now_ms()
                )
            # An empty classic group (its offsets alone) becomes a consumer group.
            shell.protocol_type = "consumer"
            shell.share = None  # an empty share group becomes a consumer group
            shell.consumer = ConsumerGroup(group_id=group_id)
        return shell.consumer

    def _heartbeat(self, body: Any, *, client_id: str, client_host: str) -> Any:
        self._validate(body)
        error = self.coordinator.check_group(body.group_id)
        if error:
            raise _Answer(error)
        epoch = body.member_epoch
        group = self._group_for(body.group_id, create=epoch == 0)
        session_ms, interval_ms = self._timeouts(group.group_id)
        if epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            response = self._leave(group, body)
            self._persist(group)
            return response
        before = (group.group_epoch, len(group.members))
        member = self._member_for(group, body, client_id=client_id, client_host=client_host)
        member_before = (member.member_epoch, member.state)
        changed = self._apply_subscription(group, member, body)
        if changed:
            self._bump(group, f"member {member.member_id} subscription changed")
        self._update_target(group)
        owned = self._names(body.topic_partitions)
        assignment_changed = reconcile(group, member, owned)
        self._arm_timers(group, member, session_ms)
        if (
            changed
            or assignment_changed
            or epoch == 0
            or before != (group.group_epoch, len(group.members))
            or member_before != (member.member_epoch, member.state)
        ):
            self._persist(group)
        send = epoch == 0 or assignment_changed or (owned is not None and owned != member.assigned)
        return ConsumerGroupHeartbeatResponse(
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=interval_ms,
            assignment=Assignment(topic_partitions=self._ids(member.assigned)) if send else None,
        )

    def _member_for(
        self, group: ConsumerGroup, body: Any, *, client_id: str, client_host: str
    ) -> ConsumerGroupMember:
        epoch = body.member_epoch
        if epoch != 0:
            member = group.members.get(body.member_id)
            if member is None:
                raise _Answer(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"Member {body.member_id} is not in the group."
                )
            if epoch > member.member_epoch:
                raise _Answer(ErrorCode.FENCED_MEMBER_EPOCH, "The member epoch is fenced.")
            if epoch < member.member_epoch:
                # The member missed the answer that moved its epoch: allowed only from the
                # previous epoch, owning nothing beyond its current assignment.
                owned = self._names(body.topic_partitions)
                if (
                    epoch != member.previous_member_epoch
                    or owned is None
                    or any(ps - member.assigned.get(t, set()) for t, ps in owned.items())
                ):
                    raise _Answer(ErrorCode.FENCED_MEMBER_EPOCH, "The member epoch is fenced.")
            return member
        member_id = body.member_id or str(uuid.uuid4())
        existing = group.members.get(member_id)
        if existing is not None and body.instance_id is None:
            # A member rejoining with its id (after FENCED_MEMBER_EPOCH, say): starts over.
            group.remove(existing)
            self._stop_timers(existing)
            self._bump(group, f"member {member_id} rejoined")
            existing = None
        instance = body.instance_id
        if instance is not None and instance in group.static_members:
            old = group.members[group.static_members[instance]]
            if old.member_epoch != STATIC_LEAVE_EPOCH and old.member_id != member_id:
                raise _Answer(
                    ErrorCode.UNRELEASED_INSTANCE_ID,
                    f"Static member {instance} has not released its id.",
                )
            # KIP-848: the static member back takes its predecessor's place: assignment,
            # target and epoch move to the new member id; the group epoch stays.
            old_id = old.member_id
            self._stop_timers(old)
            del group.members[old_id]
            old.member_id = member_id
            group.members[member_id] = old
            group.static_members[instance] = member_id
            if old_id in group.target:
                group.target[member_id] = group.target.pop(old_id)
            for tp, owner in list(group.owners.items()):
                if owner == old_id:
                    group.owners[tp] = member_id
            if old.member_epoch == STATIC_LEAVE_EPOCH:
                old.member_epoch = old.previous_member_epoch
            old.client_id, old.client_host = client_id, client_host
            logger.info(
                "static member %s of consumer group %s is back as %s",
                instance,
                group.group_id,
                member_id,
            )
            return old
        if len(group.members) >= self.config.value("group.consumer.max.size"):
            raise _Answer(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of "
                f"{self.config.value('group.consumer.max.size')} members.",
            )
        member = ConsumerGroupMember(
            member_id=member_id,
            instance_id=instance,
            client_id=client_id,
            client_host=client_host,
        )
        group.members[member_id] = member
        if instance is not None:
            group.static_members[instance] = member_id
        self._bump(group, f"member {member_id} joined")
        return member

    def _apply_subscription(
        self, group: ConsumerGroup, member: ConsumerGroupMember, body: Any
    ) -> bool:
        changed = False
        if body.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = body.rebalance_timeout_ms
        if body.rack_id is not None:
            member.rack_id = body.rack_id
        names = body.subscribed_topic_names
        if names is not None and sorted(names) != sorted(member.subscribed_topic_names):
            member.subscribed_topic_names = sorted(names)
            changed = True
        regex = body.subscribed_topic_regex
        if regex is not None:
            regex = regex or None  # "" clears it
            if regex != member.subscribed_topic_regex:
                member.subscribed_topic_regex = regex
                changed = True
        if body.server_assignor is not None and body.server_assignor != member.server_assignor:
            member.server_assignor = body.server_assignor
            changed = True
        return changed

    def _leave(self, group: ConsumerGroup, body: Any) -> Any:
        member = group.members.get(body.member_id)
        if member is None and body.instance_id is not None:
            known = group.static_members.get(body.instance_id)
            if known is not None and known != body.member_id:
                raise _Answer(ErrorCode.FENCED_INSTANCE_ID, "Static member was replaced.")
        if member is None:
            raise _Answer(
                ErrorCode.UNKNOWN_MEMBER_ID, f"Member {body.member_id} is not in the group."
            )
        if body.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            # Temporarily away: keeps its assignment until its session ends or it rejoins.
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = STATIC_LEAVE_EPOCH
            logger.info(
                "static member %s of consumer group %s is leaving temporarily",
                member.instance_id,
                group.group_id,
            )
        else:
            self._fence(group, member, "left the group")
        return ConsumerGroupHeartbeatResponse(
            member_id=body.member_id, member_epoch=body.member_epoch
        )

    # -- timers ----------------------------------------------------------------------------

    def _arm_timers(
        self, group: ConsumerGroup, member: ConsumerGroupMember, session_ms: int
    ) -> None:
        if member.session_timer is None:
            member.session_timer = self.coordinator.timer(
                session_ms, lambda: self._on_session_expired(group, member)
            )
        else:
            member.session_timer.reset(session_ms)
        if member.state is MemberState.UNREVOKED_PARTITIONS and member.rebalance_timer is None:
            member.rebalance_timer = self.coordinator.timer(
                member.rebalance_timeout_ms, lambda: self._on_revocation_expired(group, member)
            )

    def _stop_timers(self, member: ConsumerGroupMember) -> None:
        for timer in (member.session_timer, member.rebalance_timer):
            if timer is not None:
                timer.cancel()
        member.session_timer = member.rebalance_timer = None

    def _on_session_expired(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        member.session_timer = None
        if group.members.get(member.member_id) is member:
            self._fence(group, member, "session timed out")
            self._persist(group)

    def _on_revocation_expired(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        member.rebalance_timer = None
        if (
            group.members.get(member.member_id) is member
            and member.state is MemberState.UNREVOKED_PARTITIONS
        ):
            self._fence(group, member, "did not revoke its partitions within its rebalance timeout")
            self._persist(group)

    def _fence(self, group: ConsumerGroup, member: ConsumerGroupMember, reason: str) -> None:
        logger.info("consumer group %s: member %s %s", group.group_id, member.member_id, reason)
        self._stop_timers(member)
        group.remove(member)
        if member.classic is None and self.classic.maybe_downgrade(group):
            return  # only classic members were left: a classic group again
        self._bump(group, f"member {member.member_id} removed")
        self._update_target(group)
        shell = self.coordinator.groups.get(group.group_id)
        if shell is not None and not group.members:
            shell.state_timestamp_ms = self.coordinator.now_ms()  # empty since now

    # -- records -----------------------------------------------------------------------------

    def _persist(self, group: ConsumerGroup) -> None:
        """Append what changed in the group since its last records (Kafka writes these
        records first and applies them when written; on a lone broker the append is
        committed when it returns, so the order does not show)."""
        shell = self.coordinator.groups.get(group.group_id)
        if shell is None or shell.consumer is not group:
            return  # downgraded to a classic group (or gone): its records were written
        topics = self.coordinator.broker.metadata.topics

        def topic_id(name: str) -> Any:
            topic = topics.get(name)
            return topic.topic_id if topic is not None else None

        wanted = group_records(group, topic_id) if group.group_epoch > 0 else {}
        group.persisted = self.coordinator.store.write_difference(
            group.group_id, group.persisted, wanted, f"consumer group {group.group_id}"
        )

    def load(self, group_id: str, records: dict[bytes, bytes]) -> ConsumerGroup | None:
        """A group rebuilt from a replayed partition; its members' sessions start now, so
        those that do not come back are removed (Kafka's onLoaded)."""
        meta = self.coordinator.broker.metadata

        def topic_name(topic_id: Any) -> str | None:
            topic = meta.topic_by_id(topic_id)
            return topic.name if topic is not None else None

        group = load_group(group_id, records, topic_name)
        if group is None:
            return None
        assignors = [m.server_assignor for m in group.members.values() if m.server_assignor]
        group.assignor = (
            max(set(assignors), key=assignors.count) if assignors else self._assignors()[0]
        )
        session_ms, _ = self._timeouts(group_id)
        for member in group.members.values():
            self._arm_timers(group, member, session_ms)
        logger.info(
            "consumer group %s loaded: epoch %d, %d member(s)",
            group_id,
            group.group_epoch,
            len(group.members),
        )
        return group

    def unload(self, group: ConsumerGroup) -> None:
        for member in group.members.values():
            self._stop_timers(member)

    # -- ConsumerGroupDescribe -------------------------------------------------------------

    def describe(self, body: Any) -> ConsumerGroupDescribeResponse:
        described = []
        for group_id in body.group_ids:
            error = self.coordinator.check_group(group_id)
            if error:
                described.append(DescribedGroup(error_code=error, group_id=group_id))
                continue
            group = self.group(group_id)
            if group is None:
                shell = self.coordinator.groups.get(group_id)
                message = (
                    f"Group {group_id} is not a consumer group."
                    if shell is not None
                    else f"Group {group_id} not found."
                )
                described.append(
                    DescribedGroup(
                        error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                        error_message=message,
                        group_id=group_id,
                    )
                )
                continue
            described.append(
                DescribedGroup(
                    group_id=group_id,
                    group_state=group.state.value,
                    group_epoch=group.group_epoch,
                    assignment_epoch=group.assignment_epoch,
                    assignor_name=group.assignor,
                    members=[
                        Member(
                            member_id=m.member_id,
                            instance_id=m.instance_id,
                            rack_id=m.rack_id,
                            member_epoch=m.member_epoch,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            subscribed_topic_names=list(m.subscribed_topic_names),
                            subscribed_topic_regex=m.subscribed_topic_regex,
                            assignment=self._described(m.assigned),
                            target_assignment=self._described(group.target.get(m.member_id, {})),
                        )
                        for m in group.members.values()
                    ],
                )
            )
        return ConsumerGroupDescribeResponse(groups=described)

    def _described(self, partitions: TopicPartitions) -> DescribedAssignment:
        topics = self.coordinator.broker.metadata.topics
        return DescribedAssignment(
            topic_partitions=[
                DescribedTopicPartitions(
                    topic_id=topics[t].topic_id, topic_name=t, partitions=sorted(ps)
                )
                for t, ps in sorted(partitions.items())
                if t in topics
            ]
        )

    # -- offsets ---------------------------------------------------------------------------

    def commit_error(self, group: ConsumerGroup, member_id: str, epoch: int) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetCommit."""
        if epoch < 0 and not group.members:
            return ErrorCode.NONE  # an admin client's commit to an empty group
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if epoch != member.member_epoch:
            # A classic member's generation is its member epoch.
            if member.classic is not None:
                return ErrorCode.ILLEGAL_GENERATION
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def fetch_error(self, group: ConsumerGroup, member_id: str | None, epoch: int) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetFetch: only when the member names itself."""
        if epoch < 0 and not member_id:
            return ErrorCode.NONE
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE


def _compile(regex: str) -> re.Pattern[str] | None:
    # Kafka compiles RE2/J; Python's `re` agrees on the common subset (no backreferences
    # or lookaround are used by real subscriptions).
    try:
        return re.compile(regex)
    except re.error:
        return None
