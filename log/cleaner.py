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
   Records of aborted transactions (from the segments' `.txnindex`) never count as a
   key's latest value and are removed (their batches stay, empty, for the producer's
   sequence numbers, as Kafka keeps a producer's last batch); cleaning stops at the last
   stable offset. Transaction markers are all kept, so each `.txnindex` stays as it is
   (Kafka may drop a marker once its transaction's records are gone and
   `delete.retention.ms` has passed: an optimisation left out, never a wrong answer).
   Tombstones (null values) are dropped once their segment's newest record is older than
   `delete.retention.ms`, so consumers that read within that time still see the delete.
4. Swap, as Kafka's UnifiedLog.replaceSegments does, so that a crash at any instant leaves
   either the old segment with its indexes or the new one with complete indexes:
   a. write `<base>.log.cleaned` with its `.index.cleaned` and `.timeindex.cleaned`,
      complete and trimmed, and fsync all three (a crash: the loader deletes `.cleaned`);
   b. rename the indexes, then the log, from `.cleaned` to `.swap`. The `.log.swap` rename
      is the commit point: the loader deletes index `.swap` files without a `.log.swap`,
      and completes a swap whose `.log.swap` exists (see `loader.complete_swaps`);
   c. rename the indexes, then the log, from `.swap` over the old files. A crash between
      leaves a `.log.swap` without index `.swap` files: the loader renames the log in and
      rebuilds both indexes from it (the index files present may be old or new);
   d. fsync the directory before the cleaner checkpoint moves.
   In-flight fetches keep the old file's open descriptor, closed after
   `file.delete.delay.ms`.

Threading: the heavy part (reading the closed segments, the offset map, writing and
fsyncing the cleaned files) runs in a worker thread on duplicated descriptors; closed
segments are immutable while the active one takes appends. Renames and the change of
`log.segments` run on the Trio thread, after checking that every segment of the pass is
still in the log unchanged (retention, DeleteRecords, truncation or deletion of the
partition may have run meanwhile; then the rest of the pass is dropped). A cancelled pass
stops the worker at its next batch and removes its `.cleaned` files.

Simplification (noted for later): each segment is rewritten on its own (Kafka also merges
small neighbours), and a segment is read whole into memory.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import trio

from trio_broker.log.checkpoints import fsync_dir, read_offset_checkpoint, write_offset_checkpoint
from trio_broker.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)
from trio_broker.protocol.record_codec import Record, build_batch, iter_records
from trio_broker.protocol.records import BatchHeader, TimestampType, iter_batches, read_header

if TYPE_CHECKING:
    from trio_broker.log import LogManager, PartitionLog

logger = logging.getLogger(__name__)

__all__ = [
    "CLEANED_SUFFIX",
    "CLEANER_CHECKPOINT",
    "SWAP_SUFFIX",
    "CleanResult",
    "LogCleaner",
    "clean_log",
    "clean_log_in_thread",
]

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

T = TypeVar("T")


class _Stopped(Exception):
    """The pass was cancelled: the worker stops at its next batch."""


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
        # Never past the LSO: an undecided transaction's records must not shadow older ones.
        if upper > log.last_stable_offset:
            break
        if segment.size and now_ms - segment.largest_timestamp() < lag:
            break
        out.append(segment)
    return out


@attrs.define
class _Pass:
    """One cleaning pass over a log, planned on the Trio thread.

    The worker reads the closed segments through `fds`, duplicates of their descriptors,
    so a segment closed meanwhile (retention, deletion) never hands it a reused number.
    """

    log: PartitionLog
    directory: Path
    targets: list[LogSegment]  # the segments to clean, replaced by their cleaned copies
    sizes: list[int]
    drop_tombstones: list[bool]
    fds: list[int]
    first_dirty: int
    end: int
    index_interval_bytes: int
    max_index_size: int
    # The cleaned segment the worker is writing or has written and not yet swapped in:
    # removed if the pass ends without swapping it (cancelled, failed or outdated).
    pending: LogSegment | None = None
    bytes_before: int = 0
    bytes_after: int = 0
    removed: int = 0
    # producer id -> (first, last) offsets of its aborted transactions, from the .txnindex
    aborted: dict[int, list[tuple[int, int]]] = attrs.Factory(dict)

    def still_current(self) -> bool:
        """Every segment of the pass is still in the log, closed and unchanged."""
        log = self.log
        if log.closed or log.log_end_offset < self.end:
            return False
        segments = log.segments
        active = segments[-1]
        for segment, size in zip(self.targets, self.sizes, strict=True):
            if segment is active or segment.size != size or segment.closed:
                return False
            if not any(s is segment for s in segments):
                return False
        return True

    def discard_pending(self) -> None:
        if self.pending is not None:
            self.pending.delete()
            self.pending = None

    def close(self) -> None:
        self.discard_pending()
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def result(self) -> CleanResult:
        return CleanResult(
            first_dirty_offset=self.first_dirty,
            end_offset=self.end,
            segments=len(self.targets),
            bytes_before=self.bytes_before,
            bytes_after=self.bytes_after,
            records_removed=self.removed,
        )


