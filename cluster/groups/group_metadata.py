"""A classic consumer group's state: members, generation, protocol, and the state machine.

Kafka's GroupMetadata, as data. The table `VALID_PREVIOUS` is the state machine: a group
moves to a state only from one of the states listed for it (Kafka's
`GroupState.validPreviousStates`). The coordinator drives the transitions; this module
decides nothing on its own clock.
"""

from __future__ import annotations

import enum
import logging
from typing import Any

import attrs

logger = logging.getLogger(__name__)

__all__ = ["GroupMember", "GroupMetadata", "GroupState", "OffsetAndMetadata"]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset(
        {_S.STABLE, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD}
    ),
}


@attrs.frozen(kw_only=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = 0
    expire_timestamp_ms: int = -1  # only from OffsetCommit v2-4's retention time
    record_offset: int = -1  # where in __consumer_offsets it is stored


@attrs.define(kw_only=True, eq=False)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata), in the member's preference order
    assignment: bytes = b""
    # The parked JoinGroup / SyncGroup request of this member, answered by the coordinator.
    awaiting_join: Any = None
    awaiting_sync: Any = None
    is_new: bool = False  # joined in this rebalance and not yet through it
    session_timer: Any = None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols


@attrs.define(kw_only=True, eq=False)
class GroupMetadata:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, GroupMember] = attrs.Factory(dict)
    static_members: dict[str, str] = attrs.Factory(dict)  # group.instance.id -> member id
    pending_members: set[str] = attrs.Factory(set)  # got MEMBER_ID_REQUIRED, not yet back
    offsets: dict[tuple[str, int], OffsetAndMetadata] = attrs.Factory(dict)
    in_initial_delay: bool = False  # a rebalance from Empty waits group.initial.rebalance.delay.ms
    new_member_added: bool = False  # extends the initial rebalance delay
    rebalance_timer: Any = None
    # A KIP-848 consumer group of this id (`consumer.consumer_group.ConsumerGroup`): this
    # object then keeps only its committed offsets, and stays Empty.
    consumer: Any = None
    # A KIP-932 share group of this id (`share.share_group.ShareGroup`); it has no offsets.
    share: Any = None

    def has_consumer_members(self) -> bool:
        """Whether members of a KIP-848 consumer group or a KIP-932 share group are in."""
        return (self.consumer is not None and bool(self.consumer.members)) or (
            self.share is not None and bool(self.share.members)
        )

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS[state]:
            raise RuntimeError(
                f"group {self.group_id} cannot move from {self.state.value} to {state.value}"
            )
        logger.debug("group %s: %s -> %s", self.group_id, self.state.value, state.value)
        self.state = state
        self.state_timestamp_ms = now_ms

    # -- members ---------------------------------------------------------------------------

    def add(self, member: GroupMember) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> GroupMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None:
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> GroupMember:
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    def has_static_member(self, instance_id: str | None) -> bool:
        return instance_id is not None and instance_id in self.static_members

    def all_joined(self) -> bool:
        return (
            all(m.awaiting_join is not None for m in self.members.values())
            and not self.pending_members
        )

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols -------------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        """Whether a member with these protocols may join (Kafka's supportsProtocols)."""
        if not names:
            return False
        if not self.members:
            return True
        if self.protocol_type != protocol_type:
            return False
        return bool(self.candidate_protocols() & set(names))

    def candidate_protocols(self) -> set[str]:
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer (Kafka's vote)."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(name for name in member.protocol_names() if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        # Ties go to the first in the leader's order, which is stable across restarts.
        order = self.members[self.leader_id].protocol_names() if self.leader_id else []
        return max(votes, key=lambda n: (votes[n], -order.index(n) if n in order else -1e9))

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, or None when the protocol is not "consumer"."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        from trio_broker.cluster.groups.records import decode_subscription_topics

        topics: set[str] = set()
        for member in self.members.values():
            found = decode_subscription_topics(member.metadata_for(self.protocol_name))
            if found is None:
                return None
            topics |= found
        return topics
