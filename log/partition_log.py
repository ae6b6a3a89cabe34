"""PartitionLog: one partition's log on disk (Kafka's UnifiedLog, local part only).

The produce path calls `append_as_leader`, the fetch path `read`, which hands back file
regions for sendfile; ListOffsets, DeleteRecords and OffsetForLeaderEpoch have their own
methods. Loading and crash recovery live in `trio_broker.log.loader`, the read side (fetch
and ListOffsets lookups) in `trio_broker.log.reader`.

Threading: everything runs on the Trio thread except `flush`, which the LogManager runs in a
worker thread; it only fsyncs file descriptors and advances the recovery point.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log import reader
from trio_broker.log.checkpoints import fsync_dir, write_partition_metadata
from trio_broker.log.config import LogConfig, TimestampType
from trio_broker.log.file_cache import DESCRIPTOR_ERRNOS
from trio_broker.log.leader_epoch import LeaderEpochCache
from trio_broker.log.producer_state import (
    CompletedTxn,
    ProducerAppendInfo,
    ProducerStateManager,
    increment_sequence,
)
from trio_broker.log.segment import LogSegment, SegmentStateUnknown
from trio_broker.log.transactions import (
    aborted_by,
    end_txn_marker,
    replay_data_batch,
)
from trio_broker.protocol.records import (
    BatchHeader,
    set_log_append_time,
    set_max_timestamp,
    set_offset_and_epoch,
)
from trio_broker.protocol.records import (
    TimestampType as BatchTimestampType,
)

__all__ = ["AppendResult", "PartitionLog", "wall_clock_ms"]

logger = logging.getLogger(__name__)

# Errors after which the log is exactly as it was: the request fails, the log dir stays up.
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_RECOVERABLE_ERRNOS = _FULL_ERRNOS | DESCRIPTOR_ERRNOS


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class AppendResult(NamedTuple):
    """What an append did. A named tuple, not a frozen attrs class: every produce builds
    one, and a tuple is built in one step (a frozen instance sets each field in turn)."""

    first_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 for CreateTime topics
    log_start_offset: int
    record_count: int = 0
    duplicate: bool = False  # a retried idempotent batch: nothing was written
    flush_needed: bool = False  # flush.messages reached: run flush() in a worker thread


class PartitionLog:
    """The segments of `<log.dir>/<topic>-<partition>/` and the state kept beside them."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        now_ms: Callable[[], int] = wall_clock_ms,
        topic_id: uuid.UUID | None = None,
        lazy_epochs: bool = False,
    ) -> None:
        """An empty, unloaded log; use `trio_broker.log.loader.load_log` to open one.
        `lazy_epochs`: the leader epoch checkpoint is read on first use (LeaderEpochCache)."""
        self.dir = directory if isinstance(directory, Path) else Path(directory)
        self.topic = topic
        self.partition = partition
        self.config = config
        self.now_ms = now_ms
        self.topic_id = topic_id
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self._high_watermark = 0
        self.recovery_point = 0
        self.leader_epoch_cache = LeaderEpochCache(self.dir, lazy=lazy_epochs)
        self.producer_state = ProducerStateManager(self.dir)
        self.last_flush_ms = now_ms()
        self.unflushed_messages = 0
        # Segments renamed to .deleted, with the time their files may be closed and removed.
        self.pending_deletes: list[tuple[int, LogSegment]] = []
        self.closed = False
        # Set when this log's directory failed I/O (see LogManager.mark_dir_offline): the
        # log answers KAFKA_STORAGE_ERROR and writes nothing more until a restart.
        self.offline = False
        # Called with (log dir, error) on an I/O error that leaves the log in an unknown
        # state (Kafka's LogDirFailureChannel); the LogManager takes the dir offline.
        self.on_dir_failure: Callable[[Path, OSError], None] | None = None
        # Called with (log dir, error) when a write failed for want of space (ENOSPC,
        # EDQUOT) and was undone: the log stays online; the LogManager tells listeners.
        self.on_dir_full: Callable[[Path, OSError], None] | None = None
        # Counts truncations, so a copy of the log (a log dir move) sees one happen.
        self.truncations = 0

    def __repr__(self) -> str:
        return f"<PartitionLog {self.topic}-{self.partition} [{self.log_start_offset}, {self.log_end_offset})>"

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    # -- offsets ---------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        self._high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch

    def _check_open(self) -> None:
        if self.offline:
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"log {self.name} is in an offline log dir"
            )
        if self.closed:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"log {self.name} is closed")

    def _storage_error(self, exc: OSError, what: str) -> KafkaError:
        """The KafkaError to answer for an OSError while `what`.

        ENOSPC / EDQUOT from a write that was undone (LogSegment.append, a roll that did
        not happen) leaves the log exactly as it was: the client gets KAFKA_STORAGE_ERROR
        (retriable) and the log stays online, so it heals on its own once space is freed.
        Kafka takes the whole log dir offline on any IOException, until a restart; with a
        single log dir that turns a full-disk blip into an outage that needs an operator,
        while the undo has made the error harmless. Anything else (EIO, an undo that
        failed: SegmentStateUnknown) means the files can no longer be trusted, and the
        log dir goes offline, as in Kafka. Running out of descriptors (EMFILE, ENFILE:
        a segment file that could not be opened) is no disk failure either: nothing was
        written, this request fails and the log stays online.
        """
        recoverable = exc.errno in _RECOVERABLE_ERRNOS and not isinstance(exc, SegmentStateUnknown)
        if recoverable:
            logger.warning("log %s: %s failed, nothing written: %s", self.name, what, exc)
            if self.on_dir_full is not None and exc.errno in _FULL_ERRNOS:
                self.on_dir_full(self.dir.parent, exc)
        else:
            logger.error("log %s: %s failed: %s", self.name, what, exc)
            if self.on_dir_failure is not None:
                self.on_dir_failure(self.dir.parent, exc)
            else:
                self.offline = True
        return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{what} failed on {self.name}: {exc}")

    # -- segments --------------------------------------------------------------------------

    def _new_segment(self, base_offset: int) -> LogSegment:
        segment = LogSegment(
            self.dir,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.segment_index_bytes,
            created_ms=self.now_ms(),
        )
        self._add_segment(segment)
        return segment

    def _add_segment(self, segment: LogSegment) -> None:
        slot = bisect.bisect_left(self._bases, segment.base_offset)
        self.segments.insert(slot, segment)
        self._bases.insert(slot, segment.base_offset)

    def _floor_slot(self, offset: int) -> int:
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (Kafka's UnifiedLog.roll)."""
        self._check_open()
        new_offset = max(expected_next_offset or 0, self.log_end_offset)
        active = self.active_segment
        if active.base_offset == new_offset and active.size == 0:
            return active
        if new_offset in self._bases:
            raise RuntimeError(
                f"segment with base offset {new_offset} already exists in {self.name}"
            )
        active.on_become_inactive()
        self.producer_state.update_map_end_offset(new_offset)
        self.producer_state.take_snapshot(sync=False)
        try:
            segment = self._new_segment(new_offset)
        except OSError:
            # A full disk: no half-made segment may stay behind to be loaded at restart.
            # The old one stays active (its trimmed indexes make the next append retry).
            for suffix in (".log", ".index", ".timeindex"):
                path = self.dir / f"{new_offset:020d}{suffix}"
                with contextlib.suppress(OSError):
                    if path.exists() and (suffix != ".log" or path.stat().st_size == 0):
                        path.unlink()
            raise
        logger.info("rolled new log segment for %s at offset %s", self.name, new_offset)
        return segment

    def _maybe_roll(
        self, size: int, max_timestamp: int, max_offset: int, now: int, at: int | None = None
    ) -> None:
        active = self.segments[-1]
        if active.size == 0:
            return  # a fresh segment is as good as it gets; Kafka would recreate it
        config = self.config
        if active.should_roll(
            config.segment_bytes,
            config.segment_ms - config.segment_jitter_ms,
            size,
            max_timestamp,
            max_offset,
            now,
        ):
            self.roll(self.log_end_offset if at is None else at)

    # -- append ----------------------------------------------------------------------------

    def append_as_leader(
        self,
        records: bytearray | memoryview,
        headers: list[BatchHeader],
        *,
        leader_epoch: int,
        log_append_time_ms: int | None = None,
        from_coordinator: bool = False,
    ) -> AppendResult:
        """Assign offsets to already validated batches and append them.

        `headers` describe the batches of `records` in order, as read before any rewrite.
        For a LogAppendTime topic every batch is stamped with `log_append_time_ms` (the
        current time when None). Raises KafkaError for producer-state violations.
        `from_coordinator`: the broker's own batches (markers, transactional offset
        commits), whose sequence numbers are not checked.
        """
        self._check_open()
        view = records if isinstance(records, memoryview) else memoryview(records)
        now = self.now_ms()
        append_time = -1
        if self.config.message_timestamp_type is TimestampType.LOG_APPEND_TIME:
            append_time = now if log_append_time_ms is None else log_append_time_ms
        if not headers:
            return AppendResult(
                first_offset=-1,
                last_offset=-1,
                log_append_time_ms=append_time,
                log_start_offset=self.log_start_offset,
            )

        # Plan offsets and check producer state before touching anything.
        planned: list[tuple[int, BatchHeader, int, int, int]] = []
        updates: dict[int, ProducerAppendInfo] = {}
        offset = self.log_end_offset
        position = 0
        record_count = 0
        completed: list[CompletedTxn] = []
        for header in headers:
            base, last = offset, offset + header.last_offset_delta
            max_ts = append_time if append_time >= 0 else header.max_timestamp
            if header.producer_id >= 0 and header.is_control:
                info = updates.get(header.producer_id)
                if info is None:
                    info = updates[header.producer_id] = self.producer_state.prepare_update(
                        header.producer_id
                    )
                done = end_txn_marker(info, view[position : position + header.size], base, True)
                if done is not None:
                    completed.append(done)
            elif header.producer_id >= 0:
                entry = self.producer_state.last_entry(header.producer_id)
                last_seq = increment_sequence(header.base_sequence, header.last_offset_delta)
                if entry is not None and header.base_sequence >= 0:
                    duplicate = entry.find_duplicate(
                        header.producer_epoch, header.base_sequence, last_seq
                    )
                    if duplicate is not None:
                        return AppendResult(
                            first_offset=duplicate.first_offset,
                            last_offset=duplicate.last_offset,
                            log_append_time_ms=duplicate.timestamp,
                            log_start_offset=self.log_start_offset,
                            duplicate=True,
                        )
                info = updates.get(header.producer_id)
                if info is None:
                    info = updates[header.producer_id] = self.producer_state.prepare_update(
                        header.producer_id
                    )
                info.append_data_batch(
                    epoch=header.producer_epoch,
                    first_seq=header.base_sequence,
                    last_seq=last_seq,
                    first_offset=base,
                    last_offset=last,
                    timestamp=max_ts,
                    validate=True,
                    is_transactional=header.is_transactional,
                    check_sequence=not from_coordinator,
                )
            planned.append((position, header, base, last, max_ts))
            position += header.size
            record_count += header.record_count
            offset = last + 1
        if position != len(view):
            raise ValueError(f"batch headers cover {position} bytes of {len(view)}")

        first_offset, last_offset = planned[0][2], planned[-1][3]
        index_entries = []
        for pos, header, base, last, max_ts in planned:
            set_offset_and_epoch(view, pos, base, header.batch_length, leader_epoch)
            if append_time >= 0:
                set_log_append_time(view, pos, append_time)
            elif header.is_log_append_time:
                set_max_timestamp(view, pos, BatchTimestampType.CREATE_TIME, header.max_timestamp)
            index_entries.append((last, max_ts, header.size))
        aborted = aborted_by(self, updates.values(), completed)
        try:
            max_ts = planned[0][4] if len(planned) == 1 else max(p[4] for p in planned)
            self._maybe_roll(len(view), max_ts, last_offset, now)
            # The commit point: all or nothing, the `.txnindex` entries of its ABORT markers
            # included (LogSegment.append undoes a failed write).
            self.active_segment.append(view, index_entries, aborted)
        except OSError as exc:
            raise self._storage_error(exc, "append") from exc

        epochs = ((leader_epoch, first_offset),) if leader_epoch >= 0 else ()
        return self._appended(updates, epochs, first_offset, last_offset, record_count, append_time)

    def append_as_follower(self, records: bytearray | memoryview) -> AppendResult:
        """Append the leader's batches unchanged: their offsets, partition leader epochs and
        timestamps are the leader's (Kafka's appendAsFollower).

        Each batch's header and CRC are checked (a follower must not store what the wire
        damaged), nothing inside a data batch is read. Batches wholly below the log end
        offset (a fetch answered twice) are skipped; a partial batch at the end of the data
        (a leader that cut its answer at the size limit) is left for the next fetch. The
        producer state, leader epoch cache, indexes and transaction index follow as on the
        leader. Raises InvalidRecords for bad data, KafkaError for storage errors.
        """
        from trio_broker.protocol.records import iter_batches, validate_batches

        self._check_open()
        view = records if isinstance(records, memoryview) else memoryview(records)
        # Whole batches only; then the CRC and header checks of replication.
        end = 0
        skip = 0
        for pos, header in iter_batches(view):
            if header.last_offset < self.log_end_offset:
                skip = pos + header.size
            end = pos + header.size
        view = view[skip:end]
        if not view:
            return AppendResult(
                first_offset=-1,
                last_offset=-1,
                log_append_time_ms=-1,
                log_start_offset=self.log_start_offset,
            )
        headers = validate_batches(view, from_client=False)
        if headers[0].base_offset < self.log_end_offset:
            from trio_broker.protocol.records import InvalidRecords

            raise InvalidRecords(
                ErrorCode.CORRUPT_MESSAGE,
                f"batch at offset {headers[0].base_offset} overlaps the log end "
                f"{self.log_end_offset} of {self.name}",
            )
        updates: dict[int, ProducerAppendInfo] = {}
        completed: list[tuple[CompletedTxn, int]] = []  # with the batch's index
        index_entries = []
        epochs: list[tuple[int, int]] = []
        position = 0
        record_count = 0
        latest = self.leader_epoch_cache.latest_epoch
        for i, header in enumerate(headers):
            if header.producer_id >= 0:
                info = updates.get(header.producer_id)
                if info is None:
                    info = updates[header.producer_id] = self.producer_state.prepare_update(
                        header.producer_id
                    )
                if header.is_control:
                    done = end_txn_marker(
                        info, view[position : position + header.size], header.base_offset, False
                    )
                    if done is not None:
                        completed.append((done, i))
                else:
                    replay_data_batch(info, header)
            epoch = header.partition_leader_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                epochs.append((epoch, header.base_offset))
                latest = epoch
            index_entries.append((header.last_offset, header.max_timestamp, header.size))
            position += header.size
            record_count += header.record_count
        first_offset, last_offset = headers[0].base_offset, headers[-1].last_offset
        now = self.now_ms()
        aborted = aborted_by(self, updates.values(), [txn for txn, _ in completed])
        try:
            # A batch that would not fit the active segment, or offsets too far from its
            # base for its index, starts a new one at that batch.
            self._maybe_roll(
                len(view), max(h.max_timestamp for h in headers), last_offset, now, first_offset
            )
            self.active_segment.append(view, index_entries, aborted)
        except OSError as exc:
            raise self._storage_error(exc, "append") from exc
        return self._appended(
            updates,
            epochs,
            first_offset,
            last_offset,
            record_count,
            -1,
        )

    def _appended(
        self,
        updates: dict[int, ProducerAppendInfo],
        epochs: Iterable[tuple[int, int]],
        first_offset: int,
        last_offset: int,
        record_count: int,
        append_time: int,
    ) -> AppendResult:
        """What follows an append that is in the segment (leader's or follower's; its
        aborted transactions are in the `.txnindex` with it): the log end, the producers'
        states, the leader epochs."""
        self.log_end_offset = last_offset + 1
        producer_state = self.producer_state
        for info in updates.values():
            producer_state.update(info)
        producer_state.update_map_end_offset(self.log_end_offset)
        cache = self.leader_epoch_cache
        for epoch, start in epochs:
            try:
                cache.assign(epoch, start)
            except OSError as exc:
                # The records are in; the cache in memory is right, and the checkpoint is
                # written again by the next flush (and rebuilt from batches by recovery).
                logger.warning("log %s: leader epoch checkpoint not written: %s", self.name, exc)
        self.unflushed_messages += record_count
        return AppendResult(
            first_offset=first_offset,
            last_offset=last_offset,
            log_append_time_ms=append_time,
            log_start_offset=self.log_start_offset,
            record_count=record_count,
            flush_needed=self.unflushed_messages >= self.config.flush_messages,
        )

    # -- read, ListOffsets / OffsetForLeaderEpoch ------------------------------------------

    # The read side lives in `trio_broker.log.reader` as functions of the log; bound here as
    # methods, so `log.read(...)` costs no extra call on the fetch path.
    read = reader.read_batches
    offset_for_timestamp = reader.offset_for_timestamp
    max_timestamp_offset = reader.max_timestamp_offset
    collect_aborted_transactions = reader.collect_aborted_transactions

    @property
    def last_stable_offset(self) -> int:
        """The LSO: read_committed consumers read below it (Kafka's UnifiedLog.lastStableOffset)."""
        first_unstable = self.producer_state.first_unstable_offset()
        hw = self._high_watermark
        if first_unstable is None or first_unstable >= hw:
            return hw
        return max(first_unstable, self.log_start_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch; (-1, -1) when unknown."""
        return self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)

    # -- deletion --------------------------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset to `offset` (-1: the high watermark).

        Segments wholly below the new start are deleted. Returns the new log start offset.
        """
        self._check_open()
        if offset == -1:
            offset = self._high_watermark
        if offset < 0 or offset > self._high_watermark:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"cannot move the log start offset of {self.name} to {offset}, beyond the "
                f"high watermark {self._high_watermark}",
            )
        if offset > self.log_start_offset:
            logger.info("log start offset of %s raised to %s by DeleteRecords", self.name, offset)
            try:
                self._increment_log_start_offset(offset)
                self._delete_segments(
                    self._deletable_segments(
                        lambda seg, nxt: nxt is not None and nxt.base_offset <= offset
                    )
                )
            except OSError as exc:
                # The new start holds in memory (and retention deletes the segments later);
                # a checkpoint or roll that a full disk refused is retried.
                raise self._storage_error(exc, "delete records") from exc
        return self.log_start_offset

    def _increment_log_start_offset(self, offset: int) -> None:
        if offset <= self.log_start_offset:
            return
        self.log_start_offset = offset
        self._high_watermark = max(self._high_watermark, offset)
        self.recovery_point = max(self.recovery_point, offset)
        self.leader_epoch_cache.truncate_from_start(offset)

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Retention: delete whole segments past retention.ms / retention.bytes or below the
        log start offset. Returns how many segments were deleted."""
        self._check_open()
        now = self.now_ms() if now_ms is None else now_ms
        deleted = 0
        lso = self.log_start_offset
        deleted += self._delete_segments(
            self._deletable_segments(lambda seg, nxt: nxt is not None and nxt.base_offset <= lso)
        )
        if not self.config.deletes:
            return deleted
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            deleted += self._delete_segments(
                self._deletable_segments(
                    lambda seg, nxt: now - seg.largest_timestamp() > retention_ms
                ),
                reason=f"retention.ms={retention_ms}",
            )
        retention_bytes = self.config.retention_bytes
        size = self.size_in_bytes
        if retention_bytes >= 0 and size >= retention_bytes:
            excess = size - retention_bytes

            def over_size(seg: LogSegment, nxt: LogSegment | None) -> bool:
                nonlocal excess
                if excess - seg.size >= 0:
                    excess -= seg.size
                    return True
                return False

            deleted += self._delete_segments(
                self._deletable_segments(over_size), reason=f"retention.bytes={retention_bytes}"
            )
        return deleted

    def _deletable_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool]
    ) -> list[LogSegment]:
        out = []
        segments = self.segments
        for i, segment in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            upper = nxt.base_offset if nxt is not None else self.log_end_offset
            # Never past the high watermark: the log start offset must not exceed it.
            if self._high_watermark < upper or (nxt is None and segment.size == 0):
                break
            if not predicate(segment, nxt):
                break
            out.append(segment)
        return out

    def _delete_segments(self, doomed: list[LogSegment], reason: str = "log start offset") -> int:
        if not doomed:
            return 0
        if len(doomed) == len(self.segments):
            # There must always be an active segment: roll first, as Kafka does, so the
            # one being deleted is no longer active.
            self.roll()
        now = self.now_ms()
        for segment in doomed:
            slot = bisect.bisect_left(self._bases, segment.base_offset)
            del self.segments[slot]
            del self._bases[slot]
            segment.rename_to_deleted()
            self.pending_deletes.append((now + self.config.file_delete_delay_ms, segment))
        logger.info(
            "deleted %d segment(s) of %s [%s, %s) by %s",
            len(doomed),
            self.name,
            doomed[0].base_offset,
            self.segments[0].base_offset,
            reason,
        )
        self._increment_log_start_offset(self.segments[0].base_offset)
        self.producer_state.delete_snapshots_before(self.segments[0].base_offset)
        return len(doomed)

    def delete_expired_files(self, now_ms: int | None = None, *, force: bool = False) -> int:
        """Close and unlink `.deleted` segments whose file.delete.delay.ms has passed."""
        if not self.pending_deletes:
            return 0  # most logs, and every one of a clean stop's 20,000 closes
        now = self.now_ms() if now_ms is None else now_ms
        keep, due = [], []
        for deadline, segment in self.pending_deletes:
            (due if force or deadline <= now else keep).append((deadline, segment))
        self.pending_deletes = keep
        for _, segment in due:
            segment.delete()
        return len(due)

    # -- truncation ------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove everything at and above `offset` (a follower diverged). True if anything was."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate {self.name} to a negative offset {offset}")
        if offset >= self.log_end_offset:
            return False
        logger.info("truncating %s to offset %s", self.name, offset)
        self.truncations += 1
        if offset < self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        doomed = [s for s in self.segments if s.base_offset > offset]
        now = self.now_ms()
        for segment in doomed:
            self.segments.remove(segment)
            self._bases.remove(segment.base_offset)
            segment.rename_to_deleted()
            self.pending_deletes.append((now + self.config.file_delete_delay_ms, segment))
        active = self.active_segment
        active.truncate_to(offset)
        active.resize_indexes(self.config.segment_index_bytes)
        # Kafka sets the end to `offset`; we use where the data really ends, which is the
        # same for batch-aligned targets and leaves no offset gap for unaligned ones.
        self.log_end_offset = active.next_offset
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self._after_truncation()
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start an empty log at `offset`."""
        self._check_open()
        self.truncations += 1
        now = self.now_ms()
        for segment in self.segments:
            segment.rename_to_deleted()
            self.pending_deletes.append((now + self.config.file_delete_delay_ms, segment))
        self.segments, self._bases = [], []
        self._new_segment(offset)
        self.log_start_offset = self.log_end_offset = offset
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully_and_start_at(offset)
        self._after_truncation()

    def _after_truncation(self) -> None:
        self._high_watermark = min(
            max(self._high_watermark, self.log_start_offset), self.log_end_offset
        )
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        from trio_broker.log.loader import rebuild_producer_state

        rebuild_producer_state(self, self.log_end_offset)

    # -- flush and lifecycle -----------------------------------------------------------------

    def flush_target(self, now_ms: int) -> int | None:
        """The offset `flush` should run to now, or None: rolled segments not yet flushed,
        flush.messages reached, or flush.ms elapsed."""
        if self.closed:
            return None
        active_base = self.active_segment.base_offset
        if self.unflushed_messages >= self.config.flush_messages or (
            self.unflushed_messages and now_ms - self.last_flush_ms >= self.config.flush_ms
        ):
            return self.log_end_offset
        if self.recovery_point < active_base:
            return active_base
        return None

    def flush(self, up_to: int | None = None, *, sync: bool = True) -> None:
        """fsync segments holding offsets in [recovery point, up_to) and advance the recovery
        point. Blocking: call it through trio.to_thread.run_sync. It does not read the clock
        (the caller sets `last_flush_ms`), so it is safe in a worker thread.

        `sync=False` writes what the files lack (indexes, the leader epoch checkpoint)
        without an fsync: for a caller that syncs the whole file system next (a clean stop,
        LogManager.close), before it writes the recovery points."""
        if self.closed:
            return
        end = self.log_end_offset
        up_to = end if up_to is None else min(up_to, end)
        pending = self.unflushed_messages
        start = self.recovery_point
        owner = self.segments
        segments = list(owner)
        for i, segment in enumerate(segments):
            seg_end = segments[i + 1].base_offset if i + 1 < len(segments) else end + 1
            if segment.base_offset < up_to and seg_end > start:
                try:
                    if sync:
                        segment.flush()
                    else:
                        segment.offset_index.sync_to_file()
                        segment.time_index.sync_to_file()
                except OSError as exc:  # closed by a concurrent deletion: nothing to keep
                    logger.debug("flush of %s skipped: %s", segment.log_path, exc)
        if sync:
            fsync_dir(self.dir)
        self.leader_epoch_cache.write(sync=sync)
        if self.segments is not owner:
            return  # the files were swapped meanwhile (a log dir move): they wait their turn
        self.recovery_point = max(self.recovery_point, up_to)
        if up_to >= end:
            self.unflushed_messages = max(self.unflushed_messages - pending, 0)

    def update_config(self, config: LogConfig) -> None:
        """AlterConfigs: new settings apply to the next append, roll and retention check."""
        old = self.config
        self.config = config
        if config.segment_index_bytes != old.segment_index_bytes and not self.closed:
            self.active_segment.resize_indexes(config.segment_index_bytes)
        for segment in self.segments:
            segment.index_interval_bytes = config.index_interval_bytes

    def remove_expired_producers(self, now_ms: int) -> None:
        self.producer_state.remove_expired_producers(now_ms, self.config.producer_id_expiration_ms)

    def write_partition_metadata(self, *, sync: bool = True) -> Path | None:
        """The file written, or None without a topic id; `sync`: see checkpoints."""
        if self.topic_id is None:
            return None
        return write_partition_metadata(self.dir, self.topic_id, sync=sync)

    def close(self, *, sync: bool = True) -> None:
        """Clean close: trim indexes, snapshot producer state at the log end, fsync (or,
        with `sync=False`, leave the fsync to a caller that syncs the file system)."""
        if self.closed:
            return
        # Every step is tried even when one fails (ENOSPC on a full disk), so the files
        # are closed either way; the first error is raised at the end, and the caller
        # then leaves the dir without a clean-shutdown marker.
        errors: list[OSError] = []
        try:
            self.producer_state.update_map_end_offset(self.log_end_offset)
            # Only with producers: a clean load that finds no snapshot knows there were
            # none (loader.rebuild_producer_state), and most partitions of a broker with
            # thousands have none; a snapshot each made a clean stop take seconds.
            if self.producer_state.producers:
                self.producer_state.take_snapshot(sync=sync)
        except OSError as exc:
            errors.append(exc)
        try:
            self.flush(sync=sync)
        except OSError as exc:
            errors.append(exc)
        for segment in self.segments:
            try:
                segment.close()
            except OSError as exc:
                errors.append(exc)
                segment.close_handlers()
        try:
            self.delete_expired_files(force=True)
        except OSError as exc:
            errors.append(exc)
        self.closed = True
        if errors:
            raise errors[0]

    def close_handlers(self) -> None:
        """Close file descriptors without any further writes (the log is being deleted)."""
        for segment in self.segments:
            segment.close_handlers()
        for _, segment in self.pending_deletes:
            segment.close_handlers()
        self.pending_deletes = []
        self.closed = True

    def rename_dir(self, new_dir: Path) -> None:
        """Move the partition directory (delete-pending); open fds stay valid, and files
        opened again (segment files leave the file cache when idle) are found there."""
        os.rename(self.dir, new_dir)
        self.dir = new_dir
        for segment in list(self.segments) + [s for _, s in self.pending_deletes]:
            segment.dir = new_dir
            segment.log_path = new_dir / segment.log_path.name
            for index in (segment.offset_index, segment.time_index, segment.txn_index):
                index.path = new_dir / index.path.name
        self.closed = True

    def delete(self) -> None:
        """Close every file and remove the partition directory."""
        self.close_handlers()
        shutil.rmtree(self.dir, ignore_errors=True)
