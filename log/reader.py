"""Reading a partition log: fetch regions for sendfile, and the ListOffsets lookups.

Everything here only reads: the fetch path's `read_batches` walks batch headers and hands
back file regions without reading record data, and the timestamp lookups answer
ListOffsets from the segments' time indexes; read_committed fetches get the aborted
transactions of their range from the `.txnindex`. PartitionLog binds these functions as its
`read`, `offset_for_timestamp`, `max_timestamp_offset` and `collect_aborted_transactions`
methods; the log's state is only ever changed by its own methods.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from itertools import chain
from typing import TYPE_CHECKING, NamedTuple, ParamSpec, TypeVar

from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.file_cache import DESCRIPTOR_ERRNOS, SegmentFile

if TYPE_CHECKING:
    from trio_broker.log.partition_log import PartitionLog
    from trio_broker.log.txn_index import AbortedTxn

__all__ = [
    "FileRegion",
    "ReadResult",
    "collect_aborted_transactions",
    "max_timestamp_offset",
    "offset_for_timestamp",
    "read_batches",
]


_P = ParamSpec("_P")
_T = TypeVar("_T")


def _descriptors_as_storage_error(read: Callable[_P, _T]) -> Callable[_P, _T]:
    """A segment file that cannot be opened for lack of descriptors (EMFILE, ENFILE) fails
    this read with KAFKA_STORAGE_ERROR (retriable); the log and its dir stay online."""

    @functools.wraps(read)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return read(*args, **kwargs)
        except OSError as exc:
            if exc.errno not in DESCRIPTOR_ERRNOS:
                raise
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"cannot open a segment: {exc}"
            ) from exc

    return wrapper


class FileRegion(NamedTuple):
    """Bytes of a segment file to send as they are: os.sendfile(sock, fd, position, size).

    It holds the segment's open file, so the descriptor stays open (even if the file cache
    lets the segment go meanwhile) until the response that carries it has been sent.
    Named tuples (this and ReadResult): every fetch of every partition builds them, and a
    tuple is made in one step where a frozen attrs instance sets each field in turn."""

    file: SegmentFile
    position: int
    size: int

    @property
    def fd(self) -> int:
        return self.file.fd


class ReadResult(NamedTuple):
    """What a fetch gets: whole batches as file regions, plus the partition's offsets."""

    regions: list[FileRegion]
    size: int
    first_offset: int  # base offset of the first batch returned, -1 when none
    next_offset: int  # offset after the last batch returned (the fetch offset when none)
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


@_descriptors_as_storage_error
def read_batches(
    log: PartitionLog,
    fetch_offset: int,
    max_bytes: int,
    *,
    max_offset: int | None = None,
    min_one_message: bool = True,
) -> ReadResult:
    """Whole batches from `fetch_offset` up to `max_offset` (exclusive; the HW for consumers).

    At most `max_bytes`, except that the first batch is returned whole when
    `min_one_message` even if it is larger. Only batch headers are read.
    """
    log._check_open()
    if fetch_offset < log.log_start_offset or fetch_offset > log.log_end_offset:
        raise KafkaError(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"offset {fetch_offset} is out of range [{log.log_start_offset}, "
            f"{log.log_end_offset}] for {log.name}",
        )
    limit = log.log_end_offset if max_offset is None else min(max_offset, log.log_end_offset)
    regions: list[FileRegion] = []
    total = 0
    first_offset = -1
    next_offset = fetch_offset
    slot = log._floor_slot(fetch_offset)
    segments = log.segments
    while fetch_offset < limit and slot < len(segments):
        segment = segments[slot]
        if first_offset < 0:
            found = segment.translate_offset(fetch_offset)
            if found is None:
                slot += 1
                continue
            # The batch found, then those after it: its header is not read a second time
            # (at the log end there is nothing after it, and no read at all).
            start, size, header = found
            batches = chain(((start, header),), segment.batches_from(start + size))
        else:
            start = 0
            batches = segment.batches_from(0)
        region_start, region_size, stop = start, 0, False
        for pos, header in batches:
            if header.last_offset >= limit:
                stop = True
                break
            if total + header.size > max_bytes and not (min_one_message and total == 0):
                stop = True
                break
            if first_offset < 0:
                first_offset = header.base_offset
                region_start = pos
            region_size += header.size
            total += header.size
            next_offset = header.next_offset
        if region_size:
            regions.append(FileRegion(file=segment.file(), position=region_start, size=region_size))
        if stop:
            break
        slot += 1
    return ReadResult(
        regions=regions,
        size=total,
        first_offset=first_offset,
        next_offset=next_offset,
        high_watermark=log._high_watermark,
        log_start_offset=log.log_start_offset,
        log_end_offset=log.log_end_offset,
    )


def collect_aborted_transactions(
    log: PartitionLog, fetch_offset: int, upper_bound_offset: int
) -> list[AbortedTxn]:
    """Aborted transactions overlapping [fetch_offset, upper_bound_offset), from the
    `.txnindex` of the segments from the one holding `fetch_offset` on (read_committed)."""
    out: list[AbortedTxn] = []
    # Not bounded by upper_bound_offset: a transaction that starts in range may end (and be
    # indexed) in a later segment.
    for segment in log.segments[log._floor_slot(fetch_offset) :]:
        out.extend(segment.txn_index.collect(fetch_offset, upper_bound_offset))
    return out


@_descriptors_as_storage_error
def offset_for_timestamp(log: PartitionLog, timestamp: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record with timestamp >= `timestamp`, if any."""
    log._check_open()
    for segment in list(log.segments):
        if segment.size and segment.largest_timestamp() >= timestamp:
            found = segment.find_offset_by_timestamp(timestamp, log.log_start_offset)
            if found is not None:
                return found
    return None


@_descriptors_as_storage_error
def max_timestamp_offset(log: PartitionLog) -> tuple[int, int] | None:
    """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3)."""
    log._check_open()
    best = None
    for segment in log.segments:
        if segment.max_timestamp_so_far >= 0 and (
            best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far
        ):
            best = segment
    return best.offset_of_max_timestamp() if best is not None else None
