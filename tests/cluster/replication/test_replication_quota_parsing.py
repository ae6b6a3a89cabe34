"""The throttled-replica lists as operators write them (Kafka's format): what
kafka-reassign-partitions sets must throttle exactly the replicas it names on each broker
(the quotas' effect is tested end to end in test_replication_throttle.py)."""

from __future__ import annotations

import pytest

from trio_broker.cluster.replication.replication_quota import ALL_PARTITIONS, throttled_partitions


@pytest.mark.parametrize(
    ("text", "node", "expected"),
    [
        ("0:1,1:2,2:1", 1, {0, 2}),
        ("0:1,1:2,2:1", 2, {1}),
        ("0:1,1:2,2:1", 3, set()),
        (" 0:1 , 7:1 ", 1, {0, 7}),  # spaces, as the tool's users type them
        ("*", 5, ALL_PARTITIONS),
        ("", 1, set()),
    ],
)
def test_throttled_partitions_of_a_broker(text, node, expected):
    assert throttled_partitions(text, node) == expected
