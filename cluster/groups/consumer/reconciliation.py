"""Moving a member towards its target assignment (Kafka's CurrentAssignmentBuilder).

Revoke before assign: partitions leaving a member are first taken out of its assignment
and held as pending revocation, its epoch unchanged, until a heartbeat shows it no longer
owns them; only then does the member move to the assignment epoch. A partition enters a
member's assignment only once no other member holds it (`ConsumerGroup.owners`); until
then the member waits in UNRELEASED_PARTITIONS with the rest. So no partition is ever
owned by two members.
"""

from __future__ import annotations

from trio_broker.cluster.groups.consumer.consumer_group import (
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    TopicPartitions,
)

__all__ = ["reconcile"]


def _minus(a: TopicPartitions, b: TopicPartitions) -> TopicPartitions:
    out = {t: ps - b.get(t, set()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def _and(a: TopicPartitions, b: TopicPartitions) -> TopicPartitions:
    out = {t: ps & b.get(t, set()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def _overlaps(a: TopicPartitions, b: TopicPartitions) -> bool:
    return any(ps & b.get(t, set()) for t, ps in a.items())


def reconcile(
    group: ConsumerGroup, member: ConsumerGroupMember, owned: TopicPartitions | None
) -> bool:
    """Advance `member` as far as its `owned` partitions (None: not reported) allow;
    whether its assignment changed."""
    before = {t: set(ps) for t, ps in member.assigned.items()}
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owned is None or _overlaps(owned, member.pending_revocation):
            return False  # still revoking
        group.release(member, member.pending_revocation)
        member.pending_revocation = {}
        member.state = MemberState.STABLE
        if member.rebalance_timer is not None:
            member.rebalance_timer.cancel()
            member.rebalance_timer = None
    epoch = group.assignment_epoch
    if member.state is MemberState.STABLE and member.member_epoch == epoch:
        return False
    target = group.target.get(member.member_id, {})
    keep = _and(member.assigned, target)
    revoke = _minus(member.assigned, target)
    if revoke:
        member.assigned = keep
        member.pending_revocation = revoke
        member.state = MemberState.UNREVOKED_PARTITIONS
    else:
        wanted = _minus(target, keep)
        free: TopicPartitions = {}
        for topic, ps in wanted.items():
            mine = {p for p in ps if group.owners.get((topic, p)) in (None, member.member_id)}
            if mine:
                free[topic] = mine
        assigned = {t: set(ps) for t, ps in keep.items()}
        for topic, ps in free.items():
            assigned.setdefault(topic, set()).update(ps)
        member.assigned = assigned
        group.claim(member, assigned)
        member.previous_member_epoch = member.member_epoch
        member.member_epoch = epoch
        member.state = (
            MemberState.STABLE if _minus(wanted, free) == {} else MemberState.UNRELEASED_PARTITIONS
        )
    return member.assigned != before
