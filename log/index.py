"""The sparse indexes beside each segment: `.index` (offset -> position) and `.timeindex`.

Both are files of fixed-size big-endian entries (Kafka's AbstractIndex format). The entries
live in memory (two arrays), so lookups are a bisect and never touch the disk, and no file
descriptor is held: a broker with tens of thousands of partitions would otherwise spend two
descriptors per segment on files it reads once (Kafka memory-maps them and closes the
files; reading them into memory is the same, without the mapping).

Appends go to memory only; the file is brought up to date (the new entries written, and
the file cut to the entries) by `sync_to_file` on roll, flush and close: a file open,
a pwrite and a close. An index the file lags behind is only ever that of a segment at or
above the recovery point, which recovery after a crash rebuilds from the log anyway;
below the recovery point every index was written and fsynced by the flush that moved it.
Kafka preallocates the active segment's index to `segment.index.bytes` for its mapping;
here that size only bounds the entries (`is_full` rolls the segment), and files hold
exactly their entries.

- OffsetIndex entry (8 bytes): relative offset int32, file position int32.
- TimeIndex entry (12 bytes): timestamp int64, relative offset int32 of the batch holding
  the largest timestamp so far. The last slot is reserved for the entry written on roll.
"""

from __future__ import annotations

import array
import bisect
import logging
import os
import struct
import threading
from pathlib import Path

__all__ = ["CorruptIndexError", "OffsetIndex", "TimeIndex"]

logger = logging.getLogger(__name__)

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class CorruptIndexError(Exception):
    """An index file that fails Kafka's sanity checks; the segment's index is rebuilt."""


