"""Partition assignors the group leader runs: Kafka's `range` and `cooperative-sticky`.

An assignor sees every member's subscription (topics and, for cooperative rebalancing,
the partitions it owns now) and the topics' partition counts, and answers each member's
partitions. Both are deterministic: every leader computes the same answer from the same
input, so a new leader changes nothing.

    assignment = ASSIGNORS["range"].assign(members, {"events": 6})
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

__all__ = ["ASSIGNORS", "MemberSubscription", "assign_range", "assign_cooperative_sticky"]

TP = tuple[str, int]


@attrs.frozen(kw_only=True)
class MemberSubscription:
    member_id: str
    topics: tuple[str, ...]
    owned: tuple[TP, ...] = ()
    group_instance_id: str | None = None


def _sort_key(member: MemberSubscription) -> tuple[str, str]:
    # Kafka sorts static members by instance id, so a restarted static member (new member
    # id, same instance id) gets the same partitions back.
    return (member.group_instance_id or "\uffff", member.member_id)


def assign_range(
    members: Mapping[str, MemberSubscription], partitions: Mapping[str, int]
) -> dict[str, list[TP]]:
    """Kafka's RangeAssignor: per topic, consecutive ranges; the first members get one more."""
    result: dict[str, list[TP]] = {m: [] for m in members}
    for topic in sorted(partitions):
        subscribed = sorted((m for m in members.values() if topic in m.topics), key=_sort_key)
        if not subscribed:
            continue
        count = partitions[topic]
        per, extra = divmod(count, len(subscribed))
        start = 0
        for i, member in enumerate(subscribed):
            n = per + (1 if i < extra else 0)
            result[member.member_id].extend((topic, p) for p in range(start, start + n))
            start += n
    return result


def assign_cooperative_sticky(
    members: Mapping[str, MemberSubscription], partitions: Mapping[str, int]
) -> dict[str, list[TP]]:
    """Balanced and sticky, for incremental cooperative rebalancing (KIP-429).

    Each member keeps what it owns up to its fair share; the rest goes to the least
    loaded subscribed member. A partition moving from one live owner to another is left
    out of this round (its owner revokes it and rejoins; the next round hands it over), so
    no partition is ever owned by two members at once. Simpler than Kafka's
    AbstractStickyAssignor (no general-subscription balancing), with the same guarantees
    when members subscribe to the same topics.
    """
    ordered = sorted(members.values(), key=_sort_key)
    valid = {(t, p) for t, n in partitions.items() for p in range(n)}
    owner: dict[TP, str] = {}
    for member in ordered:
        for tp in member.owned:
            # Two claimants (a member that missed a rebalance): the first keeps it.
            if tp in valid and tp[0] in member.topics and tp not in owner:
                owner[tp] = member.member_id
    total = sum(1 for t, _ in valid if any(t in m.topics for m in ordered))
    floor, ceil_slots = divmod(total, len(ordered)) if ordered else (0, 0)
    result: dict[str, list[TP]] = {m.member_id: [] for m in ordered}
    # Members owning the most keep their extra one first, moving as little as possible.
    for member in sorted(
        ordered, key=lambda m: -sum(1 for o in owner.values() if o == m.member_id)
    ):
        mine = sorted(tp for tp, o in owner.items() if o == member.member_id)
        limit = floor
        if len(mine) > floor and ceil_slots > 0:
            limit = floor + 1
            ceil_slots -= 1
        result[member.member_id] = mine[:limit]
    taken = {tp for tps in result.values() for tp in tps}
    for tp in sorted(valid - taken):
        eligible = [m for m in ordered if tp[0] in m.topics]
        if not eligible:
            continue
        target = min(eligible, key=lambda m: len(result[m.member_id]))
        result[target.member_id].append(tp)
    # Cooperative: nothing goes to a new owner while its current owner still holds it.
    for member_id, tps in result.items():
        result[member_id] = sorted(tp for tp in tps if owner.get(tp, member_id) == member_id)
    return result


ASSIGNORS = {"range": assign_range, "cooperative-sticky": assign_cooperative_sticky}
