"""Where transaction states are kept: the `__transaction_state` partitions of this broker.

Like the group store: the topic is created on first use (the first FindCoordinator or
InitProducerId for a transactional id), records are appended to the partition a
transactional id maps to, and partitions are replayed at start. The seam for replication:
`load_partition(p)` when this broker becomes the leader of partition p, and
`unload_partition(p)` when it stops leading it; until a partition is loaded its
transactional ids answer COORDINATOR_LOAD_IN_PROGRESS, and a partition not led here
answers NOT_COORDINATOR.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from trio_broker.cluster.transactions.records import (
    TRANSACTION_STATE_TOPIC,
    partition_for,
    replay,
    transaction_log_key,
    transaction_log_value,
)
from trio_broker.cluster.transactions.transaction_metadata import TransactionMetadata
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.partition_log import wall_clock_ms
from trio_broker.protocol.record_codec import build_batch
from trio_broker.protocol.records import read_header

if TYPE_CHECKING:
    from trio_broker.broker import Broker

logger = logging.getLogger(__name__)

__all__ = ["TransactionStore"]


class TransactionStore:
    def __init__(self, broker: Broker, *, now_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.broker = broker
        self.now_ms = now_ms
        self.num_partitions: int = broker.config.transaction_state_log_num_partitions
        self.loaded: set[int] = set()
        self.loading: set[int] = set()
        topic = broker.metadata.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is not None:
            # An existing topic decides the partition count, as in Kafka.
            self.num_partitions = len(topic.partitions)

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def check(self, transactional_id: str) -> ErrorCode:
        """NONE when this broker coordinates `transactional_id` and has loaded its state."""
        partition = self.partition_for(transactional_id)
        if partition in self.loaded:
            return ErrorCode.NONE
        if partition in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if not self.topic_exists():
            return ErrorCode.NONE  # no transactional id was ever seen: none is known here
        return ErrorCode.NOT_COORDINATOR

    def topic_exists(self) -> bool:
        return TRANSACTION_STATE_TOPIC in self.broker.metadata.topics

    def topic_configs(self) -> dict[str, str]:
        config = self.broker.config
        return {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "segment.bytes": str(config.transaction_state_log_segment_bytes),
            "min.insync.replicas": str(config.transaction_state_log_min_isr),
            "unclean.leader.election.enable": "false",
        }

    def ensure_topic(self) -> bool:
        """Create `__transaction_state` if missing (its partitions start loaded and empty).
        True if it was created now."""
        if self.topic_exists():
            return False
        self.broker.topics.create_topic(
            TRANSACTION_STATE_TOPIC,
            self.num_partitions,
            self.broker.config.transaction_state_log_replication_factor,
            self.topic_configs(),
            internal=True,
        )
        if getattr(self.broker, "zk", None) is None:
            self.loaded = set(range(self.num_partitions))
        return True

    def leader_epoch(self, partition: int) -> int:
        """The coordinator epoch of `partition`: the leader epoch of the state partition,
        in a cluster as this broker's replica has it (the metadata cache lags LeaderAndIsr:
        a coordinator just elected would stamp its records and markers with the epoch of
        the coordinator it replaces)."""
        replicas = getattr(self.broker, "replica_manager", None)
        if replicas is not None:
            part = replicas.leader_partition(TRANSACTION_STATE_TOPIC, partition)
            if part is not None:
                return part.leader_epoch
        topic = self.broker.metadata.topics.get(TRANSACTION_STATE_TOPIC)
        state = topic.partitions.get(partition) if topic is not None else None
        return state.leader_epoch if state is not None else 0

    def local_partitions(self) -> list[int]:
        """The partitions this broker leads (all of them on a single broker)."""
        topic = self.broker.metadata.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None:
            return []
        return sorted(
            p for p, state in topic.partitions.items() if state.leader == self.broker.node_id
        )

    def read_partition(self, partition: int) -> dict[str, TransactionMetadata]:
        log = self.broker.topics.get_log(TRANSACTION_STATE_TOPIC, partition)
        return {} if log is None else replay(log)

    def append(self, meta: TransactionMetadata, *, tombstone: bool = False) -> None:
        """Write `meta`'s state (or a tombstone) to its partition. On one broker the append
        is committed when it returns (the broker is the whole ISR); in a cluster the
        callers wait for the ISR (`isr_wait`) before answering or sending markers.
        Raises KafkaError(NOT_COORDINATOR) when the partition is not here, and
        (COORDINATOR_NOT_AVAILABLE) when its ISR is below min.insync.replicas."""
        partition = self.partition_for(meta.transactional_id)
        log = self.broker.topics.get_log(TRANSACTION_STATE_TOPIC, partition)
        if log is None or partition not in self.loaded:
            raise KafkaError(
                ErrorCode.NOT_COORDINATOR, f"{TRANSACTION_STATE_TOPIC}-{partition} is not here"
            )
        replicas = getattr(self.broker, "replica_manager", None)
        leader = replicas.leader_partition(TRANSACTION_STATE_TOPIC, partition) if replicas else None
        if replicas is not None:
            from trio_broker.cluster.replication.delayed_produce import _min_isr

            if leader is None:
                raise KafkaError(
                    ErrorCode.NOT_COORDINATOR, f"{TRANSACTION_STATE_TOPIC}-{partition} not led here"
                )
            if len(leader.isr) < _min_isr(self.broker, TRANSACTION_STATE_TOPIC):
                # Kafka's acks=-1 append fails with NOT_ENOUGH_REPLICAS, which the
                # coordinator answers as COORDINATOR_NOT_AVAILABLE.
                raise KafkaError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"the ISR {leader.isr} of {TRANSACTION_STATE_TOPIC}-{partition} is below "
                    "min.insync.replicas",
                )
        value = None if tombstone else transaction_log_value(meta)
        key = transaction_log_key(meta.transactional_id)
        batch = bytearray(build_batch([(key, value, (), self.now_ms())]))
        headers = [read_header(batch)]
        result = log.append_as_leader(
            batch, headers, leader_epoch=self.leader_epoch(partition), log_append_time_ms=None
        )
        if leader is not None:
            replicas.after_leader_append(leader)  # a cluster: the followers move the HW
            # Followers parked at this leader fetch it now, not after replica.fetch.wait.max.ms.
            self.broker.fetch_purgatory.wake(((TRANSACTION_STATE_TOPIC, partition),))
        else:
            log.high_watermark = log.log_end_offset
        if result.flush_needed:
            self.broker.schedule_flush(log)
