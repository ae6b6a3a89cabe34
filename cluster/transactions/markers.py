"""Writing transaction markers: a COMMIT or ABORT control batch into each partition.

The one code path for markers. The local transaction coordinator calls it directly for the
partitions led by this broker; the WriteTxnMarkers API (what another broker's coordinator
sends) calls it too. A marker into a `__consumer_offsets` partition also completes the
group coordinator's pending transactional offset commits of that producer there.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from trio_broker.cluster.coordinator_log import OFFSETS_TOPIC
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.control_batch import ControlType, build_marker_batch
from trio_broker.protocol.records import read_header

if TYPE_CHECKING:
    from trio_broker.broker import Broker

logger = logging.getLogger(__name__)

__all__ = ["write_marker", "write_markers"]


def write_marker(
    broker: Broker,
    topic: str,
    partition: int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
) -> ErrorCode:
    """Append one marker to a partition led here; the error code for that partition."""
    state = broker.metadata.topics.get(topic)
    pstate = state.partitions.get(partition) if state is not None else None
    log = broker.topics.get_log(topic, partition)
    replicas = getattr(broker, "replica_manager", None)
    leader = replicas.leader_partition(topic, partition) if replicas is not None else None
    if log is None or (pstate is None and leader is None):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if replicas is not None:
        # A cluster: the replica's own leadership and epoch, not the metadata cache's
        # (UpdateMetadata follows LeaderAndIsr: just elected, the cache names the old
        # leader and epoch, and the marker would carry a stale leader epoch).
        if leader is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        leader_epoch = leader.leader_epoch
        from trio_broker.cluster.replication.delayed_produce import _min_isr

        # Appended as acks=-1, so the ISR must be large enough first.
        if len(leader.isr) < _min_isr(broker, topic):
            return ErrorCode.NOT_ENOUGH_REPLICAS
    else:
        assert pstate is not None
        if pstate.leader != broker.node_id:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        leader_epoch = pstate.leader_epoch
    batch = bytearray(
        build_marker_batch(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            control=ControlType.COMMIT if commit else ControlType.ABORT,
            timestamp_ms=log.now_ms(),
        )
    )
    try:
        result = log.append_as_leader(
            batch,
            [read_header(batch)],
            leader_epoch=leader_epoch,
            log_append_time_ms=None,
            from_coordinator=True,
        )
    except KafkaError as exc:
        logger.info(
            "marker for producer %d on %s-%d refused: %s", producer_id, topic, partition, exc
        )
        return ErrorCode(exc.code)
    if leader is not None:
        replicas.after_leader_append(leader)  # a cluster: the followers move the HW
    else:
        log.high_watermark = log.log_end_offset
    if result.flush_needed:
        broker.schedule_flush(log)
    if topic == OFFSETS_TOPIC:
        broker.group_coordinator.offsets.complete_txn_offsets(producer_id, partition, commit)
    broker.fetch_purgatory.wake(((topic, partition),))
    return ErrorCode.NONE


def write_markers(
    broker: Broker,
    partitions: Iterable[tuple[str, int]],
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
) -> dict[tuple[str, int], ErrorCode]:
    return {
        (topic, partition): write_marker(
            broker,
            topic,
            partition,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            commit=commit,
        )
        for topic, partition in partitions
    }
