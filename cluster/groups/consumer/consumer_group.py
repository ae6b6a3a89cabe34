"""A KIP-848 consumer group's state (Kafka's ConsumerGroup and ConsumerGroupMember).

Three epochs order everything (KIP-848): the group epoch moves when membership or a
subscription changes; the target assignment is computed for a group epoch and carries it
as the assignment epoch; a member's epoch reaches the assignment epoch once it has
reconciled to its target. `owners` records which member holds each partition (assigned or
still being revoked), so that a partition is handed to a new owner only once free.
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

__all__ = [
    "ClassicMetadata",
    "ConsumerGroup",
    "ConsumerGroupMember",
    "ConsumerGroupState",
    "MemberState",
    "TopicPartitions",
]

TopicPartitions = dict[str, set[int]]  # topic name -> partitions


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


@attrs.define(kw_only=True)
class ClassicMetadata:
    """What a member of the classic protocol told its JoinGroup: kept while it is in."""

    session_timeout_ms: int
    protocols: list[tuple[str, bytes]]  # (assignor name, subscription), its preference order


@attrs.define(kw_only=True, eq=False)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300_000
    subscribed_topic_names: list[str] = attrs.Factory(list)
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: TopicPartitions = attrs.Factory(dict)
    pending_revocation: TopicPartitions = attrs.Factory(dict)
    session_timer: Any = None
    rebalance_timer: Any = None  # armed while partitions are being revoked
    # A member of the classic protocol (JoinGroup) inside this group: its session timeout
    # and protocols (`classic_members.ClassicMetadata`); None for the new protocol's.
    classic: ClassicMetadata | None = None


@attrs.define(kw_only=True, eq=False)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = "uniform"
    members: dict[str, ConsumerGroupMember] = attrs.Factory(dict)
    static_members: dict[str, str] = attrs.Factory(dict)  # instance id -> member id
    target: dict[str, TopicPartitions] = attrs.Factory(dict)  # member id -> target
    owners: dict[tuple[str, int], str] = attrs.Factory(dict)  # partition -> member id
    # Partition counts of the subscribed topics the target was computed from.
    topic_partitions: dict[str, int] = attrs.Factory(dict)
    epoch_reasons: list[str] = attrs.Factory(list)  # changes awaiting a group epoch bump
    # The records last written for the group (key -> value), to append only what changed.
    persisted: dict[bytes, bytes] = attrs.Factory(dict)

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.assignment_epoch != self.group_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.member_epoch != self.assignment_epoch for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def subscribed_topics(self, topics: Any = ()) -> set[str]:
        """Every topic some member subscribes to (by name, or by regex among `topics`)."""
        import re

        out: set[str] = set()
        for m in self.members.values():
            out.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                pattern = re.compile(m.subscribed_topic_regex)
                out.update(t for t in topics if pattern.fullmatch(t))
        return out

    def release(self, member: ConsumerGroupMember, partitions: TopicPartitions) -> None:
        for topic, ps in partitions.items():
            for p in ps:
                if self.owners.get((topic, p)) == member.member_id:
                    del self.owners[(topic, p)]

    def claim(self, member: ConsumerGroupMember, partitions: TopicPartitions) -> None:
        for topic, ps in partitions.items():
            for p in ps:
                self.owners[(topic, p)] = member.member_id

    def remove(self, member: ConsumerGroupMember) -> None:
        self.release(member, member.assigned)
        self.release(member, member.pending_revocation)
        self.members.pop(member.member_id, None)
        self.target.pop(member.member_id, None)
        if member.instance_id is not None:
            if self.static_members.get(member.instance_id) == member.member_id:
                del self.static_members[member.instance_id]
