"""LogManager: every partition log in the broker's log dirs, and their housekeeping.

At start (`open`) it reads each log dir's checkpoints and `meta.properties`, removes
directories left pending deletion, and loads each `<topic>-<partition>/`, recovering from
the recovery point when the last shutdown was not clean (no `.kafka_cleanshutdown`).
`run` is the background task for the broker nursery: retention, flushes, checkpoints and
the delayed deletion of `.deleted` segments and `-delete` directories.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import logging
import math
import os
import shutil
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import trio

from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CorruptCheckpointError,
    PendingSyncs,
    StagedWrites,
    read_meta_properties,
    read_offset_checkpoint,
    sync_filesystem,
    topic_id_to_str,
    write_meta_properties,
    write_offset_checkpoint,
)
from trio_broker.log.config import LogConfig
from trio_broker.log.file_cache import DESCRIPTOR_ERRNOS
from trio_broker.log.leader_epoch import LeaderEpochCache
from trio_broker.log.loader import load_log
from trio_broker.log.log_loading import PendingLog, PendingLogs
from trio_broker.log.partition_log import PartitionLog, wall_clock_ms

__all__ = ["CLEAN_SHUTDOWN_FILE", "LogManager", "parse_partition_dir_name"]

logger = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"  # log/dir_mover.py
_NEVER = 2**63 - 1
# How often leader epoch checkpoints changed meanwhile are written (see `run`).
_EPOCH_WRITE_INTERVAL_S = 0.1

TopicPartition = tuple[str, int]


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """No cyclic garbage collection while logs load: each full collection walks every
    object of the logs loaded so far, a third of the CPU of loading 20,000 (reference
    counting still frees what loading drops)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _write_back(log_dirs: list[Path]) -> None:
    """Start the write-back of a clean stop early (see LogManager._close); its errors are
    the final sync's to report."""
    for log_dir in log_dirs:
        with contextlib.suppress(OSError):
            sync_filesystem(log_dir)


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    """`<topic>-<partition>` -> (topic, partition); None for anything else."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit() or "." in partition:
        return None
    return topic, int(partition)


# At most this many replicas not created yet may have a log dir asked for.
MAX_PREFERRED_DIRS = 10_000


class LogManager:
    def __init__(
        self,
        log_dirs: list[str | os.PathLike[str]],
        *,
        node_id: int,
        cluster_id: str,
        default_config: LogConfig | None = None,
        now_ms: Callable[[], int] = wall_clock_ms,
        retention_check_interval_ms: int = 300_000,  # log.retention.check.interval.ms
        flush_check_interval_ms: int = 1_000,  # how often flush.ms / flush.messages are checked
        flush_offset_checkpoint_interval_ms: int = 60_000,  # log.flush.offset.checkpoint.interval.ms
        flush_start_offset_checkpoint_interval_ms: int = 60_000,  # log.flush.start.offset.checkpoint.interval.ms
        producer_id_expiration_check_interval_ms: int = 600_000,
        recovery_threads_per_data_dir: int = 1,  # num.recovery.threads.per.data.dir
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.default_config = default_config or LogConfig()
        self.now_ms = now_ms
        self.retention_check_interval_ms = retention_check_interval_ms
        self.flush_check_interval_ms = flush_check_interval_ms
        # The quota of log dir moves (replica.alter.log.dirs.io.max.bytes.per.second): a
        # function the broker sets that gives its ReplicationQuota; None: unthrottled.
        self.move_quota: Callable[[], Any] | None = None
        # Called with each scheduled flush's duration in ms (the broker's metrics), or None.
        self.flush_observer: Callable[[float], None] | None = None
        self.flush_offset_checkpoint_interval_ms = flush_offset_checkpoint_interval_ms
        self.flush_start_offset_checkpoint_interval_ms = flush_start_offset_checkpoint_interval_ms
        self.producer_id_expiration_check_interval_ms = producer_id_expiration_check_interval_ms
        self.logs: dict[TopicPartition, PartitionLog] = {}
        # Leader epoch caches whose checkpoint waits to be written (while `run` runs).
        self._epoch_writes: set[LeaderEpochCache] = set()
        self._epochs_deferred = False
        self.directory_ids: dict[Path, uuid.UUID] = {}
        # Logs renamed to `-delete`, with the time they may be removed.
        self._logs_to_delete: list[tuple[int, PartitionLog]] = []
        self.had_clean_shutdown: dict[Path, bool] = {}
        # Log dirs that failed I/O, with the error (Kafka's LogDirFailureChannel): offline
        # until a restart. Their logs answer KAFKA_STORAGE_ERROR; the other dirs go on.
        self.offline_dirs: dict[Path, str] = {}
        # Dirs a write found full (ENOSPC), until `dirs_with_space` finds room: online.
        self.full_dirs: dict[Path, str] = {}
        self.dir_full_listeners: list[Callable[[Path], None]] = []
        # Called as (log dir, its logs) when a dir goes offline: in a cluster the replica
        # manager stops those replicas and tells the controller (Kafka's
        # ReplicaManager.handleLogDirFailure).
        self.dir_failure_listeners: list[Callable[[Path, list[PartitionLog]], None]] = []
        # Log dirs asked for (AlterReplicaLogDirs) for replicas not created yet.
        self.preferred_dirs: dict[TopicPartition, Path] = {}
        self._run_sync: Callable[..., Awaitable[Any]] = trio.to_thread.run_sync
        # Partitions moving to another log dir (log/dir_mover.py: LogDirMove), and the
        # nursery of `run` their tasks go in.
        self.moves: dict[TopicPartition, Any] = {}
        self._nursery: trio.Nursery | None = None
        # Logs found at start and not loaded yet (open(lazy=True)): loaded by `run`'s
        # worker threads, or by the first get_log that asks for one.
        self.pending = PendingLogs(self._load_pending)
        self.recovery_threads_per_data_dir = max(recovery_threads_per_data_dir, 1)
        # Called with each log loaded after start (from a worker thread, or the event
        # loop's): a lone broker's leader catches its high watermark up (cluster/topics.py).
        self.on_log_loaded: Callable[[PartitionLog], None] | None = None
        self._loaded = trio.Event()  # set once no log waits to be loaded
        self._write_back_thread: threading.Thread | None = None  # see start_write_back

    # -- start -----------------------------------------------------------------------------

    def open(
        self, topic_configs: Mapping[str, LogConfig] | None = None, *, lazy: bool = False
    ) -> None:
        """Load every log in every log dir (blocking: recovery may read whole segments).

        `lazy`: only list them (log/log_loading.py); `run` loads them in worker threads,
        and `get_log` loads one at once when it is asked for first. A log dir move that a
        crash interrupted (a `-future` dir) makes the load eager: rare, and it needs both
        logs to decide."""
        topic_configs = topic_configs or {}
        futures: list[Path] = []
        found: list[tuple[TopicPartition, PendingLog]] = []
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._check_meta_properties(log_dir)
            marker = log_dir / CLEAN_SHUTDOWN_FILE
            clean = marker.exists()
            self.had_clean_shutdown[log_dir] = clean
            # One scan, sorted by name (d_type says which are dirs: no stat per entry).
            with os.scandir(log_dir) as scan:
                subdirs = sorted(e.name for e in scan if e.is_dir())
            if not clean and any(parse_partition_dir_name(name) for name in subdirs):
                logger.warning("log dir %s was not shut down cleanly: recovering logs", log_dir)
            seen: set[TopicPartition] = {tp for tp, _ in found}
            recovery_points = self._read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
            start_offsets = self._read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
            high_watermarks = self._read_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT)
            for name in subdirs:
                if name.endswith(DELETE_DIR_SUFFIX):
                    entry = log_dir / name
                    logger.info("removing partition directory %s left pending deletion", entry)
                    shutil.rmtree(entry, ignore_errors=True)
                    continue
                if name.endswith(FUTURE_DIR_SUFFIX):
                    futures.append(log_dir / name)
                    continue
                tp = parse_partition_dir_name(name)
                if tp is None:
                    continue
                if tp in seen:
                    raise RuntimeError(f"duplicate log directories for {tp}: {log_dir / name}")
                seen.add(tp)
                found.append(
                    (
                        tp,
                        PendingLog(
                            log_dir=log_dir,
                            name=name,
                            config=topic_configs.get(tp[0], self.default_config),
                            recovery_point=recovery_points.get(tp, 0),
                            log_start_offset=start_offsets.get(tp),
                            high_watermark=high_watermarks.get(tp),
                            clean_shutdown=clean,
                        ),
                    )
                )
            # From now on a crash must be detected as unclean.
            marker.unlink(missing_ok=True)
        for tp, pending in found:
            self.pending.add(tp, pending)
        if not lazy or futures:
            with _no_cyclic_gc():
                for tp, _ in found:
                    self.pending.load_now(tp)
        if futures:
            from trio_broker.log.dir_mover import resolve_future_dirs

            def load_moved(path: Path, tp: TopicPartition) -> None:
                self.logs[tp] = self._watch(
                    load_log(
                        path,
                        tp[0],
                        tp[1],
                        topic_configs.get(tp[0], self.default_config),
                        now_ms=self.now_ms,
                        clean_shutdown=False,
                    )
                )

            resolve_future_dirs(self, futures, load_moved)
        if self.pending:
            logger.info(
                "found %d logs in %s; loading them in the background",
                len(self.pending),
                [str(d) for d in self.log_dirs],
            )
        else:
            logger.info("loaded %d logs from %s", len(self.logs), [str(d) for d in self.log_dirs])

    def _load_pending(self, tp: TopicPartition, pending: PendingLog) -> PartitionLog | None:
        """Load a log found at start (a worker thread's, or the event loop's on first use)."""
        log_dir = pending.log_dir
        if log_dir in self.offline_dirs:
            return None
        try:
            log = load_log(
                pending.path,
                tp[0],
                tp[1],
                pending.config,
                now_ms=self.now_ms,
                recovery_point=pending.recovery_point,
                log_start_offset=pending.log_start_offset or 0,
                high_watermark=pending.high_watermark or 0,
                clean_shutdown=pending.clean_shutdown,
                listed=True,
            )
        except OSError as exc:
            if exc.errno in DESCRIPTOR_ERRNOS:
                raise  # not the disk: the dir stays online, the next get_log tries again
            logger.error("cannot load the log of %s-%s in %s: %s", tp[0], tp[1], log_dir, exc)
            self._offline_from_any_thread(log_dir, exc)
            raise
        self.logs[tp] = self._watch(log)
        if self.on_log_loaded is not None:
            self.on_log_loaded(log)
        return log

    def _offline_from_any_thread(self, log_dir: Path, exc: OSError) -> None:
        if threading.current_thread() is threading.main_thread():
            self.mark_dir_offline(log_dir, exc)
            return
        try:
            trio.from_thread.run_sync(self.mark_dir_offline, log_dir, exc)
        except RuntimeError:  # a thread trio did not start (tests): no event loop to ask
            self.mark_dir_offline(log_dir, exc)

    def partitions(self) -> list[TopicPartition]:
        """Every partition with a log here, loaded or not (nothing is loaded to say so)."""
        return list(self.logs) + self.pending.partitions()

    async def _load_in_background(self) -> None:
        """`num.recovery.threads.per.data.dir` threads per log dir load the pending logs."""
        try:
            await self._load_pending_logs()
        finally:
            self._loaded.set()

    async def wait_loaded(self) -> None:
        """Until every log found at start is loaded (`run` loads them)."""
        await self._loaded.wait()

    async def _load_pending_logs(self) -> None:
        if not self.pending:
            return

        async def worker() -> None:
            # Short slices: a stop waits for at most one of them, not for the whole load.
            while await trio.to_thread.run_sync(self.pending.load_batch):
                pass

        with _no_cyclic_gc():
            async with trio.open_nursery() as nursery:
                for _ in range(self.recovery_threads_per_data_dir * len(self.log_dirs)):
                    nursery.start_soon(worker)

    def _check_meta_properties(self, log_dir: Path) -> None:
        props = read_meta_properties(log_dir)
        if props is None:
            directory_id = uuid.uuid4()
            write_meta_properties(
                log_dir,
                {
                    "version": "1",
                    "node.id": str(self.node_id),
                    "cluster.id": self.cluster_id,
                    "directory.id": topic_id_to_str(directory_id),
                },
            )
            self.directory_ids[log_dir] = directory_id
            return
        if props.get("cluster.id") not in (None, self.cluster_id):
            raise RuntimeError(
                f"log dir {log_dir} belongs to cluster {props.get('cluster.id')!r}, "
                f"not {self.cluster_id!r}"
            )
        if props.get("node.id") not in (None, str(self.node_id)):
            raise RuntimeError(
                f"log dir {log_dir} belongs to node {props.get('node.id')}, not {self.node_id}"
            )
        from trio_broker.log.checkpoints import topic_id_from_str

        if "directory.id" in props:
            self.directory_ids[log_dir] = topic_id_from_str(props["directory.id"])

    @staticmethod
    def _read_checkpoint(path: Path) -> dict[TopicPartition, int]:
        try:
            return read_offset_checkpoint(path)
        except CorruptCheckpointError:
            logger.warning("ignoring corrupt checkpoint file %s", path, exc_info=True)
            return {}

    # -- failed log dirs -------------------------------------------------------------------

    def _watch(self, log: PartitionLog) -> PartitionLog:
        log.on_dir_failure = self.mark_dir_offline
        log.on_dir_full = self._dir_full
        if self._epochs_deferred:
            log.leader_epoch_cache.deferred = self._epoch_writes
        return log

    # -- leader epoch checkpoints, written together ------------------------------------------

    def _defer_epoch_writes(self) -> None:
        """While `run` runs: leader epoch checkpoints changed on the event loop are written
        by `_write_epoch_checkpoints` (Kafka writes them without an fsync as well; a flush
        or close syncs them, and after a crash the log's batches restore the epochs past
        the recovery point)."""
        self._epochs_deferred = True
        for log in self.all_logs():
            log.leader_epoch_cache.deferred = self._epoch_writes

    def write_epoch_checkpoints(self) -> None:
        """Write the deferred leader epoch checkpoints now, here (at a stop)."""
        self._epochs_deferred = False
        for log in self.all_logs():
            log.leader_epoch_cache.deferred = None
        pending = [(c, c.entries()) for c in self._epoch_writes]
        self._epoch_writes.clear()
        _write_epochs(pending)

    async def _write_epoch_checkpoints(self) -> None:
        while True:
            await trio.sleep(_EPOCH_WRITE_INTERVAL_S)
            if not self._epoch_writes:
                continue
            # The entries are taken here, on the event loop that changes them.
            pending = [(c, c.entries()) for c in self._epoch_writes]
            self._epoch_writes.clear()
            await self._run_sync(_write_epochs, pending)

    # -- full log dirs ---------------------------------------------------------------------

    def _dir_full(self, log_dir: Path, exc: OSError) -> None:
        """A write in `log_dir` failed for want of space and was undone: the dir stays
        online (a lone broker heals once space is freed). Listeners hear of it once per
        time it fills (a cluster's replica manager hands the dir's leaderships over);
        `dirs_with_space()` says when it has room again."""
        log_dir = Path(log_dir)
        if log_dir in self.full_dirs:
            return
        self.full_dirs[log_dir] = f"{type(exc).__name__}: {exc}"
        logger.warning("log dir %s is full: %s", log_dir, exc)
        for listener in self.dir_full_listeners:
            listener(log_dir)

    def dirs_with_space(self, min_free: int) -> list[Path]:
        """The full dirs that have `min_free` bytes free again; no longer counted full."""
        freed = []
        for log_dir in list(self.full_dirs):
            try:
                st = os.statvfs(log_dir)
            except OSError:
                continue
            if st.f_bavail * st.f_frsize >= min_free:
                del self.full_dirs[log_dir]
                logger.info("log dir %s has room again", log_dir)
                freed.append(log_dir)
        return freed

    def is_full(self, log: PartitionLog) -> bool:
        return bool(self.full_dirs) and log.dir.parent in self.full_dirs

    def mark_dir_offline(self, log_dir: Path, exc: BaseException) -> None:
        """Take `log_dir` offline after an I/O error that left its files in doubt (Kafka's
        LogDirFailureChannel + ReplicaManager.handleLogDirFailure): every log in it stops
        (no more writes, not even at shutdown) and answers KAFKA_STORAGE_ERROR until the
        broker restarts and recovery checks the files. Logs in other dirs go on."""
        log_dir = Path(log_dir)
        if log_dir in self.offline_dirs:
            return
        self.offline_dirs[log_dir] = f"{type(exc).__name__}: {exc}"
        failed = []
        for log in self.all_logs():
            if log.dir.parent == log_dir:
                log.offline = True
                log.closed = True
                failed.append(log)
        names = [log.name for log in failed]
        for move in list(self.moves.values()):
            if move.target == log_dir or move.log.offline:
                move.cancel()
        logger.error(
            "log dir %s is offline after an I/O error (%s); its %d partition(s) answer "
            "KAFKA_STORAGE_ERROR until a restart: %s",
            log_dir,
            exc,
            len(names),
            names,
        )
        for listener in self.dir_failure_listeners:
            listener(log_dir, failed)

    def online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    # -- logs ------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The log, loaded now if it was found at start and not loaded yet."""
        log = self.logs.get((topic, partition))
        if log is None and self.pending and self.pending.load_now((topic, partition)):
            log = self.logs.get((topic, partition))
        return log

    def loaded_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The log if it is loaded; None otherwise (nothing is loaded to answer)."""
        return self.logs.get((topic, partition))

    def all_logs(self) -> list[PartitionLog]:
        """A snapshot of the loaded logs. Iterate it, never `self.logs`: the flusher and
        checkpoint threads read while the event loop, and loading threads, add logs (a
        dict changing size under a loop over it raises)."""
        return list(self.logs.values())

    def create_log(
        self,
        topic: str,
        partition: int,
        topic_id: uuid.UUID | None = None,
        config: LogConfig | None = None,
        *,
        pending: PendingSyncs | None = None,
    ) -> PartitionLog:
        """The log of (topic, partition), created in the least loaded log dir if missing.
        `pending`: see `load_log` (the caller then fsyncs before relying on the log)."""
        existing = self.get_log(topic, partition)
        if existing is not None:
            if topic_id is not None and existing.topic_id not in (None, topic_id):
                raise KafkaError(
                    ErrorCode.INCONSISTENT_TOPIC_ID,
                    f"log {existing.name} has topic id {existing.topic_id}, not {topic_id}",
                )
            return existing
        online = self.online_dirs()
        if not online:
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"no online log dir for {topic}-{partition}: {self.offline_dirs}",
            )
        preferred = self.preferred_dirs.pop((topic, partition), None)
        if preferred in online:
            log_dir = preferred
        elif len(online) == 1:
            log_dir = online[0]
        else:
            counts = {d: 0 for d in online}
            for log in self.all_logs():
                parent = log.dir.parent
                if parent in counts:
                    counts[parent] += 1
            log_dir = min(online, key=lambda d: counts[d])
        path = log_dir / f"{topic}-{partition}"
        existed = path.exists()
        try:
            log = load_log(
                path,
                topic,
                partition,
                config or self.default_config,
                now_ms=self.now_ms,
                topic_id=topic_id,
                pending=pending,
            )
        except OSError as exc:
            # A full disk: nothing half-made stays behind, and the caller gets an error
            # code to answer (topic creation is retried by the client).
            if not existed:
                shutil.rmtree(path, ignore_errors=True)
            self._creation_failed(log_dir, exc)
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"cannot create the log of {topic}-{partition} in {log_dir}: {exc}",
            ) from exc
        self.logs[(topic, partition)] = self._watch(log)
        logger.info("created log %s in %s", log.name, log_dir)
        return log

    def _creation_failed(self, log_dir: Path, exc: OSError) -> None:
        # A full disk leaves the dir online (creation is retried once there is space), and
        # so does a lack of descriptors (EMFILE, ENFILE: a process or system limit, not the
        # disk): the new partition fails, the others go on. Any other error leaves the
        # dir's files in doubt.
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, *DESCRIPTOR_ERRNOS):
            self.mark_dir_offline(log_dir, exc)

    def new_logs_not_durable(self, exc: OSError) -> Path | None:
        """`PendingSyncs.sync()` of logs made with `pending` failed on `exc.filename`: its
        log dir is handled as when creating a log fails; returns that dir."""
        failed = Path(exc.filename or "")
        log_dir = next((d for d in self.log_dirs if d == failed or d in failed.parents), None)
        logger.error("new logs in %s are not durable: %s", log_dir, exc)
        if log_dir is not None:
            self._creation_failed(log_dir, exc)
        return log_dir

    def delete_log(self, topic: str, partition: int) -> None:
        """Rename the partition dir to `<topic>-<partition>.<uuid>-delete`; the files go
        after file.delete.delay.ms, so in-flight fetches keep valid file regions."""
        self.get_log(topic, partition)  # one found at start and not loaded yet: now
        log = self.logs.pop((topic, partition), None)
        if log is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no log for {topic}-{partition}"
            )
        suffix = f"-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        name = topic[: 255 - len(suffix)] + suffix
        log.rename_dir(log.dir.parent / name)
        self._logs_to_delete.append((self.now_ms() + log.config.file_delete_delay_ms, log))
        logger.info("log %s-%s scheduled for deletion as %s", topic, partition, name)

    def retire_log(self, log: PartitionLog) -> None:
        """Delete a closed log's (renamed `-delete`) dir after file.delete.delay.ms."""
        self._logs_to_delete.append((self.now_ms() + log.config.file_delete_delay_ms, log))

    def _prefer(self, topic: str, partition: int, log_dir: Path) -> None:
        preferred = self.preferred_dirs
        preferred.pop((topic, partition), None)
        preferred[(topic, partition)] = log_dir
        while len(preferred) > MAX_PREFERRED_DIRS:  # what clients ask for, bounded
            del preferred[next(iter(preferred))]

    def alter_log_dir(self, topic: str, partition: int, path: str) -> ErrorCode:
        """AlterReplicaLogDirs for one partition: start moving it to the log dir `path`
        (Kafka's answers: LOG_DIR_NOT_FOUND, KAFKA_STORAGE_ERROR, UNKNOWN_TOPIC_OR_PARTITION)."""
        by_abspath = {Path(os.path.abspath(d)): d for d in self.log_dirs}
        target = by_abspath.get(Path(os.path.abspath(path))) if os.path.isabs(path) else None
        if target is None:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if target in self.offline_dirs:
            return ErrorCode.KAFKA_STORAGE_ERROR
        log = self.get_log(topic, partition)
        if log is None:
            # Not here yet (a reassignment is about to add it): remembered, so that the
            # replica is created in `target` instead of copied there (Kafka's
            # preferredLogDirs). The caller asks again once the replica exists.
            self._prefer(topic, partition, target)
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if log.offline:
            return ErrorCode.KAFKA_STORAGE_ERROR
        move = self.moves.pop((topic, partition), None)
        if move is not None:
            if move.target == target:
                self.moves[(topic, partition)] = move
                return ErrorCode.NONE
            move.cancel()  # a new destination replaces the old one, as in Kafka
        if log.dir.parent == target:
            return ErrorCode.NONE
        if self._nursery is None:
            return ErrorCode.KAFKA_STORAGE_ERROR  # not running (yet)
        from trio_broker.log.dir_mover import LogDirMove

        move = self.moves[(topic, partition)] = LogDirMove(log, target)
        self._nursery.start_soon(move.run, self)
        logger.info("moving %s from %s to %s", log.name, log.dir.parent, target)
        return ErrorCode.NONE

    def delete_pending(self, now_ms: int | None = None, *, force: bool = False) -> int:
        """Remove deleted logs and `.deleted` segment files whose delay has passed."""
        now = self.now_ms() if now_ms is None else now_ms
        removed = 0
        keep = []
        for deadline, log in self._logs_to_delete:
            if force or deadline <= now:
                log.delete()
                removed += 1
            else:
                keep.append((deadline, log))
        self._logs_to_delete = keep
        for log in self.all_logs():
            removed += log.delete_expired_files(now, force=force)
        return removed

    # -- checkpoints -----------------------------------------------------------------------

    def _logs_by_dir(self) -> dict[Path, list[PartitionLog]]:
        """The logs of each online log dir (an offline dir is not written to)."""
        # Grouped by the parent's string: Path.parent and Path hashing, per log, were most of
        # the time a checkpoint of 20,000 logs took.
        if len(self.log_dirs) == 1:
            return {d: self.all_logs() for d in self.online_dirs()}
        online = {str(d): d for d in self.online_dirs()}
        by_name: dict[str, list[PartitionLog]] = {name: [] for name in online}
        dirname = os.path.dirname
        for log in self.all_logs():
            logs = by_name.get(dirname(str(log.dir)))
            if logs is not None:
                logs.append(log)
        return {online[name]: logs for name, logs in by_name.items()}

    def _write_checkpoints(
        self,
        name: str,
        offsets: Callable[[list[PartitionLog]], dict[TopicPartition, int]],
        stored: str,
        by_dir: dict[Path, list[PartitionLog]] | None = None,
        staged: dict[Path, StagedWrites] | None = None,
    ) -> list[Path]:
        """Write `name` in every online log dir; returns the dirs where that failed.

        A write that fails (ENOSPC) leaves the previous file whole (atomic_write writes a
        temporary file and renames it), so it is logged and tried again next time.
        `staged`: only staged in each dir's StagedWrites (a clean stop's, see `_close`).
        """
        failed = []
        for log_dir, logs in (by_dir or self._logs_by_dir()).items():
            values = offsets(logs)
            if self.pending:
                # Logs not loaded yet keep what the last checkpoint said of them.
                values = {**self.pending.stored_offsets(log_dir, stored), **values}
            try:
                write_offset_checkpoint(
                    log_dir / name, values, staged=None if staged is None else staged[log_dir]
                )
            except OSError as exc:
                logger.error("cannot write %s in %s (the old one stays): %s", name, log_dir, exc)
                failed.append(log_dir)
        return failed

    def checkpoint_recovery_points(
        self,
        by_dir: dict[Path, list[PartitionLog]] | None = None,
        staged: dict[Path, StagedWrites] | None = None,
    ) -> list[Path]:
        return self._write_checkpoints(
            RECOVERY_POINT_CHECKPOINT,
            lambda logs: {(log.topic, log.partition): log.recovery_point for log in logs},
            "recovery_point",
            by_dir,
            staged,
        )

    def checkpoint_log_start_offsets(
        self,
        by_dir: dict[Path, list[PartitionLog]] | None = None,
        staged: dict[Path, StagedWrites] | None = None,
    ) -> list[Path]:
        # Like Kafka, only logs whose start moved past their first segment need an entry.
        return self._write_checkpoints(
            LOG_START_OFFSET_CHECKPOINT,
            lambda logs: {
                (log.topic, log.partition): log.log_start_offset
                for log in logs
                if log.log_start_offset > log.segments[0].base_offset
            },
            "log_start_offset",
            by_dir,
            staged,
        )

    def checkpoint_high_watermarks(
        self,
        by_dir: dict[Path, list[PartitionLog]] | None = None,
        staged: dict[Path, StagedWrites] | None = None,
    ) -> list[Path]:
        return self._write_checkpoints(
            REPLICATION_OFFSET_CHECKPOINT,
            lambda logs: {(log.topic, log.partition): log.high_watermark for log in logs},
            "high_watermark",
            by_dir,
            staged,
        )

    def checkpoint(self, staged: dict[Path, StagedWrites] | None = None) -> list[Path]:
        """Write the three offset checkpoint files of every online log dir (blocking:
        fsyncs); returns the dirs where a write failed. `staged`: see _write_checkpoints."""
        by_dir = self._logs_by_dir()
        failed = self.checkpoint_recovery_points(by_dir, staged)
        failed += self.checkpoint_log_start_offsets(by_dir, staged)
        failed += self.checkpoint_high_watermarks(by_dir, staged)
        return failed

    # -- stop ------------------------------------------------------------------------------

    def close(self, *, release: bool = True) -> None:
        """Flush and close every log, write checkpoints and the clean-shutdown marker.

        Never raises for I/O (a stop on a full disk must exit): what fails is logged, and a
        dir where anything failed gets no clean-shutdown marker, so the next start runs
        recovery there, which keeps every whole batch. Offline dirs are not written at all.
        `release=False`: the closed logs stay listed (a broker whose process ends next:
        freeing 20,000 logs' objects one by one was the last tenth of a second of a stop).
        """
        unclean: set[Path] = set(self.offline_dirs)
        started = time.perf_counter()
        try:
            self.write_epoch_checkpoints()
        except OSError as exc:
            # Each log's close writes its own again (and says so if that fails too).
            logger.error("cannot write leader epoch checkpoints: %s", exc)
        # No collection while closing: the closes make garbage by the thousand, and a
        # collection of every generation over a broker of 5,000 logs took 0.1 s of the
        # close (more with more). What the closes leave goes by reference counting.
        collecting = gc.isenabled()
        gc.disable()
        phases: dict[str, float] = {}
        try:
            self._close(unclean, phases)
        finally:
            if collecting:
                gc.enable()
        logger.info(
            "log manager closed %d logs in %.3f s (%s)",
            len(self.logs),
            time.perf_counter() - started,
            ", ".join(f"{name} {seconds:.3f} s" for name, seconds in phases.items()),
        )
        if not release:
            return
        # The closed logs go now, by reference counting, instead of by the cyclic collector
        # at the process's exit: 20,000 logs' objects walked there added a second to a stop.
        for log in self.all_logs():
            log.on_dir_failure = None
            log.on_dir_full = None
        self.logs.clear()

    def start_write_back(self) -> None:
        """A stop begins (SIGTERM): write back what the logs wrote since their last flush,
        in a thread (syncfs releases the GIL), while the broker drains its requests and
        closes its logs (see _close). Nothing relies on it: the close syncs again."""
        running = self._write_back_thread
        if running is not None and running.is_alive():
            return
        thread = threading.Thread(
            target=_write_back, args=(self.online_dirs(),), name="log-writeback", daemon=True
        )
        thread.start()
        self._write_back_thread = thread

    def _close(self, unclean: set[Path], phases: dict[str, float]) -> None:
        """The close's steps; `phases` gets the seconds each took (for the log line)."""
        mark = time.perf_counter()

        def phase(name: str) -> None:
            nonlocal mark
            now = time.perf_counter()
            phases[name] = now - mark
            mark = now

        def close_one(log: PartitionLog) -> Path | None:
            """Close one log; the log dir to leave unclean if that failed."""
            if log.offline:
                log.close_handlers()
                return None
            try:
                # Written without an fsync per file: one sync of each file system below
                # makes them all durable before the recovery points say they are.
                log.close(sync=False)
            except OSError as exc:
                # A full disk is no bug: one line, no traceback.
                logger.error("error closing log %s: %s", log.name, exc)
                return log.dir.parent
            return None

        # What the logs wrote since their last flush is written back while they close (and
        # since the stop began, see start_write_back), so that the sync after the closes,
        # the one the recovery points rely on, finds little left to do.
        self.start_write_back()
        # One thread: closing in four was slower here (the GIL; each close is mostly Python).
        failed = [close_one(log) for log in self.all_logs()]
        phase("closes")
        early = self._write_back_thread
        if early is not None:
            early.join()
        phase("write-back")
        unclean.update(d for d in failed if d is not None)
        # The checkpoints and the clean-shutdown marker are written beside their place now
        # and made durable by the same sync as the logs; then they are renamed into place,
        # the checkpoints first: a dir's rename is durable before the next one's (the dir
        # is synced in between), so the marker never stands without the recovery points
        # it vouches for, and those never say more than is on disk.
        online = self.online_dirs()
        staged = {log_dir: StagedWrites() for log_dir in online}
        unclean.update(self.checkpoint(staged))
        phase("checkpoints")
        # Logs never loaded (a stop during the load) still need the recovery they were due.
        unclean.update(self.pending.unclean_dirs())
        try:
            self.delete_pending(force=True)
        except OSError:
            logger.exception("error removing deleted logs")
        markers: dict[Path, StagedWrites] = {}
        for log_dir in online:
            if log_dir in unclean:
                continue
            marker = markers[log_dir] = StagedWrites()
            try:
                marker.write(log_dir / CLEAN_SHUTDOWN_FILE, b'{"version":0,"brokerEpoch":-1}')
            except OSError as exc:
                logger.error("log dir %s: cannot write the clean-shutdown marker: %s", log_dir, exc)
                unclean.add(log_dir)
        for log_dir in online:
            try:
                sync_filesystem(log_dir)
            except OSError as exc:
                logger.error("log dir %s: cannot sync its file system: %s", log_dir, exc)
                unclean.add(log_dir)
                staged[log_dir].discard()  # the old checkpoints stay: nothing new is sure
        phase("sync")
        for log_dir in online:
            try:
                staged[log_dir].commit()
                if log_dir not in unclean:
                    markers[log_dir].commit()
            except OSError as exc:
                logger.error("log dir %s: cannot put its checkpoints in place: %s", log_dir, exc)
                unclean.add(log_dir)
            finally:
                if log_dir in markers:
                    markers[log_dir].discard()  # left only when not committed
        for log_dir in self.log_dirs:
            if log_dir in unclean:
                logger.warning(
                    "log dir %s: no clean-shutdown marker; the next start recovers it", log_dir
                )
        phase("marker")

    # -- background maintenance ------------------------------------------------------------

    def run_retention(self, now_ms: int | None = None) -> int:
        """One retention pass over all logs; returns the number of segments deleted."""
        now = self.now_ms() if now_ms is None else now_ms
        deleted = 0
        for log in self.all_logs():
            if not log.closed:
                deleted += log.delete_old_segments(now)
        return deleted

    async def run(
        self,
        *,
        clock: Callable[[], float] = trio.current_time,
        run_sync: Callable[..., Awaitable[Any]] = trio.to_thread.run_sync,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Housekeeping for the broker nursery; runs until cancelled.

        `clock` (seconds, trio's clock by default) paces the loop; retention and roll
        decisions use the manager's `now_ms`, so tests can drive both with autojump_clock.
        Blocking work (fsync, unlink) goes through `run_sync`, a worker thread by default;
        tests under autojump_clock pass an inline runner, since virtual time would run on
        while a thread works.
        """
        self._run_sync = run_sync
        start = clock()
        intervals = {
            "retention": self.retention_check_interval_ms,
            "flush": self.flush_check_interval_ms,
            "recovery_checkpoint": self.flush_offset_checkpoint_interval_ms,
            "start_checkpoint": self.flush_start_offset_checkpoint_interval_ms,
            "producer_expiry": self.producer_id_expiration_check_interval_ms,
        }
        due = {name: start + ms / 1000 for name, ms in intervals.items() if 0 < ms < _NEVER}
        self._defer_epoch_writes()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery  # log dir moves (AlterReplicaLogDirs) run here
            nursery.start_soon(self._load_in_background)
            nursery.start_soon(self._write_epoch_checkpoints)
            task_status.started()
            while True:
                next_due = min(due.values(), default=math.inf)
                await trio.sleep(max(next_due - clock(), 0))
                now = clock()
                for name, when in list(due.items()):
                    if when > now:
                        continue
                    due[name] = now + intervals[name] / 1000
                    if self._write_back_thread is not None:
                        # The broker is stopping: the close flushes and checkpoints every
                        # log (the flush check alone looks at each log every second).
                        continue
                    try:
                        await self._run_task(name)
                    except OSError:
                        logger.exception("log maintenance task %s failed", name)

    async def _run_task(self, name: str) -> None:
        if name == "retention":
            deleted = self.run_retention()
            if deleted:
                logger.info("retention deleted %d segment(s)", deleted)
        elif name == "flush":
            now = self.now_ms()
            for log in self.all_logs():
                target = log.flush_target(now)
                if target is not None:
                    log.last_flush_ms = now
                    try:
                        started = time.perf_counter()
                        await self._run_sync(log.flush, target)
                        if self.flush_observer is not None:
                            self.flush_observer((time.perf_counter() - started) * 1000)
                    except OSError as exc:
                        # A full disk (the leader epoch checkpoint): the recovery point
                        # stays where it was; the next flush tries again. Others go on.
                        logger.error("flush of %s failed: %s", log.name, exc)
            if self._has_pending_deletes():
                await self._run_sync(self.delete_pending, now)
        elif name == "recovery_checkpoint":
            by_dir = self._logs_by_dir()
            await self._run_sync(self.checkpoint_recovery_points, by_dir)
            await self._run_sync(self.checkpoint_high_watermarks, by_dir)
        elif name == "start_checkpoint":
            await self._run_sync(self.checkpoint_log_start_offsets)
        elif name == "producer_expiry":
            now = self.now_ms()
            for log in self.all_logs():
                log.remove_expired_producers(now)

    def _has_pending_deletes(self) -> bool:
        now = self.now_ms()
        if any(deadline <= now for deadline, _ in self._logs_to_delete):
            return True
        return any(
            deadline <= now for log in self.all_logs() for deadline, _ in log.pending_deletes
        )


def _write_epochs(pending: list[tuple[LeaderEpochCache, list[tuple[int, int]]]]) -> None:
    """Write leader epoch checkpoints taken on the event loop (in a worker thread). A file
    that cannot be written (a full disk, a partition deleted meanwhile) keeps what it held;
    the log's next flush writes it again."""
    for cache, entries in pending:
        try:
            cache.write_entries(entries, sync=False)
        except OSError as exc:
            logger.warning("leader epoch checkpoint %s not written: %s", cache.path, exc)
