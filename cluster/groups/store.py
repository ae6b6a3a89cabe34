"""Where groups and offsets are kept: the `__consumer_offsets` partitions of this broker.

The store creates the topic on first use (as Kafka does on the first FindCoordinator),
appends the coordinator's records to the partition a group maps to, and replays the
partitions at start. Until a partition is replayed, its groups answer
COORDINATOR_LOAD_IN_PROGRESS.

The topic is compacted, with `min.compaction.lag.ms` set from
`offsets.commit.min.compaction.lag.ms` (one day by default, where Kafka has 0): the
cleaner leaves the last day of commits alone so that the nightly report sees every commit
of the day, not only the latest per partition.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import trio

from trio_broker.cluster.groups.records import OFFSETS_TOPIC, LoadedGroup, partition_for, replay
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.partition_log import wall_clock_ms
from trio_broker.protocol.record_codec import build_batch
from trio_broker.protocol.records import read_header

if TYPE_CHECKING:
    from trio_broker.broker import Broker

logger = logging.getLogger(__name__)

__all__ = ["GroupStore"]


class GroupStore:
    def __init__(self, broker: Broker, *, now_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.broker = broker
        self.now_ms = now_ms  # the records' timestamps
        self.num_partitions: int = broker.config.offsets_topic_num_partitions
        self.loaded: set[int] = set()
        # In a cluster: partitions this broker leads and is replaying (cluster moves).
        self.loading: set[int] = set()
        self.clustered = getattr(broker, "zk", None) is not None
        topic = broker.metadata.topics.get(OFFSETS_TOPIC)
        if topic is not None:
            # An existing topic decides the partition count, as in Kafka.
            self.num_partitions = len(topic.partitions)

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def is_loaded(self, group_id: str) -> bool:
        return partition_for(group_id, self.num_partitions) in self.loaded

    def topic_configs(self) -> dict[str, str]:
        config = self.broker.config
        return {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(config.offsets_topic_segment_bytes),
            "min.compaction.lag.ms": str(config.offsets_commit_min_compaction_lag_ms),
        }

    def ensure_topic(self) -> None:
        """Create `__consumer_offsets` if it does not exist yet; its partitions start loaded."""
        if OFFSETS_TOPIC in self.broker.metadata.topics:
            return
        self.broker.topics.create_topic(
            OFFSETS_TOPIC,
            self.num_partitions,
            self.broker.config.offsets_topic_replication_factor,
            self.topic_configs(),
            internal=True,
        )
        if not self.clustered:
            self.loaded = set(range(self.num_partitions))

    def replay_partition(self, partition: int) -> dict[str, LoadedGroup]:
        log = self.broker.topics.get_log(OFFSETS_TOPIC, partition)
        return {} if log is None else replay(log)

    async def load_all(self, on_loaded) -> None:
        """Replay every partition of the topic; `on_loaded(partition, groups)` after each.
        In a cluster nothing is led at start: partitions load as leadership arrives."""
        if self.clustered:
            return
        if OFFSETS_TOPIC not in self.broker.metadata.topics:
            self.loaded = set(range(self.num_partitions))
            return
        started = time.monotonic()
        count = 0
        for partition in range(self.num_partitions):
            log = self.broker.topics.get_log(OFFSETS_TOPIC, partition)
            groups: dict[str, LoadedGroup] = {} if log is None else replay(log)
            on_loaded(partition, groups)
            self.loaded.add(partition)
            count += len(groups)
            # A checkpoint between partitions keeps the broker answering while it loads.
            await trio.sleep(0)
        logger.info(
            "loaded %d group(s) from %d partitions of %s in %.3f s",
            count,
            self.num_partitions,
            OFFSETS_TOPIC,
            time.monotonic() - started,
        )

    def write_difference(
        self, group_id: str, written: dict[bytes, bytes], wanted: dict[bytes, bytes], what: str
    ) -> dict[bytes, bytes]:
        """Append what changed from the records `written` last to those `wanted` (and
        tombstones for keys gone), so the partition holds the group's current word per key;
        returns what is written now. On failure the group goes on in memory and the old
        `written` is returned: the next change writes the difference again."""
        changes: list[tuple[bytes, bytes | None]] = [
            (k, v) for k, v in wanted.items() if written.get(k) != v
        ]
        changes += [(k, None) for k in written if k not in wanted]
        if not changes:
            return written
        try:
            self.append(group_id, changes)
        except KafkaError as exc:
            logger.warning("%s: cannot store it: %s", what, exc)
            return written
        return wanted

    def append(
        self,
        group_id: str,
        records: Sequence[tuple[bytes, bytes | None]],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> int:
        """Append keyed records for `group_id` as one batch; returns the first offset.

        With a `producer_id` the batch is transactional (TxnOffsetCommit): it carries the
        producer's id and epoch, no sequence, and waits for the transaction's marker.

        The batch is in the log (the page cache) when this returns: on one broker that is the
        whole ISR, so the append is committed, as Kafka's acks=-1 append of offsets is. Like
        Kafka it does not fsync; `flush.messages` on the topic, if set, asks for a flush.
        Raises KafkaError(COORDINATOR_NOT_AVAILABLE) when the partition is not here.
        """
        self.ensure_topic()
        partition = partition_for(group_id, self.num_partitions)
        log = self.broker.topics.get_log(OFFSETS_TOPIC, partition)
        if log is None:
            raise KafkaError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no log for {OFFSETS_TOPIC}-{partition}"
            )
        now = self.now_ms()
        batch = bytearray(
            build_batch(
                [(key, value, (), now) for key, value in records],
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                is_transactional=producer_id >= 0,
            )
        )
        # We built the batch ourselves: its header is read back, not validated (no CRC pass).
        headers = [read_header(batch)]
        replicas = getattr(self.broker, "replica_manager", None)
        own = replicas.leader_partition(OFFSETS_TOPIC, partition) if replicas else None
        if own is not None:
            epoch = own.leader_epoch  # the leader's own epoch, not the cache's
        else:
            topic = self.broker.metadata.topics.get(OFFSETS_TOPIC)
            state = topic.partitions.get(partition) if topic is not None else None
            epoch = state.leader_epoch if state is not None else 0
        result = log.append_as_leader(
            batch,
            headers,
            leader_epoch=epoch,
            log_append_time_ms=None,
            from_coordinator=producer_id >= 0,
        )
        replicas = getattr(self.broker, "replica_manager", None)
        leader = replicas.leader_partition(OFFSETS_TOPIC, partition) if replicas else None
        if leader is not None:
            # A cluster: the HW moves as the followers fetch it (the commit is answered
            # without waiting for them, unlike Kafka's acks=-1 append).
            replicas.after_leader_append(leader)
            # Followers parked at this leader fetch it now, not after replica.fetch.wait.max.ms.
            self.broker.fetch_purgatory.wake(((OFFSETS_TOPIC, partition),))
        else:
            # A single broker is the whole ISR: the append is committed at once.
            log.high_watermark = log.log_end_offset
        if result.flush_needed:
            self.broker.schedule_flush(log)
        return result.first_offset
