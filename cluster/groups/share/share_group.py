"""A share group's membership (Kafka's ShareGroup and ShareGroupMember) and its assignor.

Share group members are not given partitions of their own: the same partition may go to
several members, which then take records from it one acquisition at a time. So there is
nothing to reconcile: a member's epoch follows the group epoch at its next heartbeat, and
its assignment is the target at once (KIP-932).
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

__all__ = ["ShareGroup", "ShareGroupState", "ShareMember", "simple_assign"]

LEAVE_EPOCH = -1

TopicPartitions = dict[str, tuple[int, ...]]  # topic name -> sorted partitions


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@attrs.define(eq=False)
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None = None
    member_epoch: int = 0
    previous_epoch: int = -1
    subscribed_topic_names: tuple[str, ...] = ()
    assigned: TopicPartitions = attrs.Factory(dict)
    sent: TopicPartitions | None = None  # the assignment this member was last told
    session_timer: Any = None


@attrs.define(eq=False)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = attrs.Factory(dict)
    # The partition counts the target assignment was computed for.
    topic_partitions: dict[str, int] = attrs.Factory(dict)
    # The ShareGroup* records last written (`share_records`), key -> value.
    persisted: dict[bytes, bytes] = attrs.Factory(dict)

    @property
    def state(self) -> ShareGroupState:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY


def simple_assign(
    members: dict[str, set[str]], partitions: dict[str, int]
) -> dict[str, TopicPartitions]:
    """Kafka's SimpleAssignor in spirit: every subscribed partition goes to some member
    subscribing to its topic, spread evenly; with more members than partitions, the
    partitions are shared, so that every member has something to fetch."""
    out: dict[str, dict[str, list[int]]] = {m: {} for m in members}
    for topic, count in sorted(partitions.items()):
        subscribers = sorted(m for m, topics in members.items() if topic in topics)
        if not subscribers or not count:
            continue
        if len(subscribers) <= count:
            for p in range(count):
                out[subscribers[(p + hash_start(topic)) % len(subscribers)]].setdefault(
                    topic, []
                ).append(p)
        else:
            for i, m in enumerate(subscribers):
                out[m].setdefault(topic, []).append((i + hash_start(topic)) % count)
    return {m: {t: tuple(sorted(ps)) for t, ps in tps.items()} for m, tps in out.items()}


def hash_start(topic: str) -> int:
    """Where a topic's round starts: a stable spread of topics over members (not Python's
    salted hash, so an assignment is the same from one run to the next)."""
    return sum(topic.encode()) % 7919
