"""LeaderEpochCache: which leader epoch began at which offset (Kafka's LeaderEpochFileCache).

Kept in `<partition dir>/leader-epoch-checkpoint` and used to answer OffsetForLeaderEpoch,
so that a follower or a consumer that saw an older leader can find where its epoch ended.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from pathlib import Path

from trio_broker.log.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    CorruptCheckpointError,
    child,
    read_epoch_checkpoint,
    write_epoch_checkpoint,
)

__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "LeaderEpochCache"]

logger = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


# Read from the file on first use by a lazily loaded cache (see LeaderEpochCache).
_LAZY_FIELDS = frozenset({"epochs", "start_offsets", "_on_disk", "_synced"})
_lazy_lock = threading.Lock()


class LeaderEpochCache:
    """Sorted (epoch, start_offset) entries, both strictly increasing.

    `lazy`: the file is read on first use instead of now (Kafka reads it at load): after
    a clean shutdown most of a broker's partitions are never asked about before they are
    written to, and reading 20,000 of them was a tenth of loading the logs. Truncations
    asked for before then (`truncate_lazily`, the load's) apply when it is read."""

    def __init__(self, partition_dir: str | os.PathLike[str], *, lazy: bool = False) -> None:
        self.path = child(
            partition_dir if isinstance(partition_dir, Path) else Path(partition_dir),
            LEADER_EPOCH_CHECKPOINT,
        )
        # Set by a running log manager: a write without fsync only joins this set, and the
        # manager writes the set's files together in a worker thread (a LeaderAndIsr making
        # this broker leader of 3,000 partitions wrote 3,000 files on the event loop).
        self.deferred: set[LeaderEpochCache] | None = None
        self._bounds: tuple[int, int] | None = None  # (log end, log start) to apply on read
        if not lazy:
            self._read()

    def _read(self) -> None:
        try:
            entries = read_epoch_checkpoint(self.path)
        except CorruptCheckpointError:
            logger.warning("ignoring corrupt leader epoch checkpoint %s", self.path, exc_info=True)
            entries = []
        # What the file holds, and whether it was fsynced since: a flush with nothing new
        # writes nothing (a broker flushes thousands of partitions that did not change).
        # All fields at once (one dict update): another thread may look at them meanwhile.
        self.__dict__.update(
            epochs=[e for e, _ in entries],
            start_offsets=[o for _, o in entries],
            _on_disk=entries,
            _synced=True,
        )
        bounds, self._bounds = self._bounds, None
        if bounds is not None:
            self.truncate_from_end(bounds[0])
            self.truncate_from_start(bounds[1])

    def __getattr__(self, name: str) -> object:
        # Only for attributes not set yet: a lazy cache's entries, read on first use.
        if name not in _LAZY_FIELDS:
            raise AttributeError(name)
        with _lazy_lock:
            if name not in self.__dict__:
                self._read()
        return self.__dict__[name]

    @property
    def is_read(self) -> bool:
        return "epochs" in self.__dict__

    def read_now(self) -> None:
        """Read the file now if it was not (before its directory is renamed)."""
        self.epochs  # noqa: B018 - a lazy cache reads its file on first use

    def truncate_lazily(self, end_offset: int, start_offset: int) -> None:
        """truncate_from_end(end_offset) and truncate_from_start(start_offset), now if the
        file was read, else when it is."""
        if self.is_read:
            self.truncate_from_end(end_offset)
            self.truncate_from_start(start_offset)
        else:
            self._bounds = (end_offset, start_offset)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self.epochs, self.start_offsets, strict=True))

    @property
    def latest_epoch(self) -> int | None:
        return self.epochs[-1] if self.epochs else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch in which `offset` was written, if known."""
        slot = bisect.bisect_right(self.start_offsets, offset) - 1
        return self.epochs[slot] if slot >= 0 else None

    def is_latest(self, epoch: int, start_offset: int) -> bool:
        """True when assign(epoch, start_offset) would change nothing because `epoch` is
        the latest entry's and starts at or before `start_offset` (the usual append)."""
        epochs = self.epochs
        return bool(epochs) and epoch == epochs[-1] and start_offset >= self.start_offsets[-1]

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; True if the cache changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        if self.is_latest(epoch, start_offset):
            return False
        # A new entry makes every entry with a larger-or-equal epoch or offset stale.
        keep = len(self.epochs)
        while keep and (
            self.epochs[keep - 1] >= epoch or self.start_offsets[keep - 1] >= start_offset
        ):
            keep -= 1
        if keep < len(self.epochs):
            logger.info(
                "leader epoch cache %s: dropping %s for new entry (%s, %s)",
                self.path.parent.name,
                self.entries()[keep:],
                epoch,
                start_offset,
            )
        del self.epochs[keep:]
        del self.start_offsets[keep:]
        self.epochs.append(epoch)
        self.start_offsets.append(start_offset)
        self.write(sync=False)
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch, with Kafka's edge cases."""
        if requested_epoch == UNDEFINED_EPOCH or not self.epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self.epochs, requested_epoch)
        if higher == len(self.epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            # Older than anything we know: the data is gone, so point at the first epoch we have.
            return requested_epoch, self.start_offsets[0]
        return self.epochs[higher - 1], self.start_offsets[higher]

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after `end_offset` (log truncated there)."""
        keep = bisect.bisect_left(self.start_offsets, end_offset)
        if keep < len(self.epochs):
            del self.epochs[keep:]
            del self.start_offsets[keep:]
            self.write(sync=False)

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop epochs wholly below the new log start; the one covering it now starts there."""
        floor = bisect.bisect_right(self.start_offsets, start_offset) - 1
        if floor < 0 or (floor == 0 and self.start_offsets[0] == start_offset):
            return
        del self.epochs[:floor]
        del self.start_offsets[:floor]
        self.start_offsets[0] = start_offset
        self.write(sync=False)

    def clear(self) -> None:
        self.epochs.clear()
        self.start_offsets.clear()
        self.write(sync=False)

    def moved_to(self, path: Path) -> None:
        """The partition dir was renamed (a log dir move): the file there is written anew."""
        self.read_now()  # from the old place, if it still exists (a lazy cache)
        self.path = path
        self._on_disk = None

    def write(self, *, sync: bool = True) -> None:
        if not self.is_read:
            return  # never read, so never changed: the file holds it
        if not sync and self.deferred is not None:
            self.deferred.add(self)
            return
        self.write_entries(self.entries(), sync=sync)

    def write_entries(self, entries: list[tuple[int, int]], *, sync: bool) -> None:
        """Write `entries` (taken by `entries()` on the event loop; this may run in a
        worker thread) unless the file holds them already."""
        if entries == self._on_disk and (self._synced or not sync):
            return
        if self.path.parent.exists():
            write_epoch_checkpoint(self.path, entries, sync=sync)
            self._on_disk, self._synced = entries, sync