def _plan(log: PartitionLog, *, first_dirty_offset: int, now_ms: int, force: bool) -> _Pass | None:
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
    horizon = now_ms - log.config.delete_retention_ms
    fds: list[int] = []
    try:
        for segment in segments:
            file = segment.file()
            fds.append(os.dup(file.fd))
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    return _Pass(
        log=log,
        directory=log.dir,
        targets=list(segments),
        sizes=[s.size for s in segments],
        drop_tombstones=[s.largest_timestamp() < horizon for s in segments],
        fds=fds,
        first_dirty=first_dirty,
        end=end,
        index_interval_bytes=log.config.index_interval_bytes,
        max_index_size=log.config.segment_index_bytes,
        aborted=_aborted_ranges(log),
    )


def _aborted_ranges(log: PartitionLog) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for segment in log.segments:
        for txn in segment.txn_index.entries:
            out.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
    return out


def _is_aborted(aborted: dict[int, list[tuple[int, int]]], header: BatchHeader) -> bool:
    ranges = aborted.get(header.producer_id)
    return bool(ranges) and any(a <= header.base_offset <= b for a, b in ranges)


def _check(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise _Stopped


def _build_offset_map(plan: _Pass, stop: threading.Event | None = None) -> dict[bytes, int]:
    """Worker thread: key -> offset of its latest record in the dirty part."""
    latest: dict[bytes, int] = {}
    first_dirty = plan.first_dirty
    for fd, size in zip(plan.fds, plan.sizes, strict=True):
        data = os.pread(fd, size, 0)
        for pos, header in iter_batches(data):
            _check(stop)
            if header.last_offset < first_dirty or header.is_control:
                continue
            if header.is_transactional and _is_aborted(plan.aborted, header):
                continue  # aborted records never replace a committed value (Kafka's rule)
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
    data: bytes,
    latest: dict[bytes, int],
    drop_tombstones: bool,
    stop: threading.Event | None = None,
    aborted: dict[int, list[tuple[int, int]]] | None = None,
) -> tuple[bytearray, list[tuple[int, int, int]], int]:
    """The cleaned bytes, (last offset, max timestamp, size) per batch kept, records removed."""
    out = bytearray()
    kept_batches: list[tuple[int, int, int]] = []
    removed = 0
    mv = memoryview(data)
    for pos, header in iter_batches(mv):
        _check(stop)
        batch = mv[pos : pos + header.size]
        if header.is_control:
            out += batch
            kept_batches.append((header.last_offset, header.max_timestamp, header.size))
            continue
        records = list(iter_records(batch))
        if aborted and header.is_transactional and _is_aborted(aborted, header):
            kept = []  # no consumer that reads committed data ever sees these
        else:
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
            kept_batches.append((header.last_offset, header.max_timestamp, header.size))
        elif kept or header.producer_id >= 0:
            rebuilt = _rebuild(header, kept)
            new_header = read_header(rebuilt)
            out += rebuilt
            kept_batches.append((new_header.last_offset, new_header.max_timestamp, len(rebuilt)))
    return out, kept_batches, removed


def _temp_paths(directory: Path, base: int, suffix: str) -> list[Path]:
    return [
        directory / segment_file_name(base, kind + suffix)
        for kind in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
    ]


