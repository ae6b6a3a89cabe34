"""Server-side assignors of KIP-848 consumer groups: `uniform` (the default) and `range`.

Kafka's UniformAssignor and RangeAssignor, in our own words. An assignor is a pure
function: the members' subscriptions, the partition counts of the subscribed topics and
the current target assignment in, the new target assignment out. Both are sticky in the
sense the reconciliation needs: a member keeps what it has as long as the balance allows,
so a member leaving moves only the leaver's partitions.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["ASSIGNORS", "Assignment", "range_assign", "uniform_assign"]

Assignment = dict[str, dict[str, set[int]]]  # member id -> topic -> partitions


def uniform_assign(
    subscriptions: Mapping[str, set[str]],
    partitions: Mapping[str, int],
    current: Assignment,
) -> Assignment:
    """Spread every subscribed partition so that members' counts differ by at most one
    among members of equal subscriptions; each member first keeps what it holds, up to
    its fair share."""
    members = sorted(subscriptions)
    out: Assignment = {m: {} for m in members}
    counts = dict.fromkeys(members, 0)
    every = [
        (topic, p)
        for topic in sorted({t for subs in subscriptions.values() for t in subs})
        if topic in partitions
        for p in range(partitions[topic])
    ]
    # A member's fair share: the partitions it may take over the members that may take them.
    share: dict[str, int] = {}
    for m in members:
        mine = sum(partitions.get(t, 0) for t in subscriptions[m])
        rivals = [o for o in members if subscriptions[o] & subscriptions[m]]
        share[m] = mine // max(len(rivals), 1)
    taken: set[tuple[str, int]] = set()
    for m in members:
        for topic, held in sorted(current.get(m, {}).items()):
            if topic not in subscriptions[m] or topic not in partitions:
                continue
            for p in sorted(held):
                if p < partitions[topic] and (topic, p) not in taken and counts[m] < share[m]:
                    out[m].setdefault(topic, set()).add(p)
                    taken.add((topic, p))
                    counts[m] += 1
    # What is left goes, partition by partition, to a subscribed member with the fewest,
    # preferring its previous owner among those tied.
    previous = {
        (topic, p): m for m, topics in current.items() for topic, ps in topics.items() for p in ps
    }
    for tp in every:
        if tp in taken:
            continue
        topic = tp[0]
        eligible = [m for m in members if topic in subscriptions[m]]
        if not eligible:
            continue
        best = min(eligible, key=lambda m: (counts[m], previous.get(tp) != m, m))
        out[best].setdefault(topic, set()).add(tp[1])
        counts[best] += 1
    return out


def range_assign(
    subscriptions: Mapping[str, set[str]],
    partitions: Mapping[str, int],
    current: Assignment,
) -> Assignment:
    """Per topic, contiguous ranges to its subscribers in member order, the first
    `count % subscribers` getting one more (the client-side range assignor's layout)."""
    members = sorted(subscriptions)
    out: Assignment = {m: {} for m in members}
    for topic in sorted({t for subs in subscriptions.values() for t in subs}):
        if topic not in partitions:
            continue
        subscribers = [m for m in members if topic in subscriptions[m]]
        count = partitions[topic]
        each, extra = divmod(count, len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            n = each + (1 if i < extra else 0)
            if n:
                out[m][topic] = set(range(start, start + n))
            start += n
    return out


ASSIGNORS = {"uniform": uniform_assign, "range": range_assign}
