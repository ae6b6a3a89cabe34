"""Moving a partition to another log dir while it is written (AlterReplicaLogDirs).

Kafka's future replica, on one broker: `<target>/<topic>-<partition>.<uuid>-future` is
filled with a copy of the current log, kept appending until it has caught up, then swapped
in for the current log (Kafka's ReplicaAlterLogDirsThread + LogManager.replaceCurrentWithFutureLog):

1. In a worker thread, the rolled segments (immutable: retention may remove one, the
   cleaner replace one, and then the move starts over) are copied with their indexes, the
   records of the active segment as far as they were written, the producer snapshots up
   to the active segment and the leader epoch checkpoint; each file is fsynced. The future
   log is then loaded from that copy in the thread (the active segment's indexes are
   rebuilt from its records, as for a segment that lost them).
2. Catch-up: the batches from the future's log end offset on are read from the current
   log's files in a worker thread and appended to the future log on the Trio thread with
   `append_as_follower` (offsets, epochs and timestamps unchanged; indexes, producer state
   and transaction index follow), a chunk at a time, while producers keep appending to the
   current log.
3. Swap: once what is left is small, it is read and appended, and the logs are swapped in
   one step on the Trio thread: no append can run in between, so none is lost or written
   twice. The current dir is renamed `<topic>-<partition>.<uuid>-delete`, the future dir
   `<topic>-<partition>`, and the PartitionLog keeps its identity (everything holding it
   goes on) but takes the future's segments and state. The old files go after
   file.delete.delay.ms, so fetches still sending from them finish.

After a crash, `resolve_future_dirs` (LogManager.open) removes a `-future` dir whose
partition still has its current dir (the move is abandoned: ask again), and promotes one
whose current dir is gone (the crash came between the two renames of the swap, when the
future held every record).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio

from trio_broker.config import UNLIMITED_RATE
from trio_broker.errors import KafkaError
from trio_broker.log.checkpoints import LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA, fsync_dir
from trio_broker.log.loader import load_log
from trio_broker.log.partition_log import PartitionLog
from trio_broker.log.producer_state import SNAPSHOT_SUFFIX
from trio_broker.log.reader import FileRegion

if TYPE_CHECKING:
    from trio_broker.log.manager import LogManager

__all__ = ["FUTURE_DIR_SUFFIX", "LogDirMove", "parse_future_dir_name", "resolve_future_dirs"]

logger = logging.getLogger(__name__)

FUTURE_DIR_SUFFIX = "-future"
# Bytes read per catch-up step, and the lag below which the rest is appended and swapped
# at once on the Trio thread (a copy of at most this much from the page cache).
CATCH_UP_CHUNK_BYTES = 1 << 20
SWAP_BELOW_BYTES = 256 << 10
MAX_ATTEMPTS = 5


def future_dir_name(topic: str, partition: int) -> str:
    suffix = f"-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"
    return topic[: 255 - len(suffix)] + suffix


def parse_future_dir_name(name: str) -> tuple[str, int] | None:
    """`<topic>-<partition>.<uuid>-future` -> (topic, partition); None for anything else."""
    from trio_broker.log.manager import parse_partition_dir_name

    if not name.endswith(FUTURE_DIR_SUFFIX):
        return None
    base, dot, tag = name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")
    if not dot or len(tag) != 32:
        return None
    return parse_partition_dir_name(base)


def resolve_future_dirs(
    manager: LogManager, futures: list[Path], load: Callable[[Path, tuple[str, int]], Any]
) -> None:
    """After start: drop the future dirs of moves that did not reach their swap, promote
    one whose current dir the swap had already retired (see the module docstring)."""
    for path in futures:
        tp = parse_future_dir_name(path.name)
        if tp is None:
            continue
        if tp in manager.logs:
            logger.info("removing %s: its move to another log dir did not finish", path)
            shutil.rmtree(path, ignore_errors=True)
            continue
        final = path.parent / f"{tp[0]}-{tp[1]}"
        logger.warning("completing the log dir move of %s-%s: %s -> %s", *tp, path, final)
        os.rename(path, final)
        fsync_dir(path.parent)
        load(final, tp)


@attrs.define
class LogDirMove:
    """One partition moving to `target` (what DescribeLogDirs shows as a future replica)."""

    log: PartitionLog
    target: Path
    future: PartitionLog | None = None
    future_dir: Path | None = None
    cancel_scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    done: bool = False
    _truncations: int = 0  # the log's truncation count when the copy began

    @property
    def offset_lag(self) -> int:
        if self.future is None:
            return self.log.log_end_offset - self.log.log_start_offset
        return max(self.log.log_end_offset - self.future.log_end_offset, 0)

    @property
    def size_in_bytes(self) -> int:
        return self.future.size_in_bytes if self.future is not None else 0

    def cancel(self) -> None:
        self.cancel_scope.cancel()

    async def run(self, manager: LogManager) -> None:
        tp = (self.log.topic, self.log.partition)
        try:
            with self.cancel_scope:
                for attempt in range(1, MAX_ATTEMPTS + 1):
                    try:
                        await self._attempt(manager)
                        return
                    except Exception as exc:  # OSError, KafkaError, _Restart: never the broker's
                        if not isinstance(exc, (OSError, KafkaError, _Restart)):
                            logger.exception("moving %s to %s failed", self.log.name, self.target)
                            return
                        self._discard()
                        if not self._still_wanted(manager) or attempt == MAX_ATTEMPTS:
                            logger.error(
                                "moving %s to %s failed: %s", self.log.name, self.target, exc
                            )
                            return
                        logger.info(
                            "moving %s to %s starts over: %s", self.log.name, self.target, exc
                        )
                        await trio.sleep(0.1 * attempt)
        finally:
            if not self.done:
                self._discard()
            if manager.moves.get(tp) is self:
                del manager.moves[tp]

    def _still_wanted(self, manager: LogManager) -> bool:
        log = self.log
        return (
            manager.logs.get((log.topic, log.partition)) is log
            and not log.closed
            and not log.offline
            and self.target not in manager.offline_dirs
        )

    def _discard(self) -> None:
        future, path = self.future, self.future_dir
        self.future = self.future_dir = None
        if future is not None:
            future.close_handlers()
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)

    async def _attempt(self, manager: LogManager) -> None:
        log = self.log
        self.future_dir = path = self.target / future_dir_name(log.topic, log.partition)
        # 1. the rolled segments, and the active one's records so far, copied in a worker
        # thread (the active segment's indexes are rebuilt from its records by load_log).
        segments = log.segments
        active = segments[-1]
        rolled = [
            [s.log_path, s.offset_index.path, s.time_index.path, s.txn_index.path]
            for s in segments[:-1]
        ]
        extra = [log.dir / LEADER_EPOCH_CHECKPOINT, log.dir / PARTITION_METADATA]
        extra += [
            p for p in log.producer_state.list_snapshots() if int(p.stem) <= active.base_offset
        ]
        copied = segments[:-1]
        truncations = log.truncations
        # replica.alter.log.dirs.io.max.bytes.per.second, when set as the move starts
        # (kafka-reassign-partitions sets it before it asks for the move).
        quota = manager.move_quota() if manager.move_quota is not None else None
        if quota is not None and quota.bound >= UNLIMITED_RATE:
            quota = None
        await trio.to_thread.run_sync(
            _copy_files,
            path,
            [f for fs in rolled for f in fs] + extra,
            (active.log_path, active.size),
            None if quota is None else partial(_throttle_in_thread, quota),
        )
        # A segment the cleaner replaced while it was copied may have been copied half old,
        # half new (its log and indexes are separate files): copy again. One that retention
        # removed meanwhile is fine (its records are below the log start offset).
        now_by_base = {s.base_offset: s for s in log.segments}
        if any(now_by_base.get(s.base_offset, s) is not s for s in copied):
            raise _Restart("a segment was replaced by the cleaner during the copy")
        self._truncations = truncations
        self.future = future = await trio.to_thread.run_sync(
            lambda: load_log(
                path,
                log.topic,
                log.partition,
                log.config,
                now_ms=log.now_ms,
                log_start_offset=segments[0].base_offset,
                topic_id=log.topic_id,
            )
        )
        logger.info(
            "moving %s to %s: %d segment(s) copied, catching up from offset %s",
            log.name,
            self.target,
            len(rolled) + 1,
            future.log_end_offset,
        )
        # 2. catch up, reading in a worker thread, appending on the Trio thread
        while True:
            self._check(manager)
            regions = self._regions(CATCH_UP_CHUNK_BYTES)
            if regions is None:
                break  # caught up
            if sum(region.size for region in regions) < SWAP_BELOW_BYTES:
                data = _read_regions(regions)
                future.append_as_follower(data)
                if quota is not None:
                    quota.record(len(data))
                if self._regions(CATCH_UP_CHUNK_BYTES) is None:
                    break
                continue
            data = await trio.to_thread.run_sync(_read_regions, regions)
            self._check(manager)
            future.append_as_follower(data)
            if quota is not None:
                quota.record(len(data))
                # replica.alter.log.dirs.io.max.bytes.per.second: wait while over it.
                while (delay := quota.delay()) > 0:
                    await trio.sleep(delay)
        # 3. swap: no await from the last append to the end of the swap
        self._check(manager)
        self._swap(manager)

    def _check(self, manager: LogManager) -> None:
        if not self._still_wanted(manager):
            raise _Restart("the partition or a log dir is gone")
        future = self.future
        assert future is not None
        if (
            future.log_end_offset > self.log.log_end_offset
            or self.log.truncations != self._truncations
        ):
            raise _Restart("the current log was truncated")

    def _regions(self, max_bytes: int) -> list[FileRegion] | None:
        """File regions of the batches the future lacks; None when it has them all (each
        holds its segment's file open until read)."""
        future = self.future
        assert future is not None
        log = self.log
        if future.log_end_offset >= log.log_end_offset:
            return None
        if future.log_end_offset < log.log_start_offset:
            # Retention went past what the future has: start it at the log start.
            future.truncate_fully_and_start_at(log.log_start_offset)
        try:
            result = log.read(future.log_end_offset, max_bytes, max_offset=log.log_end_offset)
        except KafkaError as exc:
            raise _Restart(f"cannot read the current log: {exc}") from exc
        return result.regions

    def _swap(self, manager: LogManager) -> None:
        log, future = self.log, self.future
        assert future is not None and self.future_dir is not None
        assert future.log_end_offset == log.log_end_offset, (future, log)
        from trio_broker.log.manager import DELETE_DIR_SUFFIX

        old_dir = log.dir
        suffix = f"-{log.partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        delete_dir = old_dir.parent / (log.topic[: 255 - len(suffix)] + suffix)
        final = self.target / old_dir.name
        # Read before the rename what a log loaded after a clean shutdown reads on first
        # use: its leader epochs stay with it, in the new dir.
        log.leader_epoch_cache.read_now()
        # Kafka's order: the current dir is retired first, so no restart ever finds two
        # current dirs; a crash between the renames leaves the future, which is complete.
        os.rename(old_dir, delete_dir)
        try:
            os.rename(self.future_dir, final)
        except OSError as exc:
            try:
                os.rename(delete_dir, old_dir)
            except OSError:
                # Neither dir has the current name: keep the future (it holds every
                # record, and the next start promotes it); the source dir is in doubt.
                logger.exception("cannot undo the swap of %s", log.name)
                self.future_dir = None
                manager.mark_dir_offline(old_dir.parent, exc)
            raise
        _repoint(future, final)
        # What stays in the old dir, deleted after file.delete.delay.ms (fetches may still
        # be sending from its files).
        retired = PartitionLog.__new__(PartitionLog)
        retired.__dict__.update(log.__dict__)
        retired.leader_epoch_cache = future.leader_epoch_cache
        retired.producer_state = future.producer_state
        _repoint(retired, delete_dir)
        retired.closed = True
        # The same PartitionLog object now reads and writes the new files. Its leader epoch
        # cache and producer state stay (they know what no batch says: an epoch begun by a
        # leader election, expired producers) and are written in the new dir from now on.
        log.segments = future.segments
        log._bases = future._bases
        log.pending_deletes = future.pending_deletes
        _repoint(log, final)
        log.recovery_point = min(future.recovery_point, log.log_end_offset)
        log.unflushed_messages = future.unflushed_messages
        self.future = self.future_dir = None
        self.done = True
        manager.retire_log(retired)
        logger.info("moved %s from %s to %s", log.name, old_dir.parent, self.target)


class _Restart(Exception):
    """The current log changed under the copy in a way the future cannot follow."""


def _throttle_in_thread(quota: Any, nbytes: int) -> None:
    """Count `nbytes` copied against the log dir moves' quota and, in the copying worker
    thread, wait while over it; a cancelled move stops waiting."""
    quota.record(nbytes)
    while (delay := quota.delay()) > 0:
        trio.from_thread.check_cancelled()
        time.sleep(min(delay, 0.1))


def _copy_files(
    target: Path,
    files: list[Path],
    head: tuple[Path, int],
    throttle: Callable[[int], None] | None = None,
) -> None:
    """Copy `files` whole and the first `head[1]` bytes of `head[0]` (whole batches: the
    active segment as it was on the Trio thread) into the new dir `target`, fsynced.
    `throttle(n)` after each chunk of n bytes, when the move has a quota."""
    target.mkdir(parents=True)
    src, size = head
    if _copy_chunks(src, target / src.name, size, throttle) < size:
        raise _Restart(f"{src} is shorter than the {size} bytes written to it")
    for src in files:
        if not src.exists():
            if src.name.endswith((".txnindex", LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA)):
                continue  # written only when there is something to keep
            if src.name.endswith(SNAPSHOT_SUFFIX):
                continue  # removed by retention meanwhile; the state is rebuilt
        dst = target / src.name
        if throttle is None:
            shutil.copyfile(src, dst)
            with open(dst, "rb+") as f:
                os.fsync(f.fileno())
            continue
        _copy_chunks(src, dst, None, throttle)
    fsync_dir(target)
    fsync_dir(target.parent)


def _copy_chunks(
    src: Path, dst: Path, size: int | None, throttle: Callable[[int], None] | None
) -> int:
    """Copy the first `size` bytes of `src` (None: all of it) to `dst` a MiB at a time,
    `throttle(n)` after each chunk; fsynced. Returns the bytes copied."""
    copied = 0
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while size is None or copied < size:
            want = 1 << 20 if size is None else min(size - copied, 1 << 20)
            chunk = fin.read(want)
            if not chunk:
                break
            fout.write(chunk)
            copied += len(chunk)
            if throttle is not None:
                throttle(len(chunk))
        fout.flush()
        os.fsync(fout.fileno())
    return copied


def _read_regions(regions: list[FileRegion]) -> bytes:
    parts = []
    for region in regions:
        position, size = region.position, region.size
        data = os.pread(region.fd, size, position)
        if len(data) != size:
            raise _Restart(f"short read of {size} bytes at {position}")
        parts.append(data)
    return b"".join(parts)


def _repoint(log: PartitionLog, new_dir: Path) -> None:
    """After a rename of the partition dir: every path the log holds names the new dir."""
    log.dir = new_dir
    for segment in list(log.segments) + [s for _, s in log.pending_deletes]:
        segment.dir = new_dir
        segment.log_path = new_dir / segment.log_path.name
        for index in (segment.offset_index, segment.time_index, segment.txn_index):
            index.path = new_dir / index.path.name
    log.leader_epoch_cache.moved_to(new_dir / log.leader_epoch_cache.path.name)
    log.producer_state.partition_dir = new_dir
