"""Durable share-partition state: `__share_group_state`, as Kafka's share coordinator keeps it.

Every change to a share-partition (an acquisition, an acknowledgement, a release, a lock
that ran out) is written as a ShareSnapshot record keyed by (group, topic id, partition):

    key    int16 record type 0 (ShareSnapshot), then the non-flexible ShareSnapshotKey v0:
           GroupId string, TopicId uuid, Partition int32
    value  int16 version 0, then the flexible ShareSnapshotValue v0: SnapshotEpoch uint16,
           StateEpoch int32, LeaderEpoch int32, StartOffset int64, StateBatches compact
           array of (FirstOffset int64, LastOffset int64, DeliveryState int8,
           DeliveryCount int16, tags), tags

(the layout of Kafka's share-coordinator message definitions). As in Kafka, the batches
hold only the states a restart keeps: an acquired record is written as available with its
delivery count, so it is delivered again after a restart; acknowledged and archived ones
are not. The topic is compacted: the last snapshot of each key is what a restart reads.
Kafka also writes ShareUpdate deltas between snapshots; here every write is a snapshot.
A deleted group's keys get tombstones.

The partition of a key is Kafka's: the Java hash of "group:topicId:partition" modulo the
topic's partition count (`offsets.topic.num.partitions` here, where Kafka has its own
`share.coordinator.state.topic.num.partitions`). On a lone broker the append is committed
at once; in a cluster the state is written only where this broker leads the state
partition (moving it with leadership is not done yet).
"""

from __future__ import annotations

import base64
import binascii
import logging
import struct
import uuid
from typing import TYPE_CHECKING

from trio_broker.cluster.coordinator_log import iter_log_batches, partition_for
from trio_broker.cluster.groups.share.share_partition import RecordState, SharePartition, Span
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol.primitives import read_uvarint, write_uvarint
from trio_broker.protocol.record_codec import build_batch, iter_records
from trio_broker.protocol.records import read_header

if TYPE_CHECKING:
    from trio_broker.broker import Broker

logger = logging.getLogger(__name__)

__all__ = [
    "SHARE_STATE_TOPIC",
    "ShareStateStore",
    "append_record",
    "decode_snapshot",
    "encode_snapshot",
    "parse_share_key",
    "replay_partition",
    "share_key",
    "state_partition",
]

SHARE_STATE_TOPIC = "__share_group_state"
SNAPSHOT_TYPE = 0
_KEY_HEAD = struct.Struct(">hh")
_VALUE_HEAD = struct.Struct(">hHiiq")  # version, snapshot epoch, state epoch, leader epoch, start
_BATCH = struct.Struct(">qqbh")


def share_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """Kafka's SharePartitionKey.asCoordinatorKey: "group:topic id:partition", the topic id
    written as Kafka writes a Uuid (URL-safe base64, unpadded)."""
    text = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    return f"{group_id}:{text}:{partition}"


def parse_share_key(key: str) -> tuple[str, uuid.UUID, int] | None:
    """A share-partition key as FindCoordinator carries it, or None where Kafka's
    SharePartitionKey.validate refuses it (three fields, a group, a Uuid, an int)."""
    tokens = key.split(":")
    while tokens and tokens[-1] == "":
        tokens.pop()  # as Java's String.split drops trailing empty fields
    if len(tokens) != 3 or not tokens[0].strip():
        return None
    try:
        raw = base64.urlsafe_b64decode(tokens[1] + "=" * (-len(tokens[1]) % 4))
        partition = int(tokens[2])
    except (ValueError, binascii.Error):
        return None
    if len(raw) != 16 or not -(2**31) <= partition < 2**31:
        return None
    return tokens[0].strip(), uuid.UUID(bytes=raw), partition


def state_partition(group_id: str, topic_id: uuid.UUID, partition: int, count: int) -> int:
    """The `__share_group_state` partition of a share-partition's key (Kafka's
    ShareCoordinatorService.partitionFor)."""
    return partition_for(share_key(group_id, topic_id, partition), count)


def encode_key(group_id: str, topic_id: uuid.UUID, partition: int) -> bytes:
    group = group_id.encode()
    return (
        _KEY_HEAD.pack(SNAPSHOT_TYPE, len(group))
        + group
        + topic_id.bytes
        + struct.pack(">i", partition)
    )


