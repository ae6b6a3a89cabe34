"""Log compaction (Kafka's LogCleaner): keep the latest record per key in closed segments.

For a log with `cleanup.policy` containing `compact`:

1. The cleanable range is the closed segments (never the active one) below the high
   watermark whose newest record is older than `min.compaction.lag.ms`. The part above
   the cleaner checkpoint (`cleaner-offset-checkpoint`, Kafka's file) is dirty; cleaning
   starts when dirty bytes / cleanable bytes reaches `min.cleanable.dirty.ratio`.
2. An offset map (key -> latest offset) is built from the dirty part.
3. Each cleanable segment is rewritten keeping a record when no later record has its key.
   Batches keep their base and last offsets, producer id, epoch, base sequence, codec and
   timestamp type; a batch left without records is kept empty when it carries a producer
   id (its sequence numbers must outlive the data), else dropped. Control batches stay.
   Tombstones (null values) are dropped once their segment's newest record is older than
   `delete.retention.ms`, so consumers that read within that time still see the delete.
4. Swap, crash-safely given the loader (which removes `.cleaned` leftovers and rebuilds
   missing indexes): write `<base>.log.cleaned` and fsync it; unlink the old indexes;
   rename the cleaned file over `<base>.log` (the atomic step); fsync the directory; open
   the new segment and rebuild its indexes. A crash before the rename leaves the old
   segment, after it the new one; both valid. In-flight fetches keep the old file's open
   descriptor, closed after `file.delete.delay.ms`.

Simplifications (noted for later): each segment is rewritten on its own (Kafka also merges
small neighbours), and cleaning runs on the Trio thread one segment at a time.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import trio

from trio_broker.log.checkpoints import fsync_dir, read_offset_checkpoint, write_offset_checkpoint
from trio_broker.log.segment import LOG_SUFFIX, LogSegment, segment_file_name
from trio_broker.protocol.records import (
    BatchHeader,
    Record,
    TimestampType,
    build_batch,
    iter_batches,
    iter_records,
)

if TYPE_CHECKING:
    from trio_broker.log import LogManager, PartitionLog

logger = logging.getLogger(__name__)

__all__ = ["CLEANER_CHECKPOINT", "CleanResult", "LogCleaner", "clean_log"]

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
CLEANED_SUFFIX = ".cleaned"


@attrs.frozen(kw_only=True)
class CleanResult:
    first_dirty_offset: int
    end_offset: int  # the new cleaner checkpoint: everything below it is clean
    segments: int
    bytes_before: int
    bytes_after: int
    records_removed: int


def _cleanable(log: PartitionLog, now_ms: int) -> list[LogSegment]:
    lag = log.config.min_compaction_lag_ms
    out = []
    segments = log.segments
    for i, segment in enumerate(segments[:-1]):  # never the active segment
        upper = segments[i + 1].base_offset
        if upper > log.high_watermark:
            break
        if segment.size and now_ms - segment.largest_timestamp() < lag:
            break
        out.append(segment)
    return out


def _read(segment: LogSegment) -> bytes:
    return os.pread(segment.fd, segment.size, 0)


def _build_offset_map(segments: list[LogSegment], first_dirty: int) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for segment in segments:
        data = _read(segment)
        for pos, header in iter_batches(data):
            if header.last_offset < first_dirty or header.is_control:
                continue
            for record in iter_records(memoryview(data)[pos : pos + header.size]):
                if record.key is not None and record.offset >= first_dirty:
                    latest[record.key] = record.offset
    return latest


def _rebuild(header: BatchHeader, kept: list[Record]) -> bytes:
    append_time = header.is_log_append_time
    return build_batch(
        kept,
        base_offset=header.base_offset,
        compression=header.compression,
        timestamp_type=TimestampType.LOG_APPEND_TIME if append_time else TimestampType.CREATE_TIME,
        log_append_time=header.max_timestamp if append_time else None,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        partition_leader_epoch=header.partition_leader_epoch,
        last_offset_delta=header.last_offset_delta,
    )


def _clean_segment_data(
    data: bytes, latest: dict[bytes, int], drop_tombstones: bool
) -> tuple[bytearray, int]:
    out = bytearray()
    removed = 0
    mv = memoryview(data)
    for pos, header in iter_batches(mv):
        batch = mv[pos : pos + header.size]
        if header.is_control:
            out += batch
            continue
        records = list(iter_records(batch))
        kept = [
            r
            for r in records
            if r.key is not None
            and latest.get(r.key, r.offset) <= r.offset
            and not (drop_tombstones and r.value is None)
        ]
        removed += len(records) - len(kept)
        if len(kept) == len(records):
            out += batch
        elif kept or header.producer_id >= 0:
            out += _rebuild(header, kept)
    return out, removed


def clean_log(
    log: PartitionLog,
    *,
    first_dirty_offset: int,
    now_ms: int,
    force: bool = False,
    retire: Callable[[LogSegment], None] | None = None,
) -> CleanResult | None:
    """One cleaning pass over `log`; None when there is nothing (or not enough) to clean.

    `first_dirty_offset` is the cleaner checkpoint; `force` ignores the dirty ratio.
    `retire(old_segment)` takes each replaced segment, whose descriptors must stay open
    for in-flight reads a while (closed at once when None).
    """
    segments = _cleanable(log, now_ms)
    if not segments:
        return None
    end = log.segments[len(segments)].base_offset
    first_dirty = max(first_dirty_offset, log.log_start_offset)
    if first_dirty >= end:
        return None
    total = sum(s.size for s in segments)
    dirty = sum(
        s.size
        for i, s in enumerate(segments)
        if (segments[i + 1].base_offset if i + 1 < len(segments) else end) > first_dirty
    )
    if not force and (total == 0 or dirty / total < log.config.min_cleanable_dirty_ratio):
        return None
    latest = _build_offset_map(segments, first_dirty)
    horizon = now_ms - log.config.delete_retention_ms
    before = after = removed = 0
    for segment in segments:
        data = _read(segment)
        drop_tombstones = segment.largest_timestamp() < horizon
        cleaned, gone = _clean_segment_data(data, latest, drop_tombstones)
        before += len(data)
        after += len(cleaned)
        removed += gone
        if gone:
            _swap(log, segment, cleaned, retire)
    logger.info(
        "cleaned %s [%d, %d): %d segment(s), %d -> %d bytes, %d record(s) removed",
        log.name,
        first_dirty,
        end,
        len(segments),
        before,
        after,
        removed,
    )
    return CleanResult(
        first_dirty_offset=first_dirty,
        end_offset=end,
        segments=len(segments),
        bytes_before=before,
        bytes_after=after,
        records_removed=removed,
    )


def _swap(
    log: PartitionLog,
    old: LogSegment,
    cleaned: bytearray,
    retire: Callable[[LogSegment], None] | None,
) -> None:
    directory = log.dir
    base = old.base_offset
    log_path = directory / segment_file_name(base, LOG_SUFFIX)
    tmp = directory / (segment_file_name(base, LOG_SUFFIX) + CLEANED_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(cleaned)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    # Indexes first: a crash from here on finds a segment without indexes and rebuilds them.
    old.offset_index.path.unlink(missing_ok=True)
    old.time_index.path.unlink(missing_ok=True)
    os.replace(tmp, log_path)
    fsync_dir(directory)
    new = LogSegment(
        directory,
        base,
        index_interval_bytes=log.config.index_interval_bytes,
        max_index_size=log.config.segment_index_bytes,
        created_ms=old.created_ms,
    )
    new.recover()
    new.on_become_inactive()
    slot = log.segments.index(old)
    log.segments[slot] = new
    if retire is not None:
        retire(old)
    else:
        old.close_handlers()


class LogCleaner:
    """The cleaner task: every `log.cleaner.backoff.ms`, clean the dirtiest compacted logs.

    A service for the broker nursery: `LogCleaner(broker.log_manager, backoff_ms=...)`.
    """

    def __init__(
        self,
        log_manager: LogManager,
        *,
        backoff_ms: int = 15_000,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self.log_manager = log_manager
        self.backoff_ms = backoff_ms
        self.now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        self.checkpoints: dict[Path, dict[tuple[str, int], int]] = {}
        self._retired: list[tuple[int, LogSegment]] = []

    def _checkpoint_for(self, log: PartitionLog) -> dict[tuple[str, int], int]:
        log_dir = log.dir.parent
        found = self.checkpoints.get(log_dir)
        if found is None:
            found = self.checkpoints[log_dir] = read_offset_checkpoint(log_dir / CLEANER_CHECKPOINT)
        return found

    def clean_once(self, *, force: bool = False) -> list[CleanResult]:
        """One pass over every compacted log; returns what was cleaned."""
        now = self.now_ms()
        results = []
        for log in self.log_manager.all_logs():
            if log.closed or not log.config.compacts:
                continue
            checkpoint = self._checkpoint_for(log)
            key = (log.topic, log.partition)

            def retire(old: LogSegment, log: PartitionLog = log) -> None:
                self._retired.append((now + log.config.file_delete_delay_ms, old))

            result = clean_log(
                log,
                first_dirty_offset=checkpoint.get(key, 0),
                now_ms=now,
                force=force,
                retire=retire,
            )
            if result is None:
                continue
            checkpoint[key] = result.end_offset
            write_offset_checkpoint(log.dir.parent / CLEANER_CHECKPOINT, checkpoint)
            results.append(result)
        self._close_retired(now)
        return results

    def _close_retired(self, now: int, force: bool = False) -> None:
        keep = []
        for deadline, segment in self._retired:
            if force or deadline <= now:
                segment.close_handlers()
            else:
                keep.append((deadline, segment))
        self._retired = keep

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            while True:
                await trio.sleep(self.backoff_ms / 1000)
                try:
                    self.clean_once()
                except OSError:
                    logger.exception("log cleaner pass failed")
        finally:
            self._close_retired(0, force=True)
