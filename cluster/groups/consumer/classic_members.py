"""Classic members inside a consumer group, and moving a group between the two protocols
(Kafka 3.8+'s online migration, `group.consumer.migration.policy`; Kafka's
GroupMetadataManager `classicGroup*ToConsumerGroup`, `convertToConsumerGroup` and
`convertToClassicGroup`).

Upgrade: a classic group whose members speak the consumer embedded protocol receives a
ConsumerGroupHeartbeat from a member of the new protocol. It becomes a consumer group at
once: its generation is the group epoch and the target assignment epoch, each classic
member keeps its assignment as its current and target assignment at that epoch, and
stays a classic member (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) inside the consumer
group, which the coordinator assigns for:

- JoinGroup answers at once, with the member's epoch as the generation and no leader:
  the coordinator has assigned already. The partitions the member reports owning in its
  subscription (cooperative; an eager member reports none, having revoked them all)
  reconcile it as a heartbeat's owned partitions do.
- SyncGroup answers with the member's current assignment, which never holds a partition
  another member still owns.
- Heartbeat answers REBALANCE_IN_PROGRESS when the member has something to do: the group
  epoch moved past its epoch, it must revoke, or partitions it waits for were released.
- OffsetCommit checks its generation against the member epoch (ILLEGAL_GENERATION).

Downgrade: when the last member of the new protocol leaves (or is fenced) and classic
members remain, the group becomes a classic group again: the members keep their
assignments at the group epoch's generation and the group rebalances.

The consumer group's records carry each classic member's session timeout and protocols
(ConsumerGroupMemberMetadataValue's ClassicMemberMetadata), so both survive a restart.
"""

from __future__ import annotations

import logging
import struct
import uuid
from typing import TYPE_CHECKING, Any

import attrs

from trio_broker.cluster.groups.consumer.consumer_group import (
    ClassicMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    TopicPartitions,
)
from trio_broker.cluster.groups.consumer.reconciliation import reconcile
from trio_broker.cluster.groups.group_metadata import GroupMember, GroupMetadata, GroupState
from trio_broker.cluster.groups.records import group_metadata_key
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.consumer_protocol_assignment import (
    ConsumerProtocolAssignment,
)
from trio_broker.protocol._generated.consumer_protocol_assignment import (
    TopicPartition as AssignedTopic,
)
from trio_broker.protocol._generated.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
)
from trio_broker.protocol._generated.heartbeat_response import HeartbeatResponse
from trio_broker.protocol._generated.join_group_response import JoinGroupResponse
from trio_broker.protocol._generated.leave_group_response import (
    LeaveGroupResponse,
    MemberResponse,
)
from trio_broker.protocol._generated.sync_group_response import SyncGroupResponse

if TYPE_CHECKING:
    from trio_broker.cluster.groups.consumer.consumer_coordinator import (
        ConsumerGroupCoordinator,
    )

__all__ = ["ClassicMembers", "ClassicMetadata"]

logger = logging.getLogger(__name__)

PROTOCOL_TYPE = "consumer"
_INT16 = struct.Struct(">h")


@attrs.frozen(kw_only=True)
class _Subscription:
    version: int
    topics: list[str]
    owned: TopicPartitions


def decode_subscription(metadata: bytes) -> _Subscription | None:
    """A consumer embedded protocol subscription; None when the bytes do not decode."""
    if len(metadata) < 2:
        return None
    (version,) = _INT16.unpack_from(metadata)
    try:
        sub, _ = ConsumerProtocolSubscription.decode(
            metadata, min(max(version, 0), ConsumerProtocolSubscription.MAX_VERSION), 2
        )
    except Exception:
        return None
    owned: TopicPartitions = {}
    for t in sub.owned_partitions or ():
        if t.partitions:
            owned.setdefault(t.topic, set()).update(t.partitions)
    return _Subscription(version=version, topics=sorted(set(sub.topics)), owned=owned)


def decode_assignment(data: bytes) -> TopicPartitions | None:
    if not data:
        return {}
    if len(data) < 2:
        return None
    (version,) = _INT16.unpack_from(data)
    try:
        message, _ = ConsumerProtocolAssignment.decode(
            data, min(max(version, 0), ConsumerProtocolAssignment.MAX_VERSION), 2
        )
    except Exception:
        return None
    out: TopicPartitions = {}
    for t in message.assigned_partitions:
        if t.partitions:
            out.setdefault(t.topic, set()).update(t.partitions)
    return out


