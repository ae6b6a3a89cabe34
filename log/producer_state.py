"""ProducerStateManager: idempotent producers' sequence numbers per partition.

For each producer id the partition remembers its epoch and the metadata of its last five
batches (Kafka's NUM_BATCHES_TO_RETAIN), so a retried batch is recognised and answered with
its original offsets, and a gap or a stale epoch is refused. The state is snapshotted to
`<offset, 20 digits>.snapshot` files in Kafka's format so it survives a restart:

    version int16 (1) | crc uint32 (CRC-32C of what follows) | count int32 | entries:
    producer_id int64 | epoch int16 | last_sequence int32 | last_offset int64 |
    offset_delta int32 | timestamp int64 | coordinator_epoch int32 | current_txn_first_offset int64

Transactions: an entry's `current_txn_first_offset` is the first offset of the producer's
open transaction in this partition (-1 when none), set by its first transactional batch and
cleared by the COMMIT or ABORT marker. `ongoing` maps producer id to that offset, so the
first unstable offset (the smallest of them) bounds the last stable offset (LSO). A marker
yields a `CompletedTxn`; an aborted one becomes an entry of the segment's `.txnindex`.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import struct
from pathlib import Path
from typing import NamedTuple

import attrs

from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.checkpoints import atomic_write
from trio_broker.protocol import crc

__all__ = [
    "BatchMetadata",
    "CompletedTxn",
    "ProducerAppendInfo",
    "ProducerStateEntry",
    "ProducerStateManager",
    "increment_sequence",
    "snapshot_path",
]

logger = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_VERSION = 1
_HEAD = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")
_INT32_MAX = 2**31 - 1


def snapshot_path(partition_dir: Path, offset: int) -> Path:
    return partition_dir / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def _decrement_sequence(sequence: int, decrement: int) -> int:
    # Sequences wrap from Int.MaxValue back to 0 (DefaultRecordBatch.decrementSequence).
    if sequence < decrement:
        return _INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def increment_sequence(sequence: int, increment: int) -> int:
    """The sequence `increment` after `sequence`, wrapping past Int.MaxValue to 0."""
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


class BatchMetadata(NamedTuple):
    """One retained batch of a producer. A named tuple: each idempotent produce makes one."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return _decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@attrs.frozen(kw_only=True)
