"""Opening a partition log: find its segments, recover after a crash, rebuild state.

Kafka's LogLoader, in outline:
1. A cleaner swap that reached its commit point (a `<base>.log.swap` exists) is completed;
   then leftovers of interrupted operations (`.deleted`, `.cleaned`, `.swap`, `.tmp`) go.
2. Each `.log` file becomes a segment; a missing or corrupt index marks it for rebuild.
3. After an unclean shutdown, every segment from the one holding the recovery point on is
   recovered: CRCs checked batch by batch, indexes rebuilt, and the log truncated at the
   first bad byte (a torn write), with every later segment deleted.
4. The leader epoch cache and producer state are brought in line with the log end.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path

from trio_broker.log.checkpoints import (
    CorruptCheckpointError,
    PendingSyncs,
    fsync_dir,
    read_partition_metadata,
)
from trio_broker.log.config import LogConfig
from trio_broker.log.partition_log import PartitionLog, wall_clock_ms
from trio_broker.log.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
)
from trio_broker.log.transactions import replay_batch
from trio_broker.log.txn_index import TXN_INDEX_SUFFIX
from trio_broker.protocol.records import BatchHeader

__all__ = ["complete_swaps", "load_log", "rebuild_producer_state"]

logger = logging.getLogger(__name__)

_SWAP_SUFFIX = ".swap"
_LEFTOVER_SUFFIXES = (DELETED_SUFFIX, ".cleaned", _SWAP_SUFFIX, ".tmp")


def load_log(
    directory: str | os.PathLike[str],
    topic: str,
    partition: int,
    config: LogConfig,
    *,
    now_ms: Callable[[], int] = wall_clock_ms,
    recovery_point: int = 0,
    log_start_offset: int = 0,
    high_watermark: int = 0,
    clean_shutdown: bool = True,
    topic_id: uuid.UUID | None = None,
    pending: PendingSyncs | None = None,
    listed: bool = False,
) -> PartitionLog:
    """Open (creating if needed) the partition directory `directory` and load its log.

    With `pending`, the fsyncs that make a new directory and its `partition.metadata`
    durable are left to the caller's `pending.sync()` (a topic's partitions, created
    together); without, they happen here. `listed`: the directory was found by listing
    its log dir (a start), so it exists and is not made."""
    directory = directory if isinstance(directory, Path) else Path(directory)
    fresh = False  # nothing to find, recover or clean up in a directory just made
    if not listed:
        try:
            try:
                os.mkdir(directory)
            except FileNotFoundError:
                directory.mkdir(parents=True)
            fresh = True
        except FileExistsError:
            pass
    stored_id = None
    if not fresh:
        try:
            stored_id = read_partition_metadata(directory)
        except CorruptCheckpointError:
            logger.warning("ignoring corrupt partition.metadata in %s", directory)
    log = PartitionLog(
        directory,
        topic,
        partition,
        config,
        now_ms=now_ms,
        topic_id=topic_id or stored_id,
        # After a clean shutdown nothing at load needs the epochs (recovery does).
        lazy_epochs=clean_shutdown and not fresh,
    )
    if fresh and pending is not None:
        pending.add_dir(directory.parent)
    if topic_id is not None and stored_id != topic_id:
        written = log.write_partition_metadata(sync=pending is None)
        if pending is not None and written is not None:
            pending.add_file(written)

    if not fresh:
        try:
            _find_segments(log, directory, config, now_ms)
        except FileNotFoundError:
            if not listed or directory.exists():
                raise
            directory.mkdir(parents=True)  # removed since it was listed: made anew, empty
    if not log.segments:
        log._new_segment(max(log_start_offset, 0))
    _recover(log, recovery_point, clean_shutdown)

    log.log_end_offset = log.active_segment.next_offset
    log.log_start_offset = max(log_start_offset, log.segments[0].base_offset)
    if log.log_start_offset > log.log_end_offset:
        log.log_start_offset = log.log_end_offset
    log.recovery_point = (
        log.log_end_offset if clean_shutdown else min(max(recovery_point, 0), log.log_end_offset)
    )
    log.active_segment.resize_indexes(config.segment_index_bytes)
    log.leader_epoch_cache.truncate_lazily(log.log_end_offset, log.log_start_offset)
    rebuild_producer_state(log, log.log_end_offset, clean_shutdown=clean_shutdown)
    log.remove_expired_producers(now_ms())
    log.high_watermark = high_watermark
    # DEBUG: a broker loads tens of thousands at start, and says how many it loaded and in
    # how long (log_loading.py); recovery and repairs have their own warnings.
    logger.debug(
        "loaded log %s: %d segment(s), offsets [%s, %s), high watermark %s",
        log.name,
        len(log.segments),
        log.log_start_offset,
        log.log_end_offset,
        log.high_watermark,
    )
    return log


def _find_segments(
    log: PartitionLog, directory: Path, config: LogConfig, now_ms: Callable[[], int]
) -> None:
    """Steps 1 and 2 of the outline: finish swaps, remove leftovers, open each segment."""
    # One listing of the directory serves every step (a broker loads tens of thousands).
    names = os.listdir(directory)
    if any(name.endswith(LOG_SUFFIX + _SWAP_SUFFIX) for name in names):
        complete_swaps(directory)
        names = os.listdir(directory)
    kept = []
    for name in names:
        if name.endswith(_LEFTOVER_SUFFIXES):
            logger.info("removing leftover file %s", directory / name)
            (directory / name).unlink(missing_ok=True)
        else:
            kept.append(name)
    present = set(kept)
    bases = sorted(
        int(stem)
        for name in kept
        if name.endswith(LOG_SUFFIX) and (stem := name[: -len(LOG_SUFFIX)]).isdigit()
    )
    created = now_ms()
    for base in bases:
        log._add_segment(
            LogSegment(
                directory,
                base,
                index_interval_bytes=config.index_interval_bytes,
                max_index_size=config.segment_index_bytes,
                created_ms=created,
                present=present,
            )
        )
    # Index files whose segment is gone are orphans.
    known = set(bases)
    for name in kept:
        stem, dot, suffix = name.partition(".")
        if (
            dot
            and "." + suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
            and stem.isdigit()
            and int(stem) not in known
        ):
            (directory / name).unlink(missing_ok=True)
    log.producer_state.listing = kept


def complete_swaps(directory: Path) -> list[int]:
    """Finish the cleaner's swaps that passed their commit point; returns their bases.

    The cleaner (see `trio_broker.log.cleaner`) renames a cleaned segment's indexes, then
    its log, from `.cleaned` to `.swap`, and then, in the same order, over the old files.
    So a `<base>.log.swap` holds the new segment's data; with both index `.swap` files
    beside it they are its complete indexes, and they replace the old ones. With either
    missing, the swap was interrupted between index renames: the index files present may
    belong to either segment, so both are removed and rebuilt from the log. `.swap` files
    without a `.log.swap` are from before the commit point and go with the leftovers.
    """
    done = []
    for log_swap in sorted(directory.glob("*" + LOG_SUFFIX + _SWAP_SUFFIX)):
        stem = log_swap.name[: -len(LOG_SUFFIX + _SWAP_SUFFIX)]
        if not stem.isdigit():
            continue
        indexes = [directory / (stem + suffix) for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)]
        swapped = [path.with_name(path.name + _SWAP_SUFFIX) for path in indexes]
        if all(path.exists() for path in swapped):
            for path, new in zip(indexes, swapped, strict=True):
                os.replace(new, path)
            how = "with its indexes"
        else:
            for path in indexes + swapped:
                path.unlink(missing_ok=True)
            how = "rebuilding its indexes"
        _swap_txn_index(directory, stem)
        os.replace(log_swap, directory / (stem + LOG_SUFFIX))
        done.append(int(stem))
        logger.warning(
            "completed the interrupted swap of cleaned segment %s in %s, %s",
            stem,
            directory,
            how,
        )
    if done:
        fsync_dir(directory)
    return done


def _recover(log: PartitionLog, recovery_point: int, clean_shutdown: bool) -> None:
    if clean_shutdown:
        # Trust the files, except where an index is missing or corrupt, or the active
        # segment does not end in a whole batch (a write torn by a full disk, by a broker
        # that did not undo it): recovering it keeps every whole batch before the tear.
        last = log.segments[-1]
        for segment in log.segments:
            if segment.index_needs_rebuild:
                _recover_segment(log, segment, "missing or corrupt index")
            elif segment is last and not segment.tail_is_whole():
                _recover_segment(log, segment, "torn last batch")
        return
    # The segment holding the recovery point and every later one may hold unflushed data.
    first = log._floor_slot(recovery_point)
    for i, segment in enumerate(list(log.segments)):
        if i < first and not segment.index_needs_rebuild:
            continue
        truncated = _recover_segment(log, segment, "unclean shutdown")
        if truncated:
            later = log.segments[log.segments.index(segment) + 1 :]
            for doomed in later:
                log.segments.remove(doomed)
                log._bases.remove(doomed.base_offset)
                doomed.delete()
            if later:
                logger.warning(
                    "log %s: deleted %d segment(s) after the corrupt one at base offset %s: %s",
                    log.name,
                    len(later),
                    segment.base_offset,
                    [s.base_offset for s in later],
                )
            break


def _recover_segment(log: PartitionLog, segment: LogSegment, why: str) -> int:
    epochs: list[tuple[int, int]] = []

    def on_batch(header: BatchHeader) -> None:
        if header.partition_leader_epoch >= 0 and (
            not epochs or header.partition_leader_epoch != epochs[-1][0]
        ):
            epochs.append((header.partition_leader_epoch, header.base_offset))

    file = segment.file()
    size_before = os.fstat(file.fd).st_size
    segment.txn_index.reset(rebuild=True)  # rebuilt by rebuild_producer_state's replay
    truncated = segment.recover(on_batch)
    for epoch, offset in epochs:
        if (
            log.leader_epoch_cache.latest_epoch is None
            or epoch > log.leader_epoch_cache.latest_epoch
        ):
            log.leader_epoch_cache.assign(epoch, offset)
    if truncated:
        logger.warning(
            "log %s (%s): segment %s was cut or corrupt: truncated %d of %d bytes at position "
            "%d (next offset %d); rebuilt its indexes",
            log.name,
            why,
            segment.log_path.name,
            truncated,
            size_before,
            segment.size,
            segment.next_offset,
        )
    else:
        # DEBUG: after kill -9, every partition's last segment is checked (20,000 lines,
        # a tenth of the load); what was cut stays a WARNING, and the load says how many
        # logs it recovered (log_loading.py).
        logger.debug(
            "log %s (%s): checked segment %s (%d bytes) and rebuilt its indexes",
            log.name,
            why,
            segment.log_path.name,
            segment.size,
        )
    return truncated


def rebuild_producer_state(
    log: PartitionLog, end_offset: int, *, clean_shutdown: bool = False
) -> None:
    """Load the newest producer snapshot at or below `end_offset` and replay batch headers
    from there to `end_offset` (Kafka's UnifiedLog.rebuildProducerState).

    After a clean shutdown, no snapshot at all means no producer: a clean close snapshots
    the state whenever it has any (PartitionLog.close), so nothing is replayed, as Kafka
    skips the reload for logs that never saw an idempotent producer."""
    state = log.producer_state
    bound = _replay_bound(log, end_offset)
    start = state.load_latest_snapshot(bound)
    if start is None and clean_shutdown and bound == end_offset:
        state.producers.clear()
        state.update_map_end_offset(end_offset)
        return
    if start is None:
        start = log.log_start_offset
        state.producers.clear()
    replayed = 0
    for segment in log.segments:
        if segment.next_offset <= start or segment.base_offset >= end_offset:
            continue
        found = segment.translate_offset(start)
        if found is None:
            continue
        for pos, header in segment.batches_from(found[0]):
            if header.base_offset >= end_offset:
                break
            if header.base_offset < start or header.producer_id < 0:
                continue
            replay_batch(log, segment, pos, header, segment.txn_index.needs_rebuild)
            replayed += 1
    for segment in log.segments:
        segment.txn_index.needs_rebuild = False
    state.update_map_end_offset(end_offset)
    if replayed:
        logger.info(
            "log %s: rebuilt producer state from offset %s to %s (%d batches)",
            log.name,
            start,
            end_offset,
            replayed,
        )


def _replay_bound(log: PartitionLog, end_offset: int) -> int:
    # A segment whose `.txnindex` is being rebuilt must be replayed whole: the producer
    # state comes from a snapshot at or below its base offset (Kafka's segment recovery).
    rebuilt = [s.base_offset for s in log.segments if s.txn_index.needs_rebuild]
    return min([end_offset, *rebuilt])


def _swap_txn_index(directory: Path, stem: str) -> None:
    # The cleaner copies a segment's aborted transactions unchanged into the cleaned one, so
    # the old and new `.txnindex` are equal: whichever is present is right.
    swapped = directory / (stem + TXN_INDEX_SUFFIX + _SWAP_SUFFIX)
    if swapped.exists():
        os.replace(swapped, directory / (stem + TXN_INDEX_SUFFIX))
