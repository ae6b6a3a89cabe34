"""AlterReplicaLogDirs (key 34): move partitions of this broker to other log dirs.

Each partition gets its own answer, as Kafka gives it: LOG_DIR_NOT_FOUND for a path that is
not one of `log.dirs` (absolute, as DescribeLogDirs reports them), KAFKA_STORAGE_ERROR for
an offline dir or partition, UNKNOWN_TOPIC_OR_PARTITION for a partition this broker has no
log of (remembering the dir, so that a replica created later starts there), or
NOT_LEADER_OR_FOLLOWER when the partition exists in the cluster but not on this broker.
NONE means the move started (or the partition is there already); it then runs in
the background (log/dir_mover.py), and DescribeLogDirs shows the future replica until the
swap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.alter_replica_log_dirs_response import (
    AlterReplicaLogDirPartitionResult,
    AlterReplicaLogDirsResponse,
    AlterReplicaLogDirTopicResult,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


def _known(broker: Broker, topic: str, partition: int) -> bool:
    state = broker.metadata.topics.get(topic)
    return state is not None and partition in state.partitions


async def handle(broker: Broker, request: Request) -> AlterReplicaLogDirsResponse:
    manager = broker.log_manager
    results: dict[str, list[AlterReplicaLogDirPartitionResult]] = {}
    for entry in request.body.dirs:
        for topic in entry.topics:
            for partition in topic.partitions:
                code = manager.alter_log_dir(topic.name, partition, entry.path)
                if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and _known(
                    broker, topic.name, partition
                ):
                    # A partition of the cluster whose replica is not on this broker (yet):
                    # Kafka's answer, which its tools retry while a reassignment adds it.
                    code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                results.setdefault(topic.name, []).append(
                    AlterReplicaLogDirPartitionResult(
                        partition_index=partition, error_code=int(code)
                    )
                )
    return AlterReplicaLogDirsResponse(
        throttle_time_ms=0,
        results=[
            AlterReplicaLogDirTopicResult(topic_name=name, partitions=parts)
            for name, parts in results.items()
        ],
    )