class CompletedTxn:
    """A transaction ended by a marker: its offsets, from its first batch to the marker."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


@attrs.define
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: collections.deque[BatchMetadata] = attrs.Factory(
        functools.partial(collections.deque, maxlen=NUM_BATCHES_TO_RETAIN)
    )
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def add_batch(self, epoch: int, meta: BatchMetadata) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(meta)
        self.last_timestamp = meta.timestamp

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for meta in self.batches:
            if meta.last_seq == last_seq and meta.first_seq == first_seq:
                return meta
        return None


@attrs.define
class ProducerAppendInfo:
    """The pending update of one producer during one append: validated, then committed."""

    current: ProducerStateEntry
    updated: ProducerStateEntry

    def append_data_batch(
        self,
        *,
        epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        timestamp: int,
        validate: bool,
        is_transactional: bool = False,
        check_sequence: bool = True,
    ) -> None:
        """`check_sequence` is False for the coordinator's own transactional batches
        (TxnOffsetCommit records carry no sequence, as in Kafka's AppendOrigin.COORDINATOR)."""
        if validate:
            self._check_epoch(epoch)
            if check_sequence:
                self._check_sequence(epoch, first_seq)
            if not is_transactional and self.updated.current_txn_first_offset >= 0:
                raise KafkaError(
                    ErrorCode.INVALID_TXN_STATE,
                    f"expected a transactional write from producer {self.current.producer_id}",
                )
        if is_transactional and self.updated.current_txn_first_offset < 0:
            self.updated.current_txn_first_offset = first_offset
        self.updated.add_batch(
            epoch,
            BatchMetadata(
                last_seq=last_seq,
                last_offset=last_offset,
                offset_delta=last_offset - first_offset,
                timestamp=timestamp,
            ),
        )

    def append_end_txn_marker(
        self,
        *,
        commit: bool,
        epoch: int,
        coordinator_epoch: int,
        offset: int,
        timestamp: int,
        validate: bool = True,
    ) -> CompletedTxn:
        """A COMMIT or ABORT marker at `offset` (Kafka's appendEndTxnMarker)."""
        pid = self.current.producer_id
        if validate:
            self._check_epoch(epoch)
            if self.updated.coordinator_epoch > coordinator_epoch:
                raise KafkaError(
                    ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                    f"marker for producer {pid} from coordinator epoch {coordinator_epoch}, "
                    f"older than {self.updated.coordinator_epoch}",
                )
        first = self.updated.current_txn_first_offset
        updated = self.updated
        if epoch != updated.producer_epoch:
            updated.batches.clear()
            updated.producer_epoch = epoch
        updated.current_txn_first_offset = -1
        updated.coordinator_epoch = coordinator_epoch
        updated.last_timestamp = timestamp
        return CompletedTxn(
            producer_id=pid,
            first_offset=first if first >= 0 else offset,
            last_offset=offset,
            is_aborted=not commit,
        )

    def _check_epoch(self, epoch: int) -> None:
        if epoch < self.updated.producer_epoch:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"epoch {epoch} of producer {self.current.producer_id} is older than "
                f"the current epoch {self.updated.producer_epoch}",
            )

    def _check_sequence(self, epoch: int, first_seq: int) -> None:
        pid = self.current.producer_id
        if epoch != self.updated.producer_epoch:
            if first_seq != 0 and self.updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise KafkaError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"invalid sequence {first_seq} for new epoch {epoch} of producer {pid}",
                )
            return
        if self.updated.batches:
            last_seq = self.updated.last_seq
        elif epoch == self.current.producer_epoch:
            last_seq = self.current.last_seq
        else:
            last_seq = NO_SEQUENCE
        # No known epoch (state expired or deleted): accept any sequence, as Kafka does.
        if self.current.producer_epoch != NO_PRODUCER_EPOCH and not _in_sequence(
            last_seq, first_seq
        ):
            raise KafkaError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"out of order sequence for producer {pid}: {first_seq} (incoming), "
                f"{last_seq} (current)",
            )


