"""Kafka's replica assignment (AdminUtils.assignReplicasToBrokers), on Kafka's own examples."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from trio_broker.cluster.replica_assignment import assign_replicas, rack_alternated_brokers
from trio_broker.errors import ErrorCode, KafkaError


def test_rack_unaware_matches_kafkas_example():
    # Kafka's AdminTest.testReplicaAssignment: brokers 0-4, 10 partitions, factor 3, start 0.
    brokers = dict.fromkeys(range(5))
    assert assign_replicas(brokers, 10, 3, fixed_start=0) == {
        0: (0, 1, 2),
        1: (1, 2, 3),
        2: (2, 3, 4),
        3: (3, 4, 0),
        4: (4, 0, 1),
        5: (0, 2, 3),
        6: (1, 3, 4),
        7: (2, 4, 0),
        8: (3, 0, 1),
        9: (4, 1, 2),
    }


def test_random_start_spreads_leaders_and_replicas_evenly():
    brokers = {1: None, 2: None, 3: None}
    for seed in range(20):
        got = assign_replicas(brokers, 6, 3, rng=random.Random(seed))
        assert Counter(r[0] for r in got.values()) == {1: 2, 2: 2, 3: 2}
        assert all(sorted(r) == [1, 2, 3] for r in got.values())
    starts = {assign_replicas(brokers, 1, 1, rng=random.Random(s))[0][0] for s in range(30)}
    assert starts == {1, 2, 3}  # the first leader is not always the lowest id


def test_rack_alternated_list_matches_kafkas_example():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_brokers(racks) == [0, 3, 1, 5, 4, 2]


def test_rack_aware_puts_every_replica_of_a_partition_on_another_rack():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    # Kafka's AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers.
    assert assign_replicas(racks, 7, 3, fixed_start=0) == {
        0: (0, 3, 1),
        1: (3, 1, 5),
        2: (1, 5, 4),
        3: (5, 4, 2),
        4: (4, 2, 0),
        5: (2, 0, 3),
        6: (0, 4, 2),
    }
    assert rack_alternated_brokers({b: r for b, r in racks.items() if b != 5}) == [0, 3, 1, 4, 2]
    for seed in range(20):
        for replicas in assign_replicas(racks, 12, 3, rng=random.Random(seed)).values():
            assert len({racks[b] for b in replicas}) == 3


def test_bad_requests_get_kafkas_errors():
    with pytest.raises(KafkaError) as info:
        assign_replicas({1: None, 2: None}, 3, 3)
    assert info.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
    with pytest.raises(KafkaError) as info:
        assign_replicas({1: "a", 2: None}, 1, 1)
    assert info.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    with pytest.raises(KafkaError) as info:
        assign_replicas({1: None}, 0, 1)
    assert info.value.code == ErrorCode.INVALID_PARTITIONS


def test_added_partitions_continue_the_leaders_round_robin():
    brokers = dict.fromkeys(range(5))
    tail = assign_replicas(brokers, 4, 3, start_partition=6, fixed_start=2)
    assert sorted(tail) == [6, 7, 8, 9]
    assert [tail[p][0] for p in range(6, 10)] == [3, 4, 0, 1]  # (p + start) % brokers
    assert all(len(set(r)) == 3 for r in tail.values())
