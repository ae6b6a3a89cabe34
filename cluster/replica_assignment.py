"""Replica assignment of new topics and partitions (Kafka's AdminUtils.assignReplicasToBrokers).

Rack-unaware: the first replica of partition p is broker (p + start) of the sorted broker
list; the followers are spread by a shift that grows by one every full round of brokers,
so that leaders and followers both spread evenly. `start` and the first shift are random
unless fixed (tests fix them to check Kafka's own examples).

Rack-aware (every broker has `broker.rack`): the same walk over a list alternating between
racks (rack1's first broker, rack2's first, ..., rack1's second, ...), skipping a broker
whose rack already holds a replica of the partition until every rack holds one.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping

from trio_broker.errors import ErrorCode, KafkaError

__all__ = ["assign_replicas", "rack_alternated_brokers"]


def _replica_index(first: int, shift: int, index: int, count: int) -> int:
    return (first + 1 + (shift + index) % (count - 1)) % count


def rack_alternated_brokers(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered so that consecutive ones are on different racks, as far as possible."""
    by_rack: dict[str, list[int]] = {}
    for broker_id, rack in racks.items():
        by_rack.setdefault(rack, []).append(broker_id)
    iterators = {rack: iter(sorted(ids)) for rack, ids in by_rack.items()}
    names = sorted(iterators)
    result: list[int] = []
    index = 0
    while len(result) < len(racks):
        broker_id = next(iterators[names[index]], None)
        if broker_id is not None:
            result.append(broker_id)
        index = (index + 1) % len(names)
    return result


def assign_replicas(
    brokers: Mapping[int, str | None],
    num_partitions: int,
    replication_factor: int,
    *,
    start_partition: int = 0,
    fixed_start: int = -1,
    rng: random.Random | None = None,
) -> dict[int, tuple[int, ...]]:
    """partition -> replicas (preferred leader first) for partitions start_partition.. of
    a topic, over `brokers` (id -> rack or None). Raises KafkaError as Kafka's checks do."""
    if num_partitions <= 0:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
        )
    if replication_factor <= 0:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
        )
    if replication_factor > len(brokers):
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(brokers)}.",
        )
    rng = rng or random.Random()
    racked = [b for b, rack in brokers.items() if rack is not None]
    if not racked:
        return _rack_unaware(
            sorted(brokers), num_partitions, replication_factor, start_partition, fixed_start, rng
        )
    if len(racked) != len(brokers):
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "Not all brokers have rack information for replica rack aware assignment.",
        )
    return _rack_aware(
        {b: r for b, r in brokers.items() if r is not None},
        num_partitions,
        replication_factor,
        start_partition,
        fixed_start,
        rng,
    )


def _positions(
    count: int, partitions: int, start_partition: int, fixed: int, rng: random.Random
) -> Iterator[tuple[int, int, int]]:
    """Kafka's walk over the brokers: (partition, index of its first replica, shift of the
    followers), from a random start (or `fixed`), the shift growing every `count` partitions."""
    start = fixed if fixed >= 0 else rng.randrange(count)
    shift = fixed if fixed >= 0 else rng.randrange(count)
    partition = max(0, start_partition)
    for _ in range(partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        yield partition, (partition + start) % count, shift
        partition += 1


def _rack_unaware(
    ids: list[int],
    partitions: int,
    factor: int,
    start_partition: int,
    fixed: int,
    rng: random.Random,
) -> dict[int, tuple[int, ...]]:
    count = len(ids)
    out: dict[int, tuple[int, ...]] = {}
    for partition, first, shift in _positions(count, partitions, start_partition, fixed, rng):
        replicas = [ids[first]]
        replicas += [ids[_replica_index(first, shift, j, count)] for j in range(factor - 1)]
        out[partition] = tuple(replicas)
    return out


def _rack_aware(
    racks: Mapping[int, str],
    partitions: int,
    factor: int,
    start_partition: int,
    fixed: int,
    rng: random.Random,
) -> dict[int, tuple[int, ...]]:
    arranged = rack_alternated_brokers(racks)
    count = len(arranged)
    rack_count = len(set(racks.values()))
    out: dict[int, tuple[int, ...]] = {}
    for partition, first, shift in _positions(count, partitions, start_partition, fixed, rng):
        leader = arranged[first]
        replicas = [leader]
        used_racks = {racks[leader]}
        used = {leader}
        k = 0
        for _ in range(factor - 1):
            while True:
                broker_id = arranged[_replica_index(first, shift * rack_count, k, count)]
                k += 1
                rack = racks[broker_id]
                if (rack not in used_racks or len(used_racks) == rack_count) and (
                    broker_id not in used or len(used) == count
                ):
                    replicas.append(broker_id)
                    used_racks.add(rack)
                    used.add(broker_id)
                    break
        out[partition] = tuple(replicas)
    return out
