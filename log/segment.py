"""LogSegment: one `.log` file of record batches with its `.index` and `.timeindex`.

Batches are written exactly as given with `os.write` (page cache, no fsync) and found
again by reading 61-byte headers with `os.pread`; batch bodies are never read into Python
except by recovery (CRC checks) and by ListOffsets-by-timestamp (record timestamps).

The `.log` file is open only while it is in use: every access goes through `file()`, which
takes it from the process's bounded cache of open segment files (log/file_cache.py),
opening it again if it was closed while idle. Code that uses the descriptor holds the
`SegmentFile` for as long as it does, so it cannot be closed under it.
"""

from __future__ import annotations

import logging
import os
import struct
from array import array
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from trio_broker.log.checkpoints import child
from trio_broker.log.file_cache import SegmentFile, segment_files
from trio_broker.log.index import CorruptIndexError, OffsetIndex, TimeIndex
from trio_broker.log.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex
from trio_broker.protocol.record_codec import iter_records
from trio_broker.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    read_header,
    scan_valid_prefix,
)

__all__ = ["LogSegment", "SegmentStateUnknown", "segment_file_name"]

logger = logging.getLogger(__name__)

_SCAN_BYTES = 8 * 1024  # per read while walking batch headers

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
_INT32_MAX = 2**31 - 1
_UNREAD = object()  # a lazily read field not read yet
# A batch's base offset and length (its first 12 bytes), and where its last offset delta is.
_BASE_AND_LENGTH = struct.Struct(">qi")
_INT32 = struct.Struct(">i")
_LAST_DELTA_AT = 23
# The last batches appended by this process that a segment remembers (position and last
# offset), so that a consumer a few batches behind the log end is found without an index
# lookup and a header scan. Kept in a flat int64 array (256 bytes, allocated on the first
# append): a broker of 20,000 partitions keeps one per active segment.
_RECENT = 16
# Recovery reads this much at a time to check CRCs: big enough to amortise the syscalls,
# small enough not to hold a whole 1 GiB segment in memory.
_RECOVERY_CHUNK = 8 * 1024 * 1024