class ProducerStateManager:
    def __init__(self, partition_dir: str | os.PathLike[str]) -> None:
        self.partition_dir = (
            partition_dir if isinstance(partition_dir, Path) else Path(partition_dir)
        )
        self.producers: dict[int, ProducerStateEntry] = {}
        # The offset up to which the state reflects the log (Kafka's mapEndOffset).
        self.map_end_offset = 0
        self.last_snapshot_offset = 0
        # producer id -> first offset of its open transaction in this partition.
        self.ongoing: dict[int, int] = {}
        # The partition dir's names as the loader listed them, used (once) instead of a
        # listing of its own by the first list_snapshots.
        self.listing: list[str] | None = None

    # -- appends ---------------------------------------------------------------------------

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def prepare_update(self, producer_id: int) -> ProducerAppendInfo:
        current = self.producers.get(producer_id) or ProducerStateEntry(producer_id)
        updated = ProducerStateEntry(
            producer_id,
            current.producer_epoch,
            coordinator_epoch=current.coordinator_epoch,
            last_timestamp=current.last_timestamp,
            current_txn_first_offset=current.current_txn_first_offset,
        )
        return ProducerAppendInfo(current=current, updated=updated)

    def update(self, info: ProducerAppendInfo) -> None:
        """Commit a validated update: the new batches join the retained ones."""
        updated = info.updated
        pid = updated.producer_id
        if updated.current_txn_first_offset >= 0:
            self.ongoing[pid] = updated.current_txn_first_offset
        else:
            self.ongoing.pop(pid, None)
        current = self.producers.get(pid)
        if current is None or current.producer_epoch != updated.producer_epoch:
            self.producers[pid] = updated
            return
        for meta in updated.batches:
            current.batches.append(meta)
        current.last_timestamp = updated.last_timestamp
        current.current_txn_first_offset = updated.current_txn_first_offset
        current.coordinator_epoch = updated.coordinator_epoch

    # -- transactions ----------------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, None when none is open."""
        return min(self.ongoing.values()) if self.ongoing else None

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO once `completed` is done: the next open transaction's first offset, or
        the offset after the marker (Kafka's ProducerStateManager.lastStableOffset)."""
        others = [o for p, o in self.ongoing.items() if p != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> None:
        expired = [
            pid
            for pid, entry in self.producers.items()
            if entry.current_txn_first_offset < 0 and now_ms - entry.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.producers.clear()
        self.ongoing.clear()
        for path in self.list_snapshots():
            path.unlink(missing_ok=True)
        self.map_end_offset = self.last_snapshot_offset = offset

    # -- snapshots -------------------------------------------------------------------------

    def list_snapshots(self) -> list[Path]:
        names, self.listing = self.listing, None
        if names is None:
            names = os.listdir(self.partition_dir)
        offsets = sorted(
            int(stem)
            for name in names
            if name.endswith(SNAPSHOT_SUFFIX) and (stem := name[: -len(SNAPSHOT_SUFFIX)]).isdigit()
        )
        return [snapshot_path(self.partition_dir, offset) for offset in offsets]

    def take_snapshot(self, *, sync: bool = True) -> Path | None:
        """Write the state as of map_end_offset, if it moved since the last snapshot."""
        if (
            self.map_end_offset <= self.last_snapshot_offset
            and snapshot_path(self.partition_dir, self.map_end_offset).exists()
        ):
            return None
        body = bytearray(struct.pack(">i", len(self.producers)))
        for entry in self.producers.values():
            meta = entry.batches[-1] if entry.batches else None
            body += _ENTRY.pack(
                entry.producer_id,
                entry.producer_epoch,
                meta.last_seq if meta else NO_SEQUENCE,
                meta.last_offset if meta else -1,
                meta.offset_delta if meta else 0,
                entry.last_timestamp,
                entry.coordinator_epoch,
                entry.current_txn_first_offset,
            )
        head = struct.pack(">hI", _SNAPSHOT_VERSION, crc.crc32c(bytes(body)))
        path = snapshot_path(self.partition_dir, self.map_end_offset)
        atomic_write(path, head + body, sync=sync)
        self.last_snapshot_offset = self.map_end_offset
        return path

    def load_latest_snapshot(self, max_offset: int, min_offset: int = 0) -> int | None:
        """Replace the state with the newest valid snapshot at or below `max_offset`.

        Returns its offset (the map end offset to replay from), or None if there is none.
        Snapshots above `max_offset` (a truncated log) or corrupt ones are deleted.
        """
        self.producers.clear()
        self.ongoing.clear()
        for path in reversed(self.list_snapshots()):
            offset = int(path.stem)
            if offset > max_offset or offset < min_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                self.producers = _read_snapshot(path)
            except (ValueError, struct.error) as exc:
                logger.warning("deleting corrupt producer snapshot %s: %s", path, exc)
                path.unlink(missing_ok=True)
                continue
            self.map_end_offset = self.last_snapshot_offset = offset
            self.ongoing = {
                pid: e.current_txn_first_offset
                for pid, e in self.producers.items()
                if e.current_txn_first_offset >= 0
            }
            return offset
        return None

    def delete_snapshots_before(self, offset: int) -> None:
        for path in self.list_snapshots():
            if int(path.stem) < offset:
                path.unlink(missing_ok=True)


def _read_snapshot(path: Path) -> dict[int, ProducerStateEntry]:
    data = path.read_bytes()
    version, stored_crc, count = _HEAD.unpack_from(data, 0)
    if version != _SNAPSHOT_VERSION:
        raise ValueError(f"unknown snapshot version {version}")
    if crc.crc32c(data[6:]) != stored_crc:
        raise ValueError("snapshot CRC mismatch")
    if len(data) != _HEAD.size + count * _ENTRY.size:
        raise ValueError("snapshot size does not match its entry count")
    producers = {}
    for fields in _ENTRY.iter_unpack(data[_HEAD.size :]):
        pid, epoch, last_seq, last_offset, offset_delta, ts, coord_epoch, txn_first = fields
        entry = ProducerStateEntry(
            pid,
            epoch,
            coordinator_epoch=coord_epoch,
            last_timestamp=ts,
            current_txn_first_offset=txn_first,
        )
        if last_offset >= 0:
            entry.batches.append(
                BatchMetadata(
                    last_seq=last_seq,
                    last_offset=last_offset,
                    offset_delta=offset_delta,
                    timestamp=ts,
                )
            )
        producers[pid] = entry
    return producers
