"""Loading a broker's logs after it starts serving: in worker threads, or at first use.

A broker with tens of thousands of partitions cannot make its clients wait until every log
is loaded (Kafka's LogManager.loadLogs, and recovery after a crash) before it answers.
So the LogManager only lists the partition directories at start (`PendingLogs.add`), and:

- `num.recovery.threads.per.data.dir` worker threads per log dir load them in the
  background (`load_batch`, called through trio.to_thread.run_sync in short slices, so
  that a stop does not wait for the whole load);
- a request for a partition not loaded yet loads it at once on the event loop's thread
  (`load_now`), or waits for the worker loading it: to a client the partition answers as
  if it had been loaded all along, only later.

Until a log is loaded, checkpoints keep what the files said of it (`stored_offsets`), so
that writing them while loading never forgets a recovery point.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from trio_broker.log.checkpoints import child
from trio_broker.log.config import LogConfig

if TYPE_CHECKING:
    from trio_broker.log.partition_log import PartitionLog

__all__ = ["PendingLog", "PendingLogs"]

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# How long the loading workers stay paused after the event loop's thread loaded a log.
_PAUSE_S = 0.01


@attrs.define(kw_only=True)
class PendingLog:
    """A partition directory found at start, and what the log dir's checkpoints say of it."""

    log_dir: Path
    name: str  # of the partition directory in log_dir
    config: LogConfig
    recovery_point: int
    log_start_offset: int | None  # None: not in log-start-offset-checkpoint
    high_watermark: int | None
    clean_shutdown: bool
    loading: bool = False  # someone is loading it (PendingLogs.done tells when it is over)

    @property
    def path(self) -> Path:
        # Joined only when loading: 20,000 Path joins at start took half a second.
        return child(self.log_dir, self.name)


class PendingLogs:
    """The logs not loaded yet; thread-safe. `load` turns a PendingLog into a log and
    publishes it (the LogManager's), raising on failure."""

    def __init__(self, load: Callable[[TopicPartition, PendingLog], PartitionLog | None]) -> None:
        self._load = load
        self._pending: dict[TopicPartition, PendingLog] = {}
        self._queue: collections.deque[TopicPartition] = collections.deque()
        self._lock = threading.Lock()
        # Notified whenever a load ends. One for all logs: an Event per log was a twentieth
        # of a load's CPU, and waiting for a worker's log is rare (it is loading it now).
        self._done = threading.Condition(self._lock)
        # Loads on the event loop's thread (a request asked for a pending log) in progress,
        # and when the last one ended: the workers pause meanwhile and for _PAUSE_S after.
        # Two threads loading under one GIL hand it over at every file operation: a request
        # for every partition, sent while the workers loaded, cost twice the CPU of one
        # thread loading them all.
        self._foreground = 0
        self._foreground_ended = 0.0
        self._resume = threading.Condition(self._lock)  # never notified: paused workers poll
        self.started = time.perf_counter()
        self.total = 0
        self.unclean = 0  # of them, after an unclean shutdown: recovered

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, tp: object) -> bool:
        return tp in self._pending

    def add(self, tp: TopicPartition, pending: PendingLog) -> None:
        self._pending[tp] = pending
        self._queue.append(tp)
        self.total += 1
        self.unclean += not pending.clean_shutdown

    def partitions(self) -> list[TopicPartition]:
        with self._lock:
            return list(self._pending)

    def stored_offsets(self, log_dir: Path, field: str) -> dict[TopicPartition, int]:
        """`field` of every pending log of `log_dir` that has one (for the checkpoints)."""
        with self._lock:
            out = {}
            for tp, pending in self._pending.items():
                value = getattr(pending, field)
                if value is not None and pending.log_dir == log_dir:
                    out[tp] = value
            return out

    def unclean_dirs(self) -> set[Path]:
        """Log dirs with a log still to recover from an unclean shutdown."""
        with self._lock:
            return {p.log_dir for p in self._pending.values() if not p.clean_shutdown}

    def _claim(self, tp: TopicPartition) -> tuple[PendingLog | None, bool]:
        """(pending, mine): mine when this caller is to load it."""
        with self._lock:
            pending = self._pending.get(tp)
            if pending is None:
                return None, False
            if pending.loading:
                return pending, False
            pending.loading = True
            return pending, True

    def _run(self, tp: TopicPartition, pending: PendingLog) -> PartitionLog | None:
        try:
            return self._load(tp, pending)
        finally:
            with self._lock:
                self._pending.pop(tp, None)
                self._done.notify_all()
            if not self._pending:
                logger.info(
                    "loaded %d logs in %.1f s (%d checked from their recovery point after an "
                    "unclean shutdown)",
                    self.total,
                    time.perf_counter() - self.started,
                    self.unclean,
                )

    def load_now(self, tp: TopicPartition) -> bool:
        """Make sure `tp` is loaded (if it was pending): load it here, or wait for the thread
        loading it. Returns whether it was pending. The workers pause while this loads."""
        with self._lock:
            self._foreground += 1
        try:
            pending, mine = self._claim(tp)
            if pending is None:
                return False
            if mine:
                self._run(tp, pending)
            else:
                with self._lock:
                    while tp in self._pending:
                        self._done.wait()
            return True
        finally:
            with self._lock:
                self._foreground -= 1
                self._foreground_ended = time.perf_counter()

    def load_batch(self, budget_s: float = 0.05) -> bool:
        """Load pending logs for about `budget_s` (a worker thread); False when none is left."""
        deadline = time.perf_counter() + budget_s
        while True:
            with self._lock:
                # Loads on the event loop's thread go first (see _foreground); a slice
                # still ends at its deadline, so that a stop never waits long for it.
                while self._foreground or time.perf_counter() - self._foreground_ended < _PAUSE_S:
                    if time.perf_counter() >= deadline:
                        return bool(self._queue)
                    self._resume.wait(_PAUSE_S)
                if not self._queue:
                    return False
                tp = self._queue.popleft()
            pending, mine = self._claim(tp)
            if mine:
                assert pending is not None
                try:
                    self._run(tp, pending)
                except Exception:  # the loader reported it (the log dir went offline)
                    logger.debug("background load of %s failed", tp, exc_info=True)
            if time.perf_counter() >= deadline:
                return True