class SegmentStateUnknown(OSError):
    """An I/O error left a segment in a state that could not be restored: its log dir
    must go offline (Kafka's LogDirFailureChannel), as nothing can trust the files now."""


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    """A segment file plus its two indexes; offsets in the indexes are relative to base_offset."""

    def __init__(
        self,
        partition_dir: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        created_ms: int,
        file_suffix: str = "",
        present: set[str] | None = None,
    ) -> None:
        """`file_suffix` (Kafka's fileSuffix) names all three files with a temporary suffix,
        as the cleaner does for the segment it writes (`.cleaned`). `present`: the names in
        the directory, when the loader has listed it (no stat per file then)."""
        self.dir = partition_dir
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = child(
            partition_dir, segment_file_name(base_offset, LOG_SUFFIX + file_suffix)
        )
        self.closed = False
        # The open descriptor while the file cache holds it (see `file`).
        self._file: SegmentFile | None = None
        self._create = True  # the first open creates the file; later ones find it
        file = segment_files.get(self)
        self._create = False
        try:
            self._open_indexes(
                partition_dir, base_offset, max_index_size, file_suffix, file, present
            )
        except BaseException:
            # A roll on a full disk fails here (ENOSPC creating an index): no fd may leak.
            self.closed = True
            segment_files.forget(self)
            raise
        self.created_ms = created_ms
        # The first batch's max timestamp, read on first use (as Kafka's
        # loadFirstBatchTimestamp): a segment loaded is not always appended to or rolled.
        self._rolling_based_timestamp: int | None | object = (
            _UNREAD if self.size >= HEADER_SIZE else None
        )
        self._next_offset: int | None = None if self.size else base_offset
        # (position, header) of the last batch appended by this process, for fetches at
        # the log end; None until an append, and after anything that rewrites the tail.
        self._tail: tuple[int, BatchHeader] | None = None
        # The last _RECENT batches appended by this process, the newest ending at `size`
        # with no gap between them: a ring of (position, last offset) pairs, `_ring_next`
        # the slot the next one takes, `_ring_count` how many are valid (see _remember).
        # Emptied (count 0) with `_tail`, whenever the tail is rewritten.
        self._ring: array | None = None
        self._ring_next = 0
        self._ring_count = 0

    @property
    def rolling_based_timestamp(self) -> int | None:
        """The max timestamp of the first batch (None when empty): what time-based rolls
        measure from (Kafka's rollingBasedTimestamp)."""
        value = self._rolling_based_timestamp
        if value is _UNREAD:
            value = self._rolling_based_timestamp = self.read_header_at(0).max_timestamp
        return value  # type: ignore[return-value]

    @rolling_based_timestamp.setter
    def rolling_based_timestamp(self, value: int | None) -> None:
        self._rolling_based_timestamp = value

    def _open_file(self) -> int:
        flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if self._create else 0)
        return os.open(self.log_path, flags, 0o644)

    def file(self) -> SegmentFile:
        """The open `.log` file; hold it while using its descriptor. OSError when the
        segment is closed (deleted meanwhile), or when it cannot be opened (EMFILE)."""
        if self.closed:
            raise OSError(9, f"segment {self.log_path} is closed")  # EBADF
        return segment_files.get(self)

    @property
    def fd(self) -> int:
        """The descriptor, for a use right away on the event loop (-1 once closed); code
        that may run beside other threads holds `file()` instead."""
        if self.closed:
            return -1
        return segment_files.get(self).fd

    def _open_indexes(
        self,
        partition_dir: Path,
        base_offset: int,
        max_index_size: int,
        file_suffix: str,
        file: SegmentFile,
        present: set[str] | None,
    ) -> None:
        self.size = os.fstat(file.fd).st_size
        self.bytes_since_last_index_entry = 0
        self.index_needs_rebuild = False
        index_path = child(
            partition_dir, segment_file_name(base_offset, INDEX_SUFFIX + file_suffix)
        )
        time_index_path = child(
            partition_dir, segment_file_name(base_offset, TIME_INDEX_SUFFIX + file_suffix)
        )
        # A segment with data but no index files lost them (or predates them): rebuild.
        if present is not None:
            indexed = index_path.name in present and time_index_path.name in present
        else:
            indexed = index_path.exists() and time_index_path.exists()
        if self.size and not indexed:
            self.index_needs_rebuild = True
        try:
            self.offset_index = OffsetIndex(index_path, base_offset, max_index_size)
            self.offset_index.sanity_check(self.size)
        except CorruptIndexError as exc:
            logger.warning("%s; rebuilding it", exc)
            index_path.unlink(missing_ok=True)
            self.offset_index = OffsetIndex(index_path, base_offset, max_index_size)
            self.index_needs_rebuild = True
        try:
            self.time_index = TimeIndex(time_index_path, base_offset, max_index_size)
        except CorruptIndexError as exc:
            logger.warning("%s; rebuilding it", exc)
            time_index_path.unlink(missing_ok=True)
            self.time_index = TimeIndex(time_index_path, base_offset, max_index_size)
            self.index_needs_rebuild = True
        self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = (
            self.time_index.last_entry()
        )
        # Aborted transactions (issue 15); the file exists only once one was aborted here.
        txn_name = segment_file_name(base_offset, TXN_INDEX_SUFFIX + file_suffix)
        self.txn_index = TransactionIndex(
            child(partition_dir, txn_name), exists=None if present is None else txn_name in present
        )

    # -- reading headers -------------------------------------------------------------------

    def read_header_at(self, position: int) -> BatchHeader:
        file = self.file()  # held across the read: another thread may evict it
        return read_header(os.pread(file.fd, HEADER_SIZE, position))

    def batches_from(
        self, position: int = 0, end: int | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each whole batch from `position`, by header reads only.

        Headers are parsed out of reads of up to _SCAN_BYTES: finding an offset walks
        every batch from the index entry before it (index.interval.bytes apart), and
        small batches make that one pread per batch otherwise, the largest cost of a
        fetch from a tailing consumer.
        """
        end = self.size if end is None else end
        if end - position < HEADER_SIZE:
            return
        file = self.file()
        buf = b""
        buf_start = position
        while end - position >= HEADER_SIZE:
            at = position - buf_start
            if at + HEADER_SIZE > len(buf):
                buf = os.pread(file.fd, min(_SCAN_BYTES, end - position), position)
                buf_start, at = position, 0
                if len(buf) < HEADER_SIZE:
                    return
            header = read_header(buf, at)
            if header.batch_length < MIN_BATCH_LENGTH or position + header.size > end:
                return
            yield position, header
            position += header.size

    def _scan_tail(self) -> tuple[int, int]:
        """(end, next offset) of the whole batches from the last index entry on: where
        the last one ends, and the offset after it (base_offset when there is none).

        What batches_from finds, reading only each batch's length, and the last one's
        base offset and last offset delta: a load after a clean shutdown walks the tail of
        every partition's active segment (20,000 here), and whole headers were most of it.
        """
        _, end = self.offset_index.lookup(2**62)
        limit = self.size
        nxt = self.base_offset
        if limit - end < HEADER_SIZE:
            return end, nxt
        file = self.file()  # held across the reads: another thread may evict it
        buf = b""
        buf_start = end
        while limit - end >= HEADER_SIZE:
            at = end - buf_start
            if at + HEADER_SIZE > len(buf):
                buf = os.pread(file.fd, min(_SCAN_BYTES, limit - end), end)
                buf_start, at = end, 0
                if len(buf) < HEADER_SIZE:
                    break
            base, length = _BASE_AND_LENGTH.unpack_from(buf, at)
            if length < MIN_BATCH_LENGTH or end + LOG_OVERHEAD + length > limit:
                break
            nxt = base + _INT32.unpack_from(buf, at + _LAST_DELTA_AT)[0] + 1
            end += LOG_OVERHEAD + length
        return end, nxt

    def tail_is_whole(self) -> bool:
        """Whether the batches after the last index entry end exactly at the file's end:
        false for a torn write (a header announcing bytes past the end, or garbage)."""
        end, nxt = self._scan_tail()
        if end == self.size and self._next_offset is None:
            self._next_offset = nxt  # the same walk as next_offset's: not done twice
        return end == self.size

    @property
    def next_offset(self) -> int:
        """The offset after the last batch (base_offset when empty)."""
        if self._next_offset is None:
            self._next_offset = self._scan_tail()[1]
        return self._next_offset

    def translate_offset(
        self, offset: int, start_position: int = 0
    ) -> tuple[int, int, BatchHeader] | None:
        """(position, size, header) of the first batch whose last offset >= `offset`."""
        tail = self._tail
        if tail is not None:
            header = tail[1]
            if header.base_offset <= offset <= header.base_offset + header.last_offset_delta:
                # A consumer at the log end asks for what was just appended: no scan.
                if tail[0] >= start_position:
                    return tail[0], header.size, header
            elif self._ring_count > 1:
                # A few batches behind: one of the last ones appended, one header read.
                position = self._recent_position(offset)
                if position >= start_position:
                    header = self.read_header_at(position)
                    return position, header.size, header
        _, position = self.offset_index.lookup(offset)
        position = max(position, start_position)
        for pos, header in self.batches_from(position):
            if header.last_offset >= offset:
                return pos, header.size, header
        return None

    def _recent_position(self, offset: int) -> int:
        """The position of the first remembered batch whose last offset >= `offset`, when
        the batch before it is remembered too (so no earlier batch can hold `offset`);
        else -1. Batches of a segment are in offset order, and the ring has no gaps."""
        ring = self._ring
        assert ring is not None
        slot = self._ring_next - 1
        if slot < 0:
            slot += _RECENT
        if ring[2 * slot + 1] < offset:
            return -1  # past the last batch
        for _ in range(self._ring_count - 1):
            before = slot - 1 if slot else _RECENT - 1
            if ring[2 * before + 1] < offset:
                return ring[2 * slot]
            slot = before
        return -1  # not after the oldest remembered batch: an earlier one may hold it

    def _remember(self, batches: list[tuple[int, int, int]], end: int) -> None:
        """Add the batches just written (ending at `end`) to the ring of recent ones."""
        ring = self._ring
        if ring is None:
            ring = self._ring = array("q", bytes(16 * _RECENT))
        slot = self._ring_next
        if len(batches) == 1:  # a produce's one batch: most appends
            last_offset, _, size = batches[0]
            ring[2 * slot] = end - size
            ring[2 * slot + 1] = last_offset
            self._ring_next = slot + 1 if slot + 1 < _RECENT else 0
            if self._ring_count < _RECENT:
                self._ring_count += 1
            return
        kept = batches[-_RECENT:] if len(batches) > _RECENT else batches
        position = end
        for _, _, size in kept:
            position -= size
        for last_offset, _, size in kept:
            ring[2 * slot] = position
            ring[2 * slot + 1] = last_offset
            position += size
            slot = slot + 1 if slot + 1 < _RECENT else 0
        self._ring_next = slot
        count = self._ring_count + len(kept)
        self._ring_count = count if count < _RECENT else _RECENT

    def _forget_tail(self) -> None:
        """The tail was rewritten (truncated, recovered): nothing remembered holds."""
        self._tail = None
        self._ring_count = 0

    # -- appending -------------------------------------------------------------------------

    def append(
        self,
        data: memoryview,
        batches: list[tuple[int, int, int]],
        aborted: Sequence[AbortedTxn] = (),
    ) -> None:
        """Write `data` (whole batches) and index them.

        `batches` holds (last_offset, max_timestamp, size) per batch, in order, with the
        offsets and timestamps already assigned; `aborted`, the transactions the ABORT
        markers among them end, for the `.txnindex`: part of the same all-or-nothing
        write, so that a marker is never in the log without its index entry (a
        read_committed consumer would then read what was aborted).

        All or nothing: when a write fails (ENOSPC: a full disk) the file is truncated back
        to its size before the call and index entries added by it are dropped, so the
        segment is exactly as it was and the OSError is raised. A later append (space
        freed) then lands where this one would have. If the undo itself fails, the
        segment's state is unknown: `SegmentStateUnknown` is raised instead.
        """
        if not batches:
            return
        self.txn_index.check_order(aborted)
        start = self.size
        undo = (
            self.offset_index.entries,
            self.time_index.entries,
            len(self.txn_index.entries),
            self.max_timestamp_so_far,
            self.offset_of_max_timestamp_so_far,
            self.bytes_since_last_index_entry,
            self._rolling_based_timestamp,  # as it is: perhaps not read yet
        )
        try:
            self._append(data, batches, aborted)
        except OSError as exc:
            self._undo_append(start, undo, exc)
            raise

    def _append(
        self,
        data: memoryview,
        batches: list[tuple[int, int, int]],
        aborted: Sequence[AbortedTxn] = (),
    ) -> None:
        physical = self.size
        if physical == 0:
            self._rolling_based_timestamp = batches[0][1]
        file = self.file()
        view = data
        while view:
            view = view[os.write(file.fd, view) :]
        for last_offset, max_timestamp, size in batches:
            if max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = max_timestamp
                self.offset_of_max_timestamp_so_far = last_offset
            if self.bytes_since_last_index_entry > self.index_interval_bytes:
                self.offset_index.append(last_offset, physical)
                self.time_index.maybe_append(
                    self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far
                )
                self.bytes_since_last_index_entry = 0
            physical += size
            self.bytes_since_last_index_entry += size
        # Before the segment takes the batches as its own (its size, tail, next offset):
        # a failure here is undone with the write.
        self.txn_index.append_all(aborted)
        last_size = batches[-1][2]
        self._tail = (physical - last_size, read_header(data, len(data) - last_size))
        self._remember(batches, physical)
        self.size = physical
        self._next_offset = batches[-1][0] + 1

    def _undo_append(
        self, start: int, undo: tuple[int, int, int, int, int, int, int | None], exc: OSError
    ) -> None:
        offset_entries, time_entries, aborted_entries, *fields = undo
        (
            self.max_timestamp_so_far,
            self.offset_of_max_timestamp_so_far,
            self.bytes_since_last_index_entry,
            self._rolling_based_timestamp,
        ) = fields
        try:
            # Shrinking needs no space, so this works on a full disk; what a failed write
            # left (part of a batch) must go before anyone appends after it.
            file = self.file()
            os.ftruncate(file.fd, start)
            self.offset_index.truncate_entries(offset_entries)
            self.time_index.truncate_entries(time_entries)
            self.txn_index.undo_to(aborted_entries)
            actual = os.fstat(file.fd).st_size
        except OSError as undo_exc:
            raise SegmentStateUnknown(
                undo_exc.errno,
                f"{self.log_path}: append failed ({exc}) and could not be undone: {undo_exc}",
            ) from exc
        if actual != start:
            raise SegmentStateUnknown(
                exc.errno, f"{self.log_path}: size {actual} after undoing an append, not {start}"
            ) from exc
        logger.warning(
            "append to %s failed (%s): truncated back to %d bytes", self.log_path, exc, start
        )

    def should_roll(
        self,
        max_segment_bytes: int,
        max_segment_ms: int,
        messages_size: int,
        max_timestamp_in_messages: int,
        max_offset_in_messages: int,
        now_ms: int,
    ) -> bool:
        """Kafka's LogSegment.shouldRoll: full by size, by age, by index, or by offset range.
        (Positional: it runs on every append.)"""
        rolling_based = self.rolling_based_timestamp
        if rolling_based is not None and rolling_based >= 0:
            waited = max_timestamp_in_messages - rolling_based
        else:
            waited = now_ms - self.created_ms
        size = self.size
        return (
            size > max_segment_bytes - messages_size
            or (size > 0 and waited > max_segment_ms)
            or self.offset_index.is_full
            or self.time_index.is_full
            or max_offset_in_messages - self.base_offset > _INT32_MAX
        )

    def on_become_inactive(self) -> None:
        """On roll: record the max timestamp in the time index and trim both indexes."""
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, skip_full_check=True
        )
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def resize_indexes(self, max_index_size: int) -> None:
        self.offset_index.resize(max_index_size)
        self.time_index.resize(max_index_size)

    # -- recovery and truncation -----------------------------------------------------------

    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None) -> int:
        """Rebuild the indexes by checking every batch; truncate at the first bad byte.

        Returns the number of bytes truncated (0 when the whole file was valid).
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = -1, self.base_offset
        file = self.file()
        file_size = os.fstat(file.fd).st_size
        valid = 0
        last_index_entry = 0
        next_offset = self.base_offset
        while valid < file_size:
            chunk = os.pread(file.fd, min(_RECOVERY_CHUNK, file_size - valid), valid)
            consumed, headers = scan_valid_prefix(chunk)
            if consumed == 0:
                # Either one batch is larger than the chunk, or the data is bad here.
                if len(chunk) < HEADER_SIZE:
                    break
                header = read_header(chunk)
                if header.batch_length < MIN_BATCH_LENGTH or valid + header.size > file_size:
                    break
                if header.size <= len(chunk):
                    break
                chunk = os.pread(file.fd, header.size, valid)
                consumed, headers = scan_valid_prefix(chunk)
                if consumed == 0:
                    break
            for header in headers:
                if (
                    header.base_offset < next_offset
                    or header.last_offset - self.base_offset > _INT32_MAX
                ):
                    consumed = -1
                    break
                if header.max_timestamp > self.max_timestamp_so_far:
                    self.max_timestamp_so_far = header.max_timestamp
                    self.offset_of_max_timestamp_so_far = header.last_offset
                if valid - last_index_entry > self.index_interval_bytes:
                    self.offset_index.append(header.last_offset, valid)
                    self.time_index.maybe_append(
                        self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far
                    )
                    last_index_entry = valid
                valid += header.size
                next_offset = header.next_offset
                if on_batch is not None:
                    on_batch(header)
            if consumed < 0:
                break
        truncated = file_size - valid
        if truncated:
            os.ftruncate(file.fd, valid)
        self.size = valid
        self._next_offset = next_offset
        self._forget_tail()
        self.bytes_since_last_index_entry = valid - last_index_entry
        self.rolling_based_timestamp = self.read_header_at(0).max_timestamp if valid else None
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, skip_full_check=True
        )
        self.index_needs_rebuild = False
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset >= `offset`; returns the bytes removed."""
        found = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        if found is None:
            return 0
        position = found[0]
        removed = self.size - position
        file = self.file()
        os.ftruncate(file.fd, position)
        self.size = position
        self._next_offset = None if position else self.base_offset
        self._forget_tail()
        # The time index may have pointed into what was removed; recompute from its tail.
        self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = (
            self.time_index.last_entry()
        )
        _, index_position = self.offset_index.lookup(2**62)
        for _, header in self.batches_from(index_position):
            if header.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = header.max_timestamp
                self.offset_of_max_timestamp_so_far = header.last_offset
        self.bytes_since_last_index_entry = self.size - index_position
        if position == 0:
            self.rolling_based_timestamp = None
        return removed

    # -- timestamps ------------------------------------------------------------------------

    def largest_timestamp(self) -> int:
        """The max timestamp of the segment, or its file's mtime when it has none (Kafka)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return self.last_modified_ms()

    def last_modified_ms(self) -> int:
        if self.closed:
            return int(os.stat(self.log_path).st_mtime * 1000)
        file = self.file()
        return int(os.fstat(file.fd).st_mtime * 1000)

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= target, offset >= start."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(ts_offset, starting_offset))
        for pos, header in self.batches_from(position):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            file = self.file()
            for record in iter_records(os.pread(file.fd, header.size, pos)):
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    return record.offset, record.timestamp
        return None

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record holding the segment's largest timestamp."""
        if self.max_timestamp_so_far < 0:
            return None
        _, position = self.offset_index.lookup(self.offset_of_max_timestamp_so_far)
        for pos, header in self.batches_from(position):
            if header.max_timestamp != self.max_timestamp_so_far:
                continue
            if header.is_log_append_time:
                return header.base_offset, header.max_timestamp
            file = self.file()
            for record in iter_records(os.pread(file.fd, header.size, pos)):
                if record.timestamp == header.max_timestamp:
                    return record.offset, record.timestamp
        return None

    # -- files -----------------------------------------------------------------------------

    def flush(self) -> None:
        file = self.file()
        os.fsync(file.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Close cleanly: the indexes are trimmed so a restart can trust them."""
        if self.closed:
            return
        self.on_become_inactive()
        self.close_handlers()

    def close_handlers(self) -> None:
        """Close the file (its descriptor closes once no fetch holds it any more)."""
        self.closed = True
        segment_files.forget(self)

    def rename_to_deleted(self) -> None:
        """Mark for asynchronous deletion (in-flight file regions hold their descriptors)."""
        new_log = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        os.rename(self.log_path, new_log)
        self.log_path = new_log
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.rename(index.path.with_name(index.path.name + DELETED_SUFFIX))

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the three files from `old_suffix` to `new_suffix`: indexes first, then the
        log (os.replace: an existing file of the new name is replaced atomically)."""
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.rename(_with_suffix(index.path, old_suffix, new_suffix))
        new_log = _with_suffix(self.log_path, old_suffix, new_suffix)
        os.replace(self.log_path, new_log)
        self.log_path = new_log

    def delete(self) -> None:
        self.close_handlers()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            path.unlink(missing_ok=True)
        self.txn_index.delete()


def _with_suffix(path: Path, old_suffix: str, new_suffix: str) -> Path:
    if old_suffix and not path.name.endswith(old_suffix):
        raise ValueError(f"{path} does not end with {old_suffix!r}")
    stem = path.name[: len(path.name) - len(old_suffix)] if old_suffix else path.name
    return path.with_name(stem + new_suffix)
