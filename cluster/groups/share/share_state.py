"""Durable share-partition state: `__share_group_state`, as Kafka's share coordinator keeps it.

Every change to a share-partition (an acquisition, an acknowledgement, a release, a lock
that ran out) is written as a record keyed by (group, topic id, partition): a ShareSnapshot
(the whole state), then ShareUpdate records, a new snapshot once
`share.coordinator.snapshot.update.records.per.snapshot` updates (Kafka's 500) followed
the last one (`StateWriter`):

    key    int16 record type (0 ShareSnapshot, 1 ShareUpdate), then the non-flexible
           ShareSnapshotKey / ShareUpdateKey v0: GroupId string, TopicId uuid,
           Partition int32
    value  int16 version 0, then the flexible ShareSnapshotValue v0: SnapshotEpoch int32,
           StateEpoch int32, LeaderEpoch int32, StartOffset int64, CreateTimestamp int64,
           WriteTimestamp int64, StateBatches compact array of (FirstOffset int64,
           LastOffset int64, DeliveryState int8, DeliveryCount int16, tags), tags; or
           ShareUpdateValue v0: SnapshotEpoch int32 (the snapshot's it follows),
           LeaderEpoch int32, StartOffset int64, StateBatches, tags

(the layout of Kafka 4.1's share-coordinator message definitions; the early-access layout,
with a uint16 SnapshotEpoch and no timestamps, which this broker wrote before, is read
too: a value is read in the layout that reads it whole, and the two differ in length by
an amount that no list of fewer than 16,000 batches makes up). As in Kafka, the
batches hold only the states a restart keeps: an acquired record is written as available
with its delivery count, so it is delivered again after a restart; acknowledged and
archived ones are not. An update carries the batches that differ, laid over the snapshot
it follows. The topic is compacted here (Kafka deletes, and prunes what precedes each
key's snapshot), which keeps a key's last update only: so each update carries the
difference from its snapshot, not from the previous update. A restart reads the last
snapshot of each key with the last update of the same snapshot epoch after it. A deleted
share-partition's keys (both types) get tombstones.

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
from typing import TYPE_CHECKING, Any

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
    "StateWriter",
    "decode_snapshot",
    "decode_snapshot_value",
    "decode_update_value",
    "difference",
    "encode_snapshot",
    "encode_update",
    "overlay",
    "parse_share_key",
    "replay_partition",
    "share_key",
    "state_partition",
]

SHARE_STATE_TOPIC = "__share_group_state"
SNAPSHOT_TYPE = 0
UPDATE_TYPE = 1
_KEY_HEAD = struct.Struct(">hh")
# version, snapshot epoch, state epoch, leader epoch, start offset, create and write times
_SNAPSHOT_HEAD = struct.Struct(">hiiiqqq")
_UPDATE_HEAD = struct.Struct(">hiiq")  # version, snapshot epoch, leader epoch, start offset
# The early-access layouts (read only): uint16 snapshot epoch, no timestamps.
_EARLY_SNAPSHOT_HEAD = struct.Struct(">hHiiq")
_EARLY_UPDATE_HEAD = struct.Struct(">hHiq")
_BATCH = struct.Struct(">qqbh")
PER_SNAPSHOT = "share.coordinator.snapshot.update.records.per.snapshot"

Batch = tuple[int, int, int, int]  # first offset, last offset, delivery state, count


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


def encode_key(
    group_id: str, topic_id: uuid.UUID, partition: int, kind: int = SNAPSHOT_TYPE
) -> bytes:
    group = group_id.encode()
    return _KEY_HEAD.pack(kind, len(group)) + group + topic_id.bytes + struct.pack(">i", partition)


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


def written_batches(sp: SharePartition) -> list[Batch]:
    """The batches a record keeps of a share-partition (acquired ones as available)."""
    batches = []
    for span in sp.spans:
        state = RecordState.AVAILABLE if span.state is RecordState.ACQUIRED else span.state
        batches.append((span.first, span.last, int(state), span.delivery_count))
    if sp.end_offset > sp.start_offset and not batches:
        batches.append((sp.start_offset, sp.end_offset - 1, int(RecordState.ARCHIVED), 0))
    return batches


def _encode_batches(buf: bytearray, batches: list[Batch]) -> bytes:
    write_uvarint(buf, len(batches) + 1)
    for first, last, state, count in batches:
        buf += _BATCH.pack(first, last, state, count)
        buf.append(0)  # no tagged fields
    buf.append(0)
    return bytes(buf)


def _decode_batches(value: bytes, pos: int) -> tuple[list[Batch], int]:
    count, pos = read_uvarint(value, pos)
    batches = []
    for _ in range(count - 1):
        batches.append(_BATCH.unpack_from(value, pos))
        pos += _BATCH.size
        pos = _skip_tags(value, pos)
    return batches, _skip_tags(value, pos)


def _skip_tags(value: bytes, pos: int) -> int:
    tags, pos = read_uvarint(value, pos)
    for _ in range(tags):
        _, pos = read_uvarint(value, pos)
        size, pos = read_uvarint(value, pos)
        pos += size
    return pos


def _parse(value: bytes, heads: tuple[struct.Struct, ...]) -> tuple[tuple[int, ...], list[Batch]]:
    """The head fields and batches of a value, in the first layout that reads it whole."""
    for head in heads:
        try:
            fields = head.unpack_from(value)
            batches, end = _decode_batches(value, head.size)
        except (struct.error, IndexError, ValueError):
            continue
        if end == len(value):
            return fields, batches
    raise ValueError("not a share state value of a known layout")


def decode_snapshot_value(value: bytes) -> tuple[int, int, int, list[Batch]]:
    """(snapshot epoch, state epoch, start offset, batches) of a ShareSnapshot value."""
    fields, batches = _parse(value, (_SNAPSHOT_HEAD, _EARLY_SNAPSHOT_HEAD))
    return fields[1], fields[2], fields[4], batches


def decode_update_value(value: bytes) -> tuple[int, int, list[Batch]]:
    """(snapshot epoch, start offset, batches) of a ShareUpdate value."""
    fields, batches = _parse(value, (_UPDATE_HEAD, _EARLY_UPDATE_HEAD))
    return fields[1], fields[3], batches


def encode_snapshot(
    sp: SharePartition, snapshot_epoch: int, leader_epoch: int = 0, now_ms: int = 0
) -> bytes:
    head = _SNAPSHOT_HEAD.pack(
        0, snapshot_epoch, sp.state_epoch, leader_epoch, sp.start_offset, now_ms, now_ms
    )
    return _encode_batches(bytearray(head), written_batches(sp))


def encode_update(
    snapshot_epoch: int, leader_epoch: int, start_offset: int, batches: list[Batch]
) -> bytes:
    head = _UPDATE_HEAD.pack(0, snapshot_epoch, leader_epoch, start_offset)
    return _encode_batches(bytearray(head), batches)


def build_partition(
    topic: str, partition: int, start: int, state_epoch: int, batches: list[Batch]
) -> SharePartition:
    sp = SharePartition(topic, partition, start, state_epoch=state_epoch)
    sp.spans = [
        Span(first, last, RecordState(state), count)
        for first, last, state, count in batches
        if last >= start
    ]
    if sp.spans and sp.spans[0].first < start:
        sp.spans[0].first = start
    sp.end_offset = max([s.last + 1 for s in sp.spans], default=start)
    sp._advance()
    return sp


def decode_snapshot(value: bytes, topic: str, partition: int) -> SharePartition:
    _, state_epoch, start, batches = decode_snapshot_value(value)
    return build_partition(topic, partition, start, state_epoch, batches)


def _pieces(base: list[Batch], first: int, last: int) -> list[tuple[int, int, Batch | None]]:
    """[first, last] cut where `base` (sorted, apart) changes: (from, to, base batch or None)."""
    out: list[tuple[int, int, Batch | None]] = []
    at = first
    for b in base:
        if b[1] < at or b[0] > last:
            continue
        if b[0] > at:
            out.append((at, b[0] - 1, None))
            at = b[0]
        end = min(b[1], last)
        out.append((at, end, b))
        at = end + 1
        if at > last:
            break
    if at <= last:
        out.append((at, last, None))
    return out


def difference(base: list[Batch], start: int, end: int, new: list[Batch]) -> list[Batch] | None:
    """The batches of `new` (a share-partition's state from `start` to `end`) that differ
    from `base`: what an update laid over `base` carries. None when an update cannot say
    it (`new` leaves a gap, or `base` reaches past `end`): a snapshot is written then."""
    at = start
    for first, last, _, _ in new:
        if first != at or last < first:
            return None
        at = last + 1
    if at != end and new or (not new and end != start):
        return None
    if base and base[-1][1] >= end:
        return None
    out: list[Batch] = []
    for first, last, state, count in new:
        for lo, hi, old in _pieces(base, first, last):
            if old is not None and (old[2], old[3]) == (state, count):
                continue
            if out and out[-1][1] + 1 == lo and out[-1][2:] == (state, count):
                out[-1] = (out[-1][0], hi, state, count)
            else:
                out.append((lo, hi, state, count))
    return out


def overlay(base: list[Batch], start: int, batches: list[Batch]) -> list[Batch]:
    """`base` with `batches` laid over it, from `start` on (an update read back)."""
    out: list[Batch] = []
    for b in base:
        pieces = [(b[0], b[1])]
        for first, last, _, _ in batches:
            cut = []
            for lo, hi in pieces:
                if last < lo or first > hi:
                    cut.append((lo, hi))
                    continue
                if lo < first:
                    cut.append((lo, first - 1))
                if hi > last:
                    cut.append((last + 1, hi))
            pieces = cut
        out.extend((lo, hi, b[2], b[3]) for lo, hi in pieces)
    out.extend(batches)
    out.sort()
    return [(max(f, start), last, st, c) for f, last, st, c in out if last >= start]


class StateWriter:
    """The records of each share-partition's writes (`key` is any hashable name of it):
    a ShareSnapshot, then ShareUpdates, a snapshot again once `per_snapshot()` updates
    followed the last (0: every write a snapshot), or when an update cannot say it."""

    def __init__(self, per_snapshot: Any, now_ms: Any = lambda: 0) -> None:
        self.per_snapshot = per_snapshot
        self.now_ms = now_ms
        self._base: dict[Any, tuple[int, list[Batch]]] = {}  # snapshot epoch, its batches
        self._updates: dict[Any, int] = {}
        self._epochs: dict[Any, int] = {}  # the last snapshot epoch, carried on

    def record(
        self, key: Any, sp: SharePartition, leader_epoch: int = 0, *, snapshot: bool = False
    ) -> tuple[int, bytes]:
        """(record type, value) of one write of `sp`."""
        batches = written_batches(sp)
        base = self._base.get(key)
        if base is not None and not snapshot and self._updates[key] < int(self.per_snapshot()):
            diff = difference(base[1], sp.start_offset, sp.end_offset, batches)
            if diff is not None:
                self._updates[key] += 1
                return UPDATE_TYPE, encode_update(base[0], leader_epoch, sp.start_offset, diff)
        epoch = self._epochs[key] = (self._epochs.get(key, -1) + 1) % 2**31
        self._base[key] = (epoch, batches)
        self._updates[key] = 0
        return SNAPSHOT_TYPE, encode_snapshot(sp, epoch, leader_epoch, int(self.now_ms()))

    def forget(self, key: Any, snapshot_epoch: int | None = None) -> None:
        """The next write of `key` is a snapshot (after its snapshot epoch, if given)."""
        self._base.pop(key, None)
        self._updates.pop(key, None)
        if snapshot_epoch is not None:
            self._epochs[key] = snapshot_epoch


def replay_partition(
    broker: Broker, partition: int, epochs: dict[Any, int] | None = None
) -> dict[tuple[str, uuid.UUID, int], SharePartition]:
    """The state of every key in one `__share_group_state` partition of this broker's log
    (its last snapshot, with the last update of that snapshot after it), by (group, topic
    id, partition); the share-partitions' `topic` is left empty (the caller names it).
    `epochs`, if given, receives each key's last snapshot epoch."""
    bases: dict[tuple[str, uuid.UUID, int], tuple[int, int, int, list[Batch]]] = {}
    updates: dict[tuple[str, uuid.UUID, int], tuple[int, list[Batch]]] = {}
    log = broker.topics.get_log(SHARE_STATE_TOPIC, partition)
    if log is None:
        return {}
    for batch in iter_log_batches(log):
        for record in iter_records(batch):
            decoded = decode_key(record.key or b"")
            if decoded is None or decoded[0] not in (SNAPSHOT_TYPE, UPDATE_TYPE):
                continue
            kind, group_id, topic_id, index = decoded
            key = (group_id, topic_id, index)
            value = bytes(record.value) if record.value is not None else None
            try:
                if kind == SNAPSHOT_TYPE:
                    updates.pop(key, None)
                    if value is None:
                        bases.pop(key, None)
                    else:
                        bases[key] = decode_snapshot_value(value)
                elif value is None:
                    updates.pop(key, None)
                else:
                    epoch, start, diff = decode_update_value(value)
                    if key in bases and bases[key][0] == epoch:
                        updates[key] = (start, diff)
            except ValueError:
                logger.warning(
                    "%s-%d: unreadable share state of %s", SHARE_STATE_TOPIC, partition, key
                )
    found: dict[tuple[str, uuid.UUID, int], SharePartition] = {}
    for key, (epoch, state_epoch, start, batches) in bases.items():
        if key in updates:
            start, diff = updates[key]
            batches = overlay(batches, start, diff)
        found[key] = build_partition("", key[2], start, state_epoch, batches)
        if epochs is not None:
            epochs[key] = epoch
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
        self.writer = StateWriter(
            lambda: broker.config.value(PER_SNAPSHOT), lambda: broker.group_coordinator.now_ms()
        )
        self._snapshot_epochs: dict[Any, int] = {}
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
            epochs = self._snapshot_epochs
            for (group_id, topic_id, partition), sp in replay_partition(
                self.broker, p, epochs
            ).items():
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
        key = (group_id, topic_id, sp.partition)
        if key in self._snapshot_epochs:  # read back at start: the epochs carry on
            self.writer.forget(key, self._snapshot_epochs.pop(key))
        kind, value = self.writer.record(key, sp)
        self._append(
            self._partition_for(group_id, topic_id, sp.partition),
            encode_key(group_id, topic_id, sp.partition, kind),
            value,
        )
        sp.dirty = False

    def delete(self, group_id: str, sp: SharePartition) -> None:
        topic_id = self._topic_id(sp.topic)
        if topic_id is not None:
            self.writer.forget((group_id, topic_id, sp.partition))
            for kind in (UPDATE_TYPE, SNAPSHOT_TYPE):
                self._append(
                    self._partition_for(group_id, topic_id, sp.partition),
                    encode_key(group_id, topic_id, sp.partition, kind),
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
