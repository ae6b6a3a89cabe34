"""Finding the leader's log of a partition named in a request, with Kafka's fencing.

ListOffsets, OffsetForLeaderEpoch and DeleteRecords all start the same way: the partition
must exist and be led here, and a `current_leader_epoch` the client sends (-1: none) must
match the leader's: older is FENCED_LEADER_EPOCH, newer is UNKNOWN_LEADER_EPOCH.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.cluster.metadata import PartitionState
    from trio_broker.log import PartitionLog

__all__ = ["leader_log"]


def leader_log(
    broker: Broker, topic: str, partition: int, current_leader_epoch: int = -1
) -> tuple[PartitionState, PartitionLog]:
    """The partition's state (its leader_epoch) and log; raises KafkaError with the code
    Kafka answers. In a cluster, leadership is the replica manager's (the metadata cache
    is UpdateMetadata's view, which may lag behind or run ahead of LeaderAndIsr)."""
    state = broker.metadata.topics.get(topic)
    part = state.partitions.get(partition) if state is not None else None
    replicas = getattr(broker, "replica_manager", None)
    if replicas is not None:
        replica = replicas.partition(topic, partition)
        if replica is None and part is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if replica is None or not replica.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        part = replica  # type: ignore[assignment]
    if part is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if replicas is None and part.leader != broker.node_id:
        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    if current_leader_epoch >= 0:
        if current_leader_epoch < part.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
        if current_leader_epoch > part.leader_epoch:
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)
    log = broker.log_manager.get_log(topic, partition)
    if log is not None and log.offline:
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"log {log.name} is in an offline log dir")
    if log is None or log.closed:
        # Partition known but its log is gone (deleted a moment ago, or a failed dir).
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    return part, log
