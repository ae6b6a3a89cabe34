"""TransactionIndex: a segment's aborted transactions, Kafka's `.txnindex` file.

One 34-byte entry per transaction aborted by an ABORT marker in the segment, in the order
of the markers, big-endian (Kafka's AbortedTxn):

    version int16 (0) | producer_id int64 | first_offset int64 | last_offset int64 |
    last_stable_offset int64

`last_offset` is the marker's offset; `last_stable_offset` the partition's LSO once the
transaction was complete. A read_committed fetch returns the (producer id, first offset) of
every aborted transaction overlapping the fetched range, so that the consumer drops their
records. The file is created on the first abort: most segments never have one.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Sequence
from pathlib import Path

import attrs

__all__ = ["TXN_INDEX_SUFFIX", "AbortedTxn", "TransactionIndex"]

logger = logging.getLogger(__name__)

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
_VERSION = 0


@attrs.frozen(kw_only=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def pack(self) -> bytes:
        return _ENTRY.pack(
            _VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


class TransactionIndex:
    """The aborted transactions of one segment, kept in memory and appended to the file."""

    def __init__(self, path: Path, *, exists: bool | None = None) -> None:
        """`exists`: whether the file is there, when the caller knows (a listing)."""
        self.path = path
        self.entries: list[AbortedTxn] = []
        self.needs_rebuild = False  # reset by recovery; the loader's replay refills it
        if path.exists() if exists is None else exists:
            self.entries = _read(path)

    def append(self, txn: AbortedTxn) -> None:
        self.append_all([txn])

    def check_order(self, txns: Sequence[AbortedTxn]) -> None:
        """ValueError unless each of `txns` ends after the one before it (and the index's)."""
        if not txns:
            return  # an append without ABORT markers: every produce
        last = self.entries[-1].last_offset if self.entries else None
        for txn in txns:
            if last is not None and txn.last_offset <= last:
                raise ValueError(
                    f"aborted transaction ending at {txn.last_offset} is not after the last "
                    f"one ({last}) in {self.path}"
                )
            last = txn.last_offset

    def append_all(self, txns: Sequence[AbortedTxn]) -> None:
        """Append to the file, then to memory. An OSError (a full disk) may leave part of
        the write in the file: the caller undoes it (`undo_to`), as LogSegment.append does
        with its marker's batch, so that the file and the log never disagree."""
        if not txns:
            return
        self.check_order(txns)
        # Page cache like the segment; the segment's flush fsyncs it.
        with open(self.path, "ab") as f:
            f.write(b"".join(txn.pack() for txn in txns))
        self.entries.extend(txns)

    def undo_to(self, count: int) -> None:
        """Back to the first `count` entries, in memory and in the file (an append failed,
        or the batch it belonged to did). Shrinking needs no space; an OSError here means
        the file can no longer be trusted."""
        del self.entries[count:]
        if count == 0:
            self.path.unlink(missing_ok=True)
        elif self.path.exists():
            os.truncate(self.path, count * _ENTRY.size)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions that overlap [fetch_offset, upper_bound_offset)."""
        return [
            e
            for e in self.entries
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset
        ]

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above `offset` (the log was truncated)."""
        kept = [e for e in self.entries if e.last_offset < offset]
        if len(kept) != len(self.entries):
            self._rewrite(kept)

    def reset(self, *, rebuild: bool = False) -> None:
        """Forget everything; `rebuild`: recovery refills the index from the segment."""
        self._rewrite([])
        self.needs_rebuild = rebuild

    def flush(self) -> None:
        if self.entries and self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def rename(self, new_path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        self.entries = entries
        if not entries:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(b"".join(e.pack() for e in entries))
        os.replace(tmp, self.path)


def _read(path: Path) -> list[AbortedTxn]:
    data = path.read_bytes()
    whole = len(data) - len(data) % _ENTRY.size
    if whole != len(data):
        logger.warning("%s: ignoring %d trailing bytes", path, len(data) - whole)
    out = []
    for version, pid, first, last, lso in _ENTRY.iter_unpack(data[:whole]):
        if version != _VERSION:
            logger.warning("%s: unknown entry version %d; stop reading", path, version)
            break
        out.append(
            AbortedTxn(
                producer_id=pid, first_offset=first, last_offset=last, last_stable_offset=lso
            )
        )
    return out