def encode_assignment(partitions: TopicPartitions, version: int) -> bytes:
    version = min(max(version, 0), ConsumerProtocolAssignment.MAX_VERSION)
    message = ConsumerProtocolAssignment(
        assigned_partitions=[
            AssignedTopic(topic=t, partitions=sorted(ps))
            for t, ps in sorted(partitions.items())
            if ps
        ],
        user_data=None,
    )
    return bytes(message.encode(version, bytearray(_INT16.pack(version))))


def _first_subscription(protocols: list[tuple[str, bytes]]) -> _Subscription | None:
    for _, metadata in protocols:
        found = decode_subscription(metadata)
        if found is not None:
            return found
    return None


class ClassicMembers:
    """The classic protocol's requests to consumer groups, and the conversions."""

    def __init__(self, consumer: ConsumerGroupCoordinator) -> None:
        self.consumer = consumer
        self.coordinator = consumer.coordinator
        self.config = consumer.config

    def _policy(self) -> str:
        return str(self.config.value("group.consumer.migration.policy")).lower()

    def accepts_classic_members(self) -> bool:
        """Whether classic members may join a consumer group with members: a group
        upgraded or on its way back (Kafka lets them in whatever the policy; we follow,
        except with the migration disabled, where they are refused as before)."""
        return self._policy() != "disabled"

    # -- upgrade -------------------------------------------------------------------------

    def can_upgrade(self, shell: GroupMetadata) -> bool:
        group_id = shell.group_id
        if self._policy() not in ("bidirectional", "upgrade"):
            logger.info("classic group %s not upgraded: the migration policy is %s",
                        group_id, self._policy())  # fmt: skip
            return False
        if shell.protocol_type != PROTOCOL_TYPE:
            logger.info("classic group %s not upgraded: its protocol type is %r",
                        group_id, shell.protocol_type)  # fmt: skip
            return False
        if len(shell.members) > self.config.value("group.consumer.max.size"):
            logger.info("classic group %s not upgraded: more members than "
                        "group.consumer.max.size", group_id)  # fmt: skip
            return False
        for m in shell.members.values():
            if _first_subscription(m.protocols) is None:
                logger.info("classic group %s not upgraded: member %s's subscription does "
                            "not decode", group_id, m.member_id)  # fmt: skip
                return False
        return True

    def upgrade(self, shell: GroupMetadata) -> ConsumerGroup:
        """The classic group `shell` becomes a consumer group (Kafka's
        convertToConsumerGroup); its parked joins and syncs are told to rejoin."""
        coordinator = self.coordinator
        group = ConsumerGroup(
            group_id=shell.group_id,
            group_epoch=shell.generation_id,
            assignment_epoch=shell.generation_id,
        )
        for m in shell.members.values():
            if m.awaiting_join is not None:
                m.awaiting_join(
                    JoinGroupResponse(
                        error_code=ErrorCode.REBALANCE_IN_PROGRESS, member_id=m.member_id
                    )
                )
                m.awaiting_join = None
            if m.awaiting_sync is not None:
                m.awaiting_sync(SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS))
                m.awaiting_sync = None
            if m.session_timer is not None:
                m.session_timer.cancel()
                m.session_timer = None
            sub = _first_subscription(m.protocols)
            assert sub is not None  # can_upgrade checked
            assigned = self._existing(decode_assignment(m.assignment) or {})
            member = ConsumerGroupMember(
                member_id=m.member_id,
                instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                subscribed_topic_names=sub.topics,
                member_epoch=shell.generation_id,
                previous_member_epoch=shell.generation_id,
                assigned=assigned,
            )
            member.classic = ClassicMetadata(
                session_timeout_ms=m.session_timeout_ms, protocols=list(m.protocols)
            )
            group.members[member.member_id] = member
            if member.instance_id is not None:
                group.static_members[member.instance_id] = member.member_id
            group.target[member.member_id] = {t: set(ps) for t, ps in assigned.items()}
            group.claim(member, assigned)
        if shell.rebalance_timer is not None:
            shell.rebalance_timer.cancel()
            shell.rebalance_timer = None
        group.topic_partitions = self.consumer._partition_counts(
            self.consumer._subscriptions(group)
        )
        shell.members.clear()
        shell.static_members.clear()
        shell.pending_members.clear()
        shell.leader_id = None
        shell.protocol_name = None
        shell.in_initial_delay = False
        shell.state = GroupState.EMPTY  # the shell of a consumer group keeps its offsets only
        shell.state_timestamp_ms = coordinator.now_ms()
        shell.consumer = group
        try:
            coordinator.store.append(shell.group_id, [(group_metadata_key(shell.group_id), None)])
        except KafkaError as exc:
            logger.warning("group %s: cannot tombstone its classic record: %s",
                           shell.group_id, exc)  # fmt: skip
        session_ms, _ = self.consumer._timeouts(group.group_id)
        for member in group.members.values():
            self.consumer._arm_timers(group, member, self._session_ms(member, session_ms))
        logger.info(
            "classic group %s upgraded to a consumer group at epoch %d with %d classic member(s)",
            group.group_id,
            group.group_epoch,
            len(group.members),
        )
        return group

    def _existing(self, partitions: TopicPartitions) -> TopicPartitions:
        topics = self.coordinator.broker.metadata.topics
        out: TopicPartitions = {}
        for t, ps in partitions.items():
            topic = topics.get(t)
            if topic is not None:
                valid = {p for p in ps if 0 <= p < len(topic.partitions)}
                if valid:
                    out[t] = valid
        return out

    @staticmethod
    def _session_ms(member: ConsumerGroupMember, default_ms: int) -> int:
        classic = member.classic
        return classic.session_timeout_ms if classic is not None else default_ms

    # -- the classic requests ---------------------------------------------------------------

    def _validate(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> ConsumerGroupMember | ErrorCode:
        """Kafka's validateConsumerGroupMember, and the member must be a classic one."""
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return member

    def join(
        self,
        shell: GroupMetadata,
        body: Any,
        *,
        api_version: int,
        client_id: str,
        client_host: str,
        reply: Any,
    ) -> None:
        group: ConsumerGroup = shell.consumer
        consumer = self.consumer

        def fail(code: ErrorCode, member_id: str = body.member_id) -> None:
            reply(JoinGroupResponse(error_code=code, member_id=member_id))

        protocols = [(p.name, bytes(p.metadata)) for p in body.protocols]
        if body.protocol_type != PROTOCOL_TYPE or not protocols:
            return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        sub = _first_subscription(protocols)
        if sub is None:
            return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        instance_id = body.group_instance_id
        member_id = body.member_id
        unknown = member_id == ""
        if unknown:
            member_id = f"{client_id}-{uuid.uuid4()}"
            if instance_id is None and api_version >= 4:
                # KIP-394, as for a classic group: come back with this id.
                return fail(ErrorCode.MEMBER_ID_REQUIRED, member_id)
        member: ConsumerGroupMember | None
        if instance_id is not None and instance_id in group.static_members:
            old_id = group.static_members[instance_id]
            if not unknown and old_id != member_id:
                return fail(ErrorCode.FENCED_INSTANCE_ID)
            member = group.members[old_id]
            if member.classic is None and old_id != member_id:
                return fail(ErrorCode.UNRELEASED_INSTANCE_ID)
            if old_id != member_id:
                self._replace_static(group, member, member_id)
        else:
            member = group.members.get(member_id)
            if member is not None and member.classic is None:
                return fail(ErrorCode.UNKNOWN_MEMBER_ID)
        if member is None:
            if len(group.members) >= self.config.value("group.consumer.max.size"):
                return fail(ErrorCode.GROUP_MAX_SIZE_REACHED)
            member = ConsumerGroupMember(member_id=member_id, instance_id=instance_id)
            group.members[member_id] = member
            if instance_id is not None:
                group.static_members[instance_id] = member_id
            consumer._bump(group, f"classic member {member_id} joined")
        rebalance_timeout = body.rebalance_timeout_ms
        if api_version == 0 or rebalance_timeout < 0:
            rebalance_timeout = body.session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout
        member.client_id, member.client_host = client_id, client_host
        member.server_assignor = None
        member.classic = ClassicMetadata(
            session_timeout_ms=body.session_timeout_ms, protocols=protocols
        )
        if sub.topics != sorted(member.subscribed_topic_names):
            member.subscribed_topic_names = sub.topics
            consumer._bump(group, f"classic member {member_id} subscription changed")
        consumer._update_target(group)
        reconcile(group, member, sub.owned)
        consumer._arm_timers(group, member, body.session_timeout_ms)
        consumer._persist(group)
        logger.debug("consumer group %s: classic member %s joined at epoch %d, assigned %s, owned %s, state %s",
                     group.group_id, member.member_id, member.member_epoch,
                     member.assigned, sub.owned, member.state)  # fmt: skip
        reply(
            JoinGroupResponse(
                error_code=ErrorCode.NONE,
                generation_id=member.member_epoch,
                protocol_type=PROTOCOL_TYPE,
                protocol_name=protocols[0][0],
                leader="",
                member_id=member.member_id,
                members=[],
            )
        )

    def _replace_static(
        self, group: ConsumerGroup, member: ConsumerGroupMember, new_id: str
    ) -> None:
        old_id = member.member_id
        self.consumer._stop_timers(member)
        del group.members[old_id]
        member.member_id = new_id
        group.members[new_id] = member
        assert member.instance_id is not None
        group.static_members[member.instance_id] = new_id
        if old_id in group.target:
            group.target[new_id] = group.target.pop(old_id)
        for tp, owner in list(group.owners.items()):
            if owner == old_id:
                group.owners[tp] = new_id

    def sync(self, shell: GroupMetadata, body: Any, *, reply: Any) -> None:
        group: ConsumerGroup = shell.consumer
        found = self._validate(group, body.member_id, body.group_instance_id)
        if isinstance(found, ErrorCode):
            return reply(SyncGroupResponse(error_code=found))
        member = found
        assert member.classic is not None
        if body.generation_id != member.member_epoch:
            return reply(SyncGroupResponse(error_code=ErrorCode.ILLEGAL_GENERATION))
        names = [n for n, _ in member.classic.protocols]
        if (body.protocol_type is not None and body.protocol_type != PROTOCOL_TYPE) or (
            body.protocol_name is not None and body.protocol_name not in names
        ):
            return reply(SyncGroupResponse(error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        if (
            member.member_epoch < group.group_epoch
            and member.state is not MemberState.UNREVOKED_PARTITIONS
        ):
            # A newer epoch to catch up with; a member revoking finishes that first (its
            # next JoinGroup, showing the revocation done, catches up).
            return reply(SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS))
        session_ms, _ = self.consumer._timeouts(group.group_id)
        self.consumer._arm_timers(group, member, self._session_ms(member, session_ms))
        sub = _first_subscription(member.classic.protocols)
        version = sub.version if sub is not None else 0
        reply(
            SyncGroupResponse(
                error_code=ErrorCode.NONE,
                protocol_type=PROTOCOL_TYPE,
                protocol_name=body.protocol_name or names[0],
                assignment=encode_assignment(member.assigned, version),
            )
        )

    def heartbeat(self, shell: GroupMetadata, body: Any) -> HeartbeatResponse:
        group: ConsumerGroup = shell.consumer
        found = self._validate(group, body.member_id, body.group_instance_id)
        if isinstance(found, ErrorCode):
            logger.debug("consumer group %s: classic heartbeat of %s: %s",
                         group.group_id, body.member_id, found.name)  # fmt: skip
            return HeartbeatResponse(error_code=found)
        member = found
        if body.generation_id != member.member_epoch:
            return HeartbeatResponse(error_code=ErrorCode.ILLEGAL_GENERATION)
        session_ms, _ = self.consumer._timeouts(group.group_id)
        self.consumer._arm_timers(group, member, self._session_ms(member, session_ms))
        if (
            member.member_epoch < group.group_epoch
            or member.state is MemberState.UNREVOKED_PARTITIONS
            or (
                member.state is MemberState.UNRELEASED_PARTITIONS
                and self._released_for(group, member)
            )
        ):
            return HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
        return HeartbeatResponse(error_code=ErrorCode.NONE)

    @staticmethod
    def _released_for(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        """Whether a partition the member waits for has been released meanwhile."""
        target = group.target.get(member.member_id, {})
        for topic, ps in target.items():
            for p in ps - member.assigned.get(topic, set()):
                if group.owners.get((topic, p)) in (None, member.member_id):
                    return True
        return False

    def leave(self, shell: GroupMetadata, body: Any, *, api_version: int) -> LeaveGroupResponse:
        group: ConsumerGroup = shell.consumer
        if api_version < 3:
            identities = [(body.member_id, None)]
        else:
            identities = [(m.member_id, m.group_instance_id) for m in body.members]
        results = []
        left = False
        for member_id, instance_id in identities:
            code = ErrorCode.NONE
            member = None
            if instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None:
                    code = ErrorCode.UNKNOWN_MEMBER_ID
                elif member_id and known != member_id:
                    code = ErrorCode.FENCED_INSTANCE_ID
                else:
                    member_id = known
                    member = group.members[known]
            else:
                member = group.members.get(member_id)
                if member is None:
                    code = ErrorCode.UNKNOWN_MEMBER_ID
            if member is not None and member.classic is None:
                code, member = ErrorCode.UNKNOWN_MEMBER_ID, None
            if member is not None:
                logger.info("classic member %s is leaving consumer group %s",
                            member_id, group.group_id)  # fmt: skip
                self.consumer._fence(group, member, "left the group (LeaveGroup)")
                left = True
            results.append(
                MemberResponse(member_id=member_id, group_instance_id=instance_id, error_code=code)
            )
        if left:
            self.consumer._persist(group)
        if api_version < 3:
            return LeaveGroupResponse(error_code=results[0].error_code)
        return LeaveGroupResponse(error_code=ErrorCode.NONE, members=results)

    # -- downgrade ---------------------------------------------------------------------------

    def maybe_downgrade(self, group: ConsumerGroup) -> bool:
        """After a member of the new protocol left `group`: if only classic members remain,
        the group becomes a classic group again and rebalances (Kafka's
        convertToClassicGroup). Whether it did."""
        if not group.members or any(m.classic is None for m in group.members.values()):
            return False
        if self._policy() not in ("bidirectional", "downgrade"):
            logger.info("consumer group %s not downgraded: the migration policy is %s",
                        group.group_id, self._policy())  # fmt: skip
            return False
        if len(group.members) > self.config.group_max_size:
            logger.info("consumer group %s not downgraded: more members than "
                        "group.max.size", group.group_id)  # fmt: skip
            return False
        coordinator = self.coordinator
        shell = coordinator.groups.get(group.group_id)
        if shell is None or shell.consumer is not group:
            return False
        # The consumer group's records go; the classic group's record replaces them.
        tombstones: list[tuple[bytes, bytes | None]] = [(k, None) for k in group.persisted]
        members = list(group.members.values())
        for m in members:
            self.consumer._stop_timers(m)
        shell.consumer = None
        shell.members.clear()
        shell.static_members.clear()
        shell.leader_id = None
        shell.protocol_type = PROTOCOL_TYPE
        for m in members:
            assert m.classic is not None
            sub = _first_subscription(m.classic.protocols)
            version = sub.version if sub is not None else 0
            shell.add(
                GroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.classic.session_timeout_ms,
                    protocol_type=PROTOCOL_TYPE,
                    protocols=list(m.classic.protocols),
                    assignment=encode_assignment(m.assigned, version),
                )
            )
        shell.generation_id = group.group_epoch
        shell.protocol_name = shell.select_protocol() if shell.candidate_protocols() else None
        shell.state = GroupState.STABLE
        shell.state_timestamp_ms = coordinator.now_ms()
        try:
            if tombstones:
                coordinator.store.append(group.group_id, tombstones)
            coordinator._store_group(shell)
        except KafkaError as exc:
            logger.warning("group %s: cannot store its downgrade: %s", group.group_id, exc)
        group.persisted = {}
        for m in shell.members.values():
            coordinator._start_session_timer(shell, m)
        logger.info(
            "consumer group %s downgraded to a classic group at generation %d with %d member(s)",
            group.group_id,
            shell.generation_id,
            len(shell.members),
        )
        coordinator._prepare_rebalance(
            shell, f"downgrade of group {group.group_id} from consumer to classic"
        )
        return True
