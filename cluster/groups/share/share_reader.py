"""Reading a share-partition's records out of the log: whole batches as file regions, by
their headers only (Kafka's SharePartition acquires batches; the client keeps the records
inside the acquired ranges, so the broker never looks inside a batch).

`redeliver` picks the batches that hold released or timed-out records, `acquire_new` the
batches at the share-partition's end offset; both add to one `Selection`, sent as the
partition's `records` (several regions back to back), and acquire what they cover.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import attrs

from trio_broker.cluster.groups.share.share_partition import AckType, SharePartition
from trio_broker.protocol.records import HEADER_SIZE, BatchHeader, read_header

__all__ = ["Regions", "Selection", "acquire_new", "aborted_ranges", "redeliver", "walk_batches"]

_SCAN_BYTES = 64 * 1024


@attrs.frozen
class Regions:
    """Several file regions sent back to back as one `records` field."""

    regions: tuple[Any, ...]
    size: int


def walk_batches(regions: list[Any]) -> Iterator[tuple[Any, int, BatchHeader]]:
    """(region, position, header) of every batch in file regions, by header reads only."""
    for region in regions:
        position, end = region.position, region.position + region.size
        buf, buf_start = b"", position
        while end - position >= HEADER_SIZE:
            at = position - buf_start
            if at + HEADER_SIZE > len(buf):
                buf = os.pread(region.fd, min(_SCAN_BYTES, end - position), position)
                buf_start, at = position, 0
                if len(buf) < HEADER_SIZE:
                    return
            header = read_header(buf, at)
            yield region, position, header
            position += header.size


def _region(fd_region: Any, position: int, size: int) -> Any:
    return fd_region._replace(position=position, size=size)  # a log FileRegion


class Selection:
    """Whole batches picked out of file regions, kept as few regions as they allow."""

    def __init__(self) -> None:
        self.parts: list[Any] = []
        self.size = 0

    def add(self, region: Any, position: int, size: int) -> None:
        last = self.parts[-1] if self.parts else None
        if last is not None and last.fd == region.fd and last.position + last.size == position:
            self.parts[-1] = _region(last, last.position, last.size + size)
        else:
            self.parts.append(_region(region, position, size))
        self.size += size

    def records(self) -> Any:
        if not self.parts:
            return b""
        return self.parts[0] if len(self.parts) == 1 else Regions(tuple(self.parts), self.size)


def redeliver(
    sp: SharePartition,
    member_id: str,
    log: Any,
    budget: int,
    max_bytes: int,
    deadline: float,
    selection: Selection,
    ranges: list[tuple[int, int, int]],
) -> int:
    """Acquire released or timed-out records for a redelivery, as far as whole batches
    read from their first offset (up to `max_bytes`) cover them; their batches go into
    `selection` and their ranges into `ranges`. Returns what is left of `budget`."""
    spans = [(s.first, s.last) for s in sp.available_spans()]
    first = spans[0][0]
    result = log.read(first, max_bytes, max_offset=None, min_one_message=True)
    covered = -1
    want = budget
    i = 0
    for region, position, header in walk_batches(result.regions):
        while i < len(spans) and spans[i][1] < header.base_offset:
            i += 1
        if i >= len(spans):
            break
        if spans[i][0] <= header.last_offset:
            selection.add(region, position, header.size)
            covered = header.last_offset
            lo = max(spans[i][0], header.base_offset)
            want -= min(spans[i][1], header.last_offset) - lo + 1
            if want <= 0:
                break
    if covered < 0:
        return budget
    got = 0
    for a, b, c in sp.acquire_available(member_id, budget, deadline, upto=covered):
        ranges.append((a, b, c))
        got += b - a + 1
    return budget - got


def acquire_new(
    sp: SharePartition,
    member_id: str,
    log: Any,
    want: int,
    max_bytes: int,
    limit: int,
    deadline: float,
    selection: Selection,
    ranges: list[tuple[int, int, int]],
    read_committed: bool,
) -> None:
    """Acquire whole batches fresh from the log at the share-partition's end offset, up to
    `want` records and `limit` (the HW, or the LSO for read_committed, which also archives
    at once the batches of aborted transactions and control batches)."""
    remaining_bytes = max(max_bytes - selection.size, 0)
    result = log.read(
        sp.end_offset, remaining_bytes, max_offset=limit, min_one_message=not selection.size
    )
    first = last = -1
    taken = 0
    headers = []
    for region, position, header in walk_batches(result.regions):
        if first < 0:
            first = header.base_offset
        selection.add(region, position, header.size)
        last = header.last_offset
        headers.append(header)
        taken += header.last_offset - max(header.base_offset, sp.end_offset) + 1
        if taken >= want:
            break
    if last < sp.end_offset:
        return
    acquired = sp.acquire_new(member_id, first, last, deadline)
    dropped = aborted_ranges(log, headers, acquired[0]) if read_committed else []
    for a, b in dropped:
        # Records of aborted transactions are never delivered (Kafka archives them).
        sp.acknowledge(member_id, a, b, AckType.REJECT, 1)
    lo = acquired[0]
    for a, b in dropped:
        if a > lo:
            ranges.append((lo, a - 1, 1))
        lo = b + 1
    if lo <= acquired[1]:
        ranges.append((lo, acquired[1], 1))


def aborted_ranges(log: Any, headers: list[BatchHeader], start: int) -> list[tuple[int, int]]:
    """The offset ranges, from `start` on, of the batches among `headers` that a
    read_committed group never gets: aborted transactions' batches and control batches."""
    aborted = log.collect_aborted_transactions(headers[0].base_offset, headers[-1].next_offset)
    out: list[tuple[int, int]] = []
    for h in headers:
        drop = h.is_control or (
            h.is_transactional
            and any(
                a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset
                for a in aborted
            )
        )
        lo = max(h.base_offset, start)
        if not drop or lo > h.last_offset:
            continue
        if out and out[-1][1] + 1 == lo:
            out[-1] = (out[-1][0], h.last_offset)
        else:
            out.append((lo, h.last_offset))
    return out
