"""StopReplica (key 5): the controller tells this broker to stop fetching (and leading) a
partition, and with delete_partition to delete its log (topic deletion, reassignment).

Versions 0-2 name partitions with one request-wide delete flag; 3+ carry each partition's
leader epoch and flag (a stale epoch is FENCED_LEADER_EPOCH).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.stop_replica_response import (
    StopReplicaPartitionError,
    StopReplicaResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    manager = getattr(broker, "replica_manager", None)
    if manager is None:
        return StopReplicaResponse(error_code=ErrorCode.INVALID_REQUEST)
    body = request.body
    version = request.api_version
    if body.controller_epoch < broker.metadata.controller_epoch:
        return StopReplicaResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
    from trio_broker.cluster.zookeeper.broker_epoch import is_stale

    if is_stale(broker, body.broker_epoch, "StopReplica"):
        return StopReplicaResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
    broker.metadata.controller_epoch = body.controller_epoch
    todo: list[tuple[str, int, int, bool]] = []
    if version == 0:
        todo = [
            (p.topic_name, p.partition_index, -1, body.delete_partitions)
            for p in body.ungrouped_partitions
        ]
    elif version <= 2:
        todo = [
            (t.name, p, -1, body.delete_partitions)
            for t in body.topics
            for p in t.partition_indexes
        ]
    else:
        todo = [
            (t.topic_name, p.partition_index, p.leader_epoch, p.delete_partition)
            for t in body.topic_states
            for p in t.partition_states
        ]
    errors = []
    for topic, index, epoch, delete in todo:
        code = await manager.stop_replica(topic, index, epoch, delete)
        errors.append(
            StopReplicaPartitionError(topic_name=topic, partition_index=index, error_code=code)
        )
    return StopReplicaResponse(error_code=ErrorCode.NONE, partition_errors=errors)
