"""Segment files opened on demand and closed when idle, within a descriptor budget.

A broker with tens of thousands of partitions cannot hold every segment's `.log` open: the
process has one descriptor limit (RLIMIT_NOFILE) for files and connections together. So
each segment opens its file through the process's `SegmentFileCache`, a bounded LRU: when
it is full, opening one more file drops the cache's reference to the least recently used
one. Partitions being written or read stay in it; idle ones leave it.

A descriptor is a `SegmentFile`, closed when the last reference to it goes (CPython frees
it at once), never while someone still holds it: a fetch's file regions hold the
`SegmentFile` they point into until the response is sent (zero-copy sendfile), the flusher
thread holds the one it fsyncs, recovery threads the one they read. Eviction only forgets
a file; its descriptor closes when the last holder lets go, so a number is never reused
under someone still using it. Files evicted while held are outside the bound, as many as
fetches and flushes in flight.

The cache is one per process, like the limit it lives within; `configure` sizes it from
RLIMIT_NOFILE at start-up (`budget_from_limit`), leaving the rest to connections.
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import resource
import threading
from typing import Any, Protocol

__all__ = [
    "DESCRIPTOR_ERRNOS",
    "SegmentFile",
    "SegmentFileCache",
    "budget_from_limit",
    "raise_descriptor_limit",
    "segment_files",
]

logger = logging.getLogger(__name__)

# Out of descriptors, for the process (EMFILE) or the system (ENFILE): not a disk failure.
DESCRIPTOR_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})

_DEFAULT_CAPACITY = 1024
_MIN_CAPACITY = 16


class SegmentFile:
    """One open descriptor of a segment file; closed when no one refers to it any more."""

    __slots__ = ("fd", "path")

    def __init__(self, fd: int, path: Any) -> None:
        self.fd = fd
        self.path = path
        _COUNT.opened += 1

    def __del__(self, _close: Any = os.close) -> None:
        # At the interpreter's exit the module's globals may already be None: `os.close`
        # is bound as a default, and the count is skipped then.
        fd, self.fd = self.fd, -1
        if fd >= 0:
            count = _COUNT
            if count is not None:
                count.closed += 1
            try:
                _close(fd)
            except OSError:  # pragma: no cover - the number was ours; nothing to do
                pass

    def __repr__(self) -> str:
        return f"<SegmentFile fd={self.fd} {self.path}>"


class _Count:
    opened = 0
    closed = 0


_COUNT = _Count()


class _Owner(Protocol):
    """What the cache knows of a segment: its one cached file, and how to open it."""

    _file: SegmentFile | None

    def _open_file(self) -> int: ...


class SegmentFileCache:
    """A bounded LRU of open segment files (see the module docstring). Thread-safe: the
    event loop, the flusher and recovery threads open files through it."""

    def __init__(self, capacity: int = _DEFAULT_CAPACITY) -> None:
        self.capacity = max(capacity, _MIN_CAPACITY)
        self._lru: collections.OrderedDict[Any, None] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def open_descriptors(self) -> int:
        """Segment descriptors open now: the cached ones and those still held after eviction."""
        return _COUNT.opened - _COUNT.closed

    def configure(self, capacity: int) -> None:
        """Resize (at start-up); evicts at once what no longer fits."""
        with self._lock:
            self.capacity = max(capacity, _MIN_CAPACITY)
            self._shrink_to(self.capacity)

    def get(self, owner: _Owner) -> SegmentFile:
        """The owner's open file, opened (and cached) if it is not."""
        file = owner._file
        if file is not None:
            with self._lock:
                if owner._file is file:
                    try:
                        self._lru.move_to_end(owner)
                    except KeyError:
                        pass
                    return file
        return self._open(owner)

    def _open(self, owner: _Owner) -> SegmentFile:
        with self._lock:
            if owner._file is not None:  # another thread opened it meanwhile
                self._lru.move_to_end(owner)
                return owner._file
            self._shrink_to(self.capacity - 1)
            try:
                fd = owner._open_file()
            except OSError as exc:
                if exc.errno not in DESCRIPTOR_ERRNOS or not self._lru:
                    raise
                # Connections took what the budget left: give back a quarter and retry.
                logger.warning(
                    "out of descriptors opening a segment (%s): closing %d idle segment files",
                    exc,
                    len(self._lru) // 4 + 1,
                )
                self._shrink_to(len(self._lru) - len(self._lru) // 4 - 1)
                fd = owner._open_file()
            file = owner._file = SegmentFile(fd, getattr(owner, "log_path", None))
            self._lru[owner] = None
            return file

    def _shrink_to(self, size: int) -> None:
        lru = self._lru
        while len(lru) > max(size, 0):
            owner, _ = lru.popitem(last=False)
            owner._file = None  # the descriptor closes when its last holder lets go
            self.evictions += 1

    def forget(self, owner: _Owner) -> None:
        """The owner is closed (or deleted): drop its file now."""
        with self._lock:
            self._lru.pop(owner, None)
            owner._file = None


# The process's cache: the descriptor limit it lives within is the process's.
segment_files = SegmentFileCache()


def raise_descriptor_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard one (as far as allowed); returns the
    (soft, hard) limits in force afterwards, and logs both."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = soft
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError) as exc:
            logger.warning("cannot raise the descriptor limit to %s: %s", target, exc)
    logger.info(
        "descriptor limit (RLIMIT_NOFILE): soft %s (was %s), hard %s",
        soft,
        before,
        "unlimited" if hard == resource.RLIM_INFINITY else hard,
    )
    return soft, hard


def budget_from_limit(soft_limit: int) -> int:
    """How many segment files may stay open under a descriptor limit of `soft_limit`: a
    quarter of it (at most 10,000), so that at least three quarters stay for connections,
    checkpoint writes, index files opened for a moment and the runtime's own."""
    return max(_MIN_CAPACITY, min(soft_limit // 4, 10_000))