def decode_key(key: bytes) -> tuple[int, str, uuid.UUID, int] | None:
    if len(key) < 4:
        return None
    kind, size = _KEY_HEAD.unpack_from(key)
    at = 4 + size
    if len(key) < at + 20:
        return None
    group = bytes(key[4:at]).decode()
    topic_id = uuid.UUID(bytes=bytes(key[at : at + 16]))
    (partition,) = struct.unpack_from(">i", key, at + 16)
    return kind, group, topic_id, partition


def encode_snapshot(sp: SharePartition, snapshot_epoch: int, leader_epoch: int = 0) -> bytes:
    buf = bytearray(
        _VALUE_HEAD.pack(0, snapshot_epoch & 0xFFFF, sp.state_epoch, leader_epoch, sp.start_offset)
    )
    batches = []
    for span in sp.spans:
        state = RecordState.AVAILABLE if span.state is RecordState.ACQUIRED else span.state
        batches.append((span.first, span.last, int(state), span.delivery_count))
    if sp.end_offset > sp.start_offset and not batches:
        batches.append((sp.start_offset, sp.end_offset - 1, int(RecordState.ARCHIVED), 0))
    write_uvarint(buf, len(batches) + 1)
    for first, last, state, count in batches:
        buf += _BATCH.pack(first, last, state, count)
        buf.append(0)  # no tagged fields
    buf.append(0)
    return bytes(buf)


def decode_snapshot(value: bytes, topic: str, partition: int) -> SharePartition:
    _, _, state_epoch, _, start = _VALUE_HEAD.unpack_from(value)
    pos = _VALUE_HEAD.size
    count, pos = read_uvarint(value, pos)
    spans = []
    for _ in range(count - 1):
        first, last, state, delivered = _BATCH.unpack_from(value, pos)
        pos += _BATCH.size
        tags, pos = read_uvarint(value, pos)
        for _ in range(tags):
            _, pos = read_uvarint(value, pos)
            size, pos = read_uvarint(value, pos)
            pos += size
        spans.append(Span(first, last, RecordState(state), delivered))
    sp = SharePartition(topic, partition, start, state_epoch=state_epoch)
    sp.spans = [s for s in spans if s.last >= start]
    sp.end_offset = max([s.last + 1 for s in sp.spans], default=start)
    sp._advance()
    return sp


def replay_partition(
    broker: Broker, partition: int
) -> dict[tuple[str, uuid.UUID, int], SharePartition]:
    """The last snapshot of every key in one `__share_group_state` partition of this
    broker's log, by (group, topic id, partition); the share-partitions' `topic` is left
    empty (the caller names it)."""
    found: dict[tuple[str, uuid.UUID, int], SharePartition] = {}
    log = broker.topics.get_log(SHARE_STATE_TOPIC, partition)
    if log is None:
        return found
    for batch in iter_log_batches(log):
        for record in iter_records(batch):
            decoded = decode_key(record.key or b"")
            if decoded is None or decoded[0] != SNAPSHOT_TYPE:
                continue
            _, group_id, topic_id, index = decoded
            key = (group_id, topic_id, index)
            if record.value is None:
                found.pop(key, None)
            else:
                found[key] = decode_snapshot(bytes(record.value), "", index)
    return found


def append_record(broker: Broker, partition: int, key: bytes, value: bytes | None) -> None:
    """Append one record to a `__share_group_state` partition this broker leads: committed
    at once on a lone broker; in a cluster the followers fetch it (the write is answered
    without waiting for them, as the group coordinator's). Raises KafkaError
    (NOT_COORDINATOR) where this broker does not lead it."""
    log = broker.topics.get_log(SHARE_STATE_TOPIC, partition)
    replicas = getattr(broker, "replica_manager", None)
    own = replicas.leader_partition(SHARE_STATE_TOPIC, partition) if replicas else None
    if log is None or (replicas is not None and own is None):
        raise KafkaError(ErrorCode.NOT_COORDINATOR, f"{SHARE_STATE_TOPIC}-{partition} not led here")
    if own is not None:
        epoch = own.leader_epoch
    else:
        topic = broker.metadata.topics[SHARE_STATE_TOPIC]
        state = topic.partitions.get(partition)
        epoch = state.leader_epoch if state is not None else 0
    batch = bytearray(build_batch([(key, value, (), broker.group_coordinator.now_ms())]))
    result = log.append_as_leader(
        batch, [read_header(batch)], leader_epoch=epoch, log_append_time_ms=None
    )
    if own is not None:
        replicas.after_leader_append(own)
        broker.fetch_purgatory.wake(((SHARE_STATE_TOPIC, partition),))
    else:
        log.high_watermark = log.log_end_offset  # a lone broker is the whole ISR
    if result.flush_needed:
        broker.schedule_flush(log)