def _write_cleaned(
    plan: _Pass, slot: int, latest: dict[bytes, int], stop: threading.Event | None = None
) -> bool:
    """Worker thread: clean target `slot` into `plan.pending`, a segment named `.cleaned`
    whose three files are complete and fsynced. False when nothing was removed."""
    old = plan.targets[slot]
    data = os.pread(plan.fds[slot], plan.sizes[slot], 0)
    cleaned, batches, removed = _clean_segment_data(
        data, latest, plan.drop_tombstones[slot], stop, plan.aborted
    )
    plan.bytes_before += len(data)
    plan.bytes_after += len(cleaned)
    plan.removed += removed
    if not removed:
        return False
    for path in _temp_paths(plan.directory, old.base_offset, CLEANED_SUFFIX):
        path.unlink(missing_ok=True)  # a stale copy from an attempt that died
    new = plan.pending = LogSegment(
        plan.directory,
        old.base_offset,
        index_interval_bytes=plan.index_interval_bytes,
        max_index_size=plan.max_index_size,
        created_ms=old.created_ms,
        file_suffix=CLEANED_SUFFIX,
    )
    new.append(memoryview(cleaned), batches)
    # Aborted records are kept (not removed as Kafka's cleaner does), so their index too.
    for txn in old.txn_index.entries:
        new.txn_index.append(txn)
    # The final time index entry (the segment's largest timestamp) and trimmed indexes:
    # what a rolled segment has, so the loader can trust them without a rebuild.
    new.on_become_inactive()
    new.flush()
    # Kafka keeps the old modification time: an empty cleaned segment's largest timestamp
    # is its mtime, which must not restart its retention.
    stat = os.fstat(plan.fds[slot])
    os.utime(new.log_path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    return True


def _swap(plan: _Pass, slot: int, retire: Callable[[LogSegment], None] | None) -> None:
    """Trio thread: put `plan.pending` in the place of target `slot`, files and list."""
    log = plan.log
    old = plan.targets[slot]
    new = plan.pending
    assert new is not None
    new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)  # commits at the .log rename
    plan.pending = None
    new.change_file_suffixes(SWAP_SUFFIX, "")
    index = next(i for i, s in enumerate(log.segments) if s is old)
    log.segments[index] = new
    plan.targets[slot] = new
    plan.sizes[slot] = new.size
    # The old descriptor now names a file with no directory entry; in-flight reads keep it.
    if retire is not None:
        retire(old)
    else:
        old.close_handlers()


def _log_result(plan: _Pass) -> None:
    logger.info(
        "cleaned %s [%d, %d): %d segment(s), %d -> %d bytes, %d record(s) removed",
        plan.log.name,
        plan.first_dirty,
        plan.end,
        len(plan.targets),
        plan.bytes_before,
        plan.bytes_after,
        plan.removed,
    )


def _outdated(plan: _Pass) -> None:
    logger.info(
        "log %s changed while it was being cleaned (retention, truncation or deletion): "
        "dropping the rest of the pass over [%d, %d)",
        plan.log.name,
        plan.first_dirty,
        plan.end,
    )


def clean_log(
    log: PartitionLog,
    *,
    first_dirty_offset: int,
    now_ms: int,
    force: bool = False,
    retire: Callable[[LogSegment], None] | None = None,
) -> CleanResult | None:
    """One cleaning pass over `log`, all on the calling thread; None when there is nothing
    (or not enough) to clean. The broker uses `clean_log_in_thread`.

    `first_dirty_offset` is the cleaner checkpoint; `force` ignores the dirty ratio.
    `retire(old_segment)` takes each replaced segment, whose descriptors must stay open
    for in-flight reads a while (closed at once when None).
    """
    plan = _plan(log, first_dirty_offset=first_dirty_offset, now_ms=now_ms, force=force)
    if plan is None:
        return None
    try:
        latest = _build_offset_map(plan)
        for slot in range(len(plan.targets)):
            if _write_cleaned(plan, slot, latest):
                _swap(plan, slot, retire)
        fsync_dir(plan.directory)
    finally:
        plan.close()
    _log_result(plan)
    return plan.result()


