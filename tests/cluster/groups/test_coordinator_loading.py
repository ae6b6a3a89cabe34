"""At start the coordinator replays `__consumer_offsets` one partition at a time; a group
whose partition is not replayed yet answers COORDINATOR_LOAD_IN_PROGRESS (clients retry),
and answers with its committed offsets once it is."""

from __future__ import annotations

import trio
from test_offset_expiry import Node, commit, props

from trio_broker.cluster.groups.records import partition_for
from trio_broker.config import BrokerConfig
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
)

PARTITIONS = 50


def fetch_response(coordinator, group: str):
    return coordinator.offsets.fetch_offsets(
        OffsetFetchRequest(
            group_id=group,
            topics=[OffsetFetchRequestTopic(name="orders", partition_indexes=[0, 1])],
        ),
        api_version=7,
    )


async def test_groups_answer_load_in_progress_until_their_partition_is_replayed(tmp_path, nursery):
    node = Node(tmp_path, nursery)
    # Fifty partitions, replayed with a checkpoint after each: whatever order trio runs
    # tasks in, the test looks before the last ones are replayed.
    node.config = BrokerConfig.from_properties(
        {**props(tmp_path), "offsets.topic.num.partitions": str(PARTITIONS)}
    )
    await node.start()
    node.broker.topics.create_topic("orders", 2, 1)
    # A group on the first __consumer_offsets partition, and one on the last.
    groups = {}
    n = 0
    while len(groups) < 2:
        group = f"g{n}"
        partition = partition_for(group, PARTITIONS)
        if partition in (0, PARTITIONS - 1):
            groups.setdefault(partition, group)
        n += 1
    for partition, group in groups.items():
        commit(node.coordinator, group, {("orders", 0): 10 + partition, ("orders", 1): 20})

    await node.restart()
    # The replay runs up to its first checkpoint before the test goes on: the first
    # partition is loaded, the last is not.
    first, last = groups[0], groups[PARTITIONS - 1]
    assert fetch_response(node.coordinator, first).error_code == ErrorCode.NONE
    assert (
        fetch_response(node.coordinator, last).error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    )
    assert node.coordinator.check_group(last) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

    await trio.testing.wait_all_tasks_blocked()
    for partition, group in groups.items():
        response = fetch_response(node.coordinator, group)
        assert response.error_code == ErrorCode.NONE
        got = {p.partition_index: p.committed_offset for t in response.topics for p in t.partitions}
        assert got == {0: 10 + partition, 1: 20}
    node.stop()