class ShareStateStore:
    """The share-partitions' snapshots in `__share_group_state`: read once, on first use,
    and written after every change."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.num_partitions: int = broker.config.offsets_topic_num_partitions
        self._loaded: dict[tuple[str, str, int], SharePartition] | None = None
        self._epochs: dict[tuple[str, str, int], int] = {}
        topic = broker.metadata.topics.get(SHARE_STATE_TOPIC)
        if topic is not None:
            self.num_partitions = len(topic.partitions)

    def _partition_for(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        return state_partition(group_id, topic_id, partition, self.num_partitions)

    def _topic_id(self, topic: str) -> uuid.UUID | None:
        state = self.broker.metadata.topics.get(topic)
        return state.topic_id if state is not None else None

    # -- reading ---------------------------------------------------------------------------

    def _replay(self) -> dict[tuple[str, str, int], SharePartition]:
        found: dict[tuple[str, str, int], SharePartition] = {}
        state = self.broker.metadata.topics.get(SHARE_STATE_TOPIC)
        if state is None or getattr(self.broker, "replica_manager", None) is not None:
            return found
        for p in range(len(state.partitions)):
            for (group_id, topic_id, partition), sp in replay_partition(self.broker, p).items():
                topic = self.broker.metadata.topic_by_id(topic_id)
                if topic is not None:
                    sp.topic = topic.name
                    found[(group_id, topic.name, partition)] = sp
        if found:
            logger.info("read the state of %d share-partition(s)", len(found))
        return found

    def load(self, group_id: str, topic: str, partition: int) -> SharePartition | None:
        if self._loaded is None:
            self._loaded = self._replay()
        return self._loaded.pop((group_id, topic, partition), None)

    def take_group(self, group_id: str) -> list[SharePartition]:
        """Every share-partition of `group_id` read back and not taken yet."""
        if self._loaded is None:
            self._loaded = self._replay()
        keys = [k for k in self._loaded if k[0] == group_id]
        return [self._loaded.pop(k) for k in keys]

    # -- writing ---------------------------------------------------------------------------

    def changed(self, group_id: str, sp: SharePartition) -> None:
        topic_id = self._topic_id(sp.topic)
        if topic_id is None:
            return
        key = (group_id, sp.topic, sp.partition)
        epoch = self._epochs[key] = self._epochs.get(key, -1) + 1
        self._append(
            self._partition_for(group_id, topic_id, sp.partition),
            encode_key(group_id, topic_id, sp.partition),
            encode_snapshot(sp, epoch),
        )
        sp.dirty = False

    def delete(self, group_id: str, sp: SharePartition) -> None:
        topic_id = self._topic_id(sp.topic)
        if topic_id is not None:
            self._append(
                self._partition_for(group_id, topic_id, sp.partition),
                encode_key(group_id, topic_id, sp.partition),
                None,
            )

    def _ensure_topic(self) -> None:
        if SHARE_STATE_TOPIC in self.broker.metadata.topics:
            return
        config = self.broker.config
        self.broker.topics.create_topic(
            SHARE_STATE_TOPIC,
            self.num_partitions,
            config.offsets_topic_replication_factor,
            {"cleanup.policy": "compact", "compression.type": "producer"},
            internal=True,
        )

    def _append(self, partition: int, key: bytes, value: bytes | None) -> None:
        if getattr(self.broker, "replica_manager", None) is not None:
            # A cluster: the share-partition's leader writes through the share
            # coordinator instead (`persister`, WriteShareGroupState).
            return
        self._ensure_topic()
        append_record(self.broker, partition, key, value)