class _Index:
    entry: struct.Struct

    def __init__(self, path: str | os.PathLike[str], base_offset: int, max_index_size: int) -> None:
        self.path = path if isinstance(path, Path) else Path(path)
        self.base_offset = base_offset
        self.keys = array.array("q")  # relative offsets (OffsetIndex) or timestamps (TimeIndex)
        self.values = array.array("q")  # positions (OffsetIndex) or relative offsets (TimeIndex)
        self.max_entries = max_index_size // self.entry.size
        # Entries [0, on_disk) are in the file as they are in memory. The lock orders the
        # flusher thread's sync_to_file against truncations on the event loop's thread.
        self.on_disk = 0
        self._file_len = 0  # the file's size, as this object last left (or found) it
        self._lock = threading.Lock()
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            # Created now, empty, so that the segment's three files exist together.
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644))
            return
        try:
            self._load(fd)
        finally:
            os.close(fd)

    # -- loading ---------------------------------------------------------------------------

    def _load(self, fd: int) -> None:
        length = os.fstat(fd).st_size
        if length % self.entry.size:
            raise CorruptIndexError(
                f"index file {self.path} has size {length}, not a multiple of {self.entry.size}"
            )
        self._file_len = length
        data = os.pread(fd, length, 0)
        for key, value in self.entry.iter_unpack(data):
            # A file that was never trimmed (unclean stop, or a preallocated file of an
            # older version or of Kafka) ends in zeroed slots; entries are strictly
            # increasing, so the first one that is not ends the valid part.
            if self.keys and not self._follows(key, value):
                break
            self.keys.append(key)
            self.values.append(value)
        self.on_disk = len(self.keys) if len(self.keys) * self.entry.size == length else 0
        # An index loaded from disk can grow again only if it is the active segment's,
        # which calls resize(); until then it holds what it has.
        self.max_entries = max(self.max_entries, len(self.keys))

    def _follows(self, key: int, value: int) -> bool:
        raise NotImplementedError

    # -- state -----------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return len(self.keys)

    @property
    def is_full(self) -> bool:
        return len(self.keys) >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return len(self.keys) * self.entry.size

    def _write(self, key: int, value: int) -> None:
        self.keys.append(key)
        self.values.append(value)

    def _truncate_entries(self, n: int) -> None:
        with self._lock:
            del self.keys[n:]
            del self.values[n:]
            if self.on_disk > n:
                # Cut the file at once, so that a later load never finds the dropped entries.
                os.truncate(self.path, n * self.entry.size)
                self.on_disk = n
                self._file_len = n * self.entry.size

    def truncate_entries(self, n: int) -> None:
        """Keep the first `n` entries (undoing appends that a failed write followed)."""
        if n < len(self.keys):
            self._truncate_entries(n)

    def reset(self) -> None:
        """Forget every entry (before a rebuild). The file is left as it is until the next
        sync_to_file rewrites it whole: truncating it now cost 2 ms per index, the most of a
        recovery after kill -9, and a crash before that sync recovers the segment again
        (a segment at or after the recovery point, as every recovered one is)."""
        with self._lock:
            self.keys = array.array("q")
            self.values = array.array("q")
            self.on_disk = 0

    def resize(self, max_index_size: int) -> None:
        """Allow up to `max_index_size` bytes of entries (whole entries), keeping entries."""
        self.max_entries = max(max_index_size // self.entry.size, len(self.keys))

    def trim_to_valid_size(self) -> None:
        """No more entries (on roll and close): write what the file lacks."""
        self.max_entries = len(self.keys)
        self.sync_to_file()

    def sync_to_file(self, *, fsync: bool = False) -> None:
        """Write the entries the file lacks and cut it to the entries; `fsync`: make it
        durable. Safe in a worker thread (the flusher) while the event loop appends."""
        if (
            not fsync
            and self.on_disk == len(self.keys)
            and self._file_len == self.on_disk * self.entry.size
        ):
            # Nothing to write (most calls: a flush or close of a log not written since),
            # seen without the lock: an entry appended meanwhile is written next time.
            return
        with self._lock:
            # The event loop may be between the two appends of _write: whole entries only.
            n = min(len(self.keys), len(self.values))
            start = self.on_disk
            if start == n and self._file_len == n * self.entry.size and not fsync:
                return
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                if start < n:
                    pack = self.entry.pack
                    if n - start == 1:  # the common case: the entry a roll or close added
                        data = pack(self.keys[start], self.values[start])
                    else:
                        data = b"".join(
                            pack(k, v)
                            for k, v in zip(self.keys[start:n], self.values[start:n], strict=True)
                        )
                    os.pwrite(fd, data, start * self.entry.size)
                if self._file_len > n * self.entry.size:
                    os.ftruncate(fd, n * self.entry.size)
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            self.on_disk = n
            self._file_len = n * self.entry.size

    def flush(self) -> None:
        self.sync_to_file(fsync=True)

    def close(self) -> None:
        """Nothing to close: no descriptor is held (kept for the segment's close path)."""

    def rename(self, new_path: Path) -> None:
        with self._lock:
            os.rename(self.path, new_path)
            self.path = new_path

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


class OffsetIndex(_Index):
    """Maps a relative offset to the file position of the batch that starts there or before."""

    entry = _OFFSET_ENTRY

    def _follows(self, key: int, value: int) -> bool:
        return key > self.keys[-1] and value > self.values[-1]

    def sanity_check(self, log_size: int | None = None) -> None:
        if self.keys and self.keys[-1] < 0:
            raise CorruptIndexError(f"corrupt index {self.path}: last relative offset < 0")
        if log_size is not None and self.values and self.values[-1] >= log_size:
            # An entry for a batch that is not in the file (a failed write was indexed).
            raise CorruptIndexError(
                f"corrupt index {self.path}: position {self.values[-1]} is beyond the "
                f"log's {log_size} bytes"
            )

    @property
    def last_offset(self) -> int:
        return self.base_offset + (self.keys[-1] if self.keys else 0)

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if self.keys and relative <= self.keys[-1]:
            raise ValueError(
                f"offset {offset} is not larger than the last indexed offset {self.last_offset}"
            )
        if self.is_full:
            raise ValueError(f"offset index {self.path} is full")
        self._write(relative, position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry <= target, or (base_offset, 0)."""
        slot = bisect.bisect_right(self.keys, target_offset - self.base_offset) - 1
        if slot < 0:
            return self.base_offset, 0
        return self.base_offset + self.keys[slot], self.values[slot]

    def truncate_to(self, offset: int) -> None:
        """Drop every entry at or above `offset`."""
        self._truncate_entries(bisect.bisect_left(self.keys, offset - self.base_offset))


class TimeIndex(_Index):
    """Maps a timestamp to the offset of the batch holding the largest timestamp so far."""

    entry = _TIME_ENTRY

    def _follows(self, key: int, value: int) -> bool:
        return key > self.keys[-1] and value >= self.values[-1]

    @property
    def is_full(self) -> bool:
        # The last slot is kept for the entry maybe_append(skip_full_check=True) adds on roll.
        return len(self.keys) >= self.max_entries - 1

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base_offset) when empty."""
        if not self.keys:
            return -1, self.base_offset
        return self.keys[-1], self.base_offset + self.values[-1]

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Add an entry if `timestamp` is larger than the last one's."""
        if not skip_full_check and self.is_full:
            raise ValueError(f"time index {self.path} is full")
        last_ts, last_offset = self.last_entry()
        if self.keys and offset < last_offset:
            raise ValueError(f"offset {offset} is below the last time index offset {last_offset}")
        if timestamp > last_ts:
            if len(self.keys) >= self.max_entries:
                self.resize((len(self.keys) + 1) * self.entry.size)
            self._write(timestamp, offset - self.base_offset)

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= target, or (-1, base)."""
        slot = bisect.bisect_right(self.keys, target_timestamp) - 1
        if slot < 0:
            return -1, self.base_offset
        return self.keys[slot], self.base_offset + self.values[slot]

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is at or above `offset`."""
        self._truncate_entries(bisect.bisect_left(self.values, offset - self.base_offset))