async def _in_worker(hook: Callable[[], None] | None, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args, stop)` in a worker thread. Cancelling the calling task sets `stop`, so
    `fn` gives up at its next batch (raising _Stopped), and Cancelled is raised once the
    thread is done: no thread outlives the pass. `hook()` runs first, in the thread."""
    await trio.lowlevel.checkpoint_if_cancelled()
    stop = threading.Event()
    task = trio.lowlevel.current_task()
    token = trio.lowlevel.current_trio_token()

    def work() -> T:
        if hook is not None:
            hook()
        return fn(*args, stop)

    def deliver(outcome: Any) -> None:
        token.run_sync_soon(trio.lowlevel.reschedule, task, outcome)

    def abort(raise_cancel: Any) -> trio.lowlevel.Abort:
        stop.set()
        return trio.lowlevel.Abort.FAILED  # the thread's outcome reschedules us

    trio.lowlevel.start_thread_soon(work, deliver, name=f"log cleaner: {fn.__name__}")
    try:
        return await trio.lowlevel.wait_task_rescheduled(abort)
    except _Stopped:
        await trio.lowlevel.checkpoint()  # raises the Cancelled that set `stop`
        raise AssertionError("the cleaner worker stopped without a cancellation") from None


async def clean_log_in_thread(
    log: PartitionLog,
    *,
    first_dirty_offset: int,
    now_ms: int,
    force: bool = False,
    retire: Callable[[LogSegment], None] | None = None,
    on_worker_start: Callable[[], None] | None = None,
) -> CleanResult | None:
    """`clean_log` with the reading, cleaning, writing and fsyncs in worker threads, only
    the swaps on the Trio thread. None also when the log changed under the pass (then only
    the segments swapped before the change are cleaned).

    `on_worker_start()` is called in the worker thread as each piece of work starts (tests
    use it to act on the broker while the cleaner works)."""
    plan = _plan(log, first_dirty_offset=first_dirty_offset, now_ms=now_ms, force=force)
    if plan is None:
        return None
    try:
        latest = await _in_worker(on_worker_start, _build_offset_map, plan)
        for slot in range(len(plan.targets)):
            if not await _in_worker(on_worker_start, _write_cleaned, plan, slot, latest):
                continue
            if not plan.still_current():
                _outdated(plan)
                return None
            _swap(plan, slot, retire)
        await trio.to_thread.run_sync(fsync_dir, plan.directory)
    finally:
        plan.close()
    _log_result(plan)
    return plan.result()


class LogCleaner:
    """The cleaner task: every `log.cleaner.backoff.ms`, clean the dirtiest compacted logs.

    A service for the broker nursery: `LogCleaner(broker.log_manager, backoff_ms=...)`.
    `on_worker_start`: see `clean_log_in_thread`.
    """

    def __init__(
        self,
        log_manager: LogManager,
        *,
        backoff_ms: int = 15_000,
        now_ms: Callable[[], int] | None = None,
        on_worker_start: Callable[[], None] | None = None,
    ) -> None:
        self.log_manager = log_manager
        self.backoff_ms = backoff_ms
        self.now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        self.on_worker_start = on_worker_start
        self.checkpoints: dict[Path, dict[tuple[str, int], int]] = {}
        self._retired: list[tuple[int, LogSegment]] = []

    def _checkpoint_for(self, log: PartitionLog) -> dict[tuple[str, int], int]:
        log_dir = log.dir.parent
        found = self.checkpoints.get(log_dir)
        if found is None:
            found = self.checkpoints[log_dir] = read_offset_checkpoint(log_dir / CLEANER_CHECKPOINT)
        return found

    async def clean_once(self, *, force: bool = False) -> list[CleanResult]:
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

            result = await clean_log_in_thread(
                log,
                first_dirty_offset=checkpoint.get(key, 0),
                now_ms=now,
                force=force,
                retire=retire,
                on_worker_start=self.on_worker_start,
            )
            if result is None:
                continue
            checkpoint[key] = result.end_offset
            await trio.to_thread.run_sync(
                write_offset_checkpoint, log.dir.parent / CLEANER_CHECKPOINT, dict(checkpoint)
            )
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
                    await self.clean_once()
                except Exception:
                    # Kafka marks such a partition uncleanable; we log and try next time.
                    logger.exception("log cleaner pass failed")
        finally:
            self._close_retired(0, force=True)
