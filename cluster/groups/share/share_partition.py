"""SharePartition: one share group's view of one topic partition (Kafka's SharePartition).

Kafka's words: the share-partition start offset (SPSO) is the first offset not yet
acknowledged or archived; the in-flight records are those from the SPSO up to the end
offset (SPEO, here `end_offset`: the next offset to fetch fresh from the log); each has a
state (available, acquired, acknowledged, archived) and a delivery count, and an acquired
record is locked to one member until it is acknowledged or its lock times out.

The in-flight records are kept as spans, contiguous offset ranges in one state, never one
Python object per record: a fetch acquires whole batches as one span, an acknowledgement
of a sub-range splits a span, and spans at the start that are done (acknowledged or
archived) are dropped as the start offset moves past them. Nothing here does I/O or reads
a clock: times are passed in (trio's clock, in seconds), so the state machine is tested
on its own.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterator

import attrs

__all__ = ["AckType", "RecordState", "SharePartition", "Span"]


class RecordState(enum.IntEnum):
    """Kafka's RecordState ids (also the states written to __share_group_state)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(enum.IntEnum):
    """AcknowledgeTypes of ShareFetch/ShareAcknowledge (0 is a gap: no record there)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


S = RecordState
_DONE = (S.ACKNOWLEDGED, S.ARCHIVED)


@attrs.define(eq=False)
class Span:
    first: int
    last: int  # inclusive
    state: RecordState
    delivery_count: int = 0
    member_id: str | None = None
    deadline: float = 0.0  # when the acquisition lock runs out (trio's clock)

    def split_at(self, offset: int) -> Span:
        """Cut before `offset` (first < offset <= last): self keeps the head; the tail is
        returned."""
        tail = attrs.evolve(self, first=offset)
        self.last = offset - 1
        return tail


@attrs.define(eq=False)
class SharePartition:
    topic: str
    partition: int
    start_offset: int
    end_offset: int = -1  # next offset to fetch fresh; -1 until set from the start offset
    spans: list[Span] = attrs.Factory(list)
    # Bumped by every change a durable snapshot should carry (`share_state`).
    state_epoch: int = 0
    dirty: bool = False
    # In a cluster: the partition's leader epoch this state was read at, and this broker's
    # leadership of it (the replica's leader generation: the state is read again only when
    # this broker becomes leader anew, not when the ISR changes the epoch).
    leader_epoch: int = -1
    generation: int = -1

    def __attrs_post_init__(self) -> None:
        if self.end_offset < 0:
            self.end_offset = self.start_offset

    # -- reading -----------------------------------------------------------------------

    def in_flight(self) -> int:
        return self.end_offset - self.start_offset

    def acquired_count(self) -> int:
        return sum(s.last - s.first + 1 for s in self.spans if s.state is S.ACQUIRED)

    def available_spans(self) -> Iterator[Span]:
        return (s for s in self.spans if s.state is S.AVAILABLE)

    def has_available(self) -> bool:
        return any(s.state is S.AVAILABLE for s in self.spans)

    def next_deadline(self) -> float | None:
        deadlines = [s.deadline for s in self.spans if s.state is S.ACQUIRED]
        return min(deadlines) if deadlines else None

    def state_of(self, offset: int) -> tuple[RecordState, int]:
        """(state, delivery count) of one offset, for tests and the admin view."""
        if offset < self.start_offset:
            return S.ARCHIVED, 0
        if offset >= self.end_offset:
            return S.AVAILABLE, 0
        span = self.spans[self._index(offset)]
        return span.state, span.delivery_count

    def _index(self, offset: int) -> int:
        i = bisect.bisect_right([s.first for s in self.spans], offset) - 1
        return i

    # -- acquiring ---------------------------------------------------------------------

    def acquire_available(
        self, member_id: str, max_records: int, deadline: float, upto: int | None = None
    ) -> list[tuple[int, int, int]]:
        """Acquire released or timed-out records (redeliveries), at most `max_records`, none
        after `upto`: returns their (first, last, delivery count) ranges."""
        out: list[tuple[int, int, int]] = []
        budget = max_records
        i = 0
        if upto is not None:
            self._cut(upto + 1)
        while i < len(self.spans) and budget > 0:
            span = self.spans[i]
            if upto is not None and span.first > upto:
                break
            if span.state is S.AVAILABLE:
                if span.last - span.first + 1 > budget:
                    self.spans.insert(i + 1, span.split_at(span.first + budget))
                span.state = S.ACQUIRED
                span.delivery_count += 1
                span.member_id = member_id
                span.deadline = deadline
                budget -= span.last - span.first + 1
                out.append((span.first, span.last, span.delivery_count))
                self.dirty = True
            i += 1
        self._merge()
        return out

    def acquire_new(
        self, member_id: str, first: int, last: int, deadline: float
    ) -> tuple[int, int, int]:
        """Acquire records fetched fresh from the log: [first, last] are the offsets of the
        whole batches read at the end offset (first may lie before it when the end offset
        is inside a batch; the records before it are not acquired again)."""
        first = max(first, self.end_offset)
        if first > self.end_offset:
            # Offsets the log no longer has (compacted or deleted): nothing to deliver.
            self._append(Span(self.end_offset, first - 1, S.ARCHIVED))
        self._append(Span(first, last, S.ACQUIRED, 1, member_id, deadline))
        self.end_offset = last + 1
        self.dirty = True
        return first, last, 1

    def _append(self, span: Span) -> None:
        self.spans.append(span)

    # -- acknowledging and releasing ----------------------------------------------------

    def acknowledge(
        self, member_id: str, first: int, last: int, ack: AckType, delivery_limit: int
    ) -> bool:
        """Apply one acknowledgement to [first, last]: every in-flight record of it must be
        acquired by `member_id` (else nothing changes and False is returned, Kafka's
        INVALID_RECORD_STATE). Offsets below the start offset are already archived and
        pass."""
        if last < first or last >= self.end_offset:
            return False
        if last < self.start_offset:
            return True
        lo, hi = max(first, self.start_offset), last
        for span in self._covering(lo, hi):
            if span.state is not S.ACQUIRED or span.member_id != member_id:
                return False
        self._cut(lo)
        self._cut(hi + 1)
        for span in self._covering(lo, hi):
            if ack is AckType.ACCEPT:
                self._finish(span, S.ACKNOWLEDGED)
            elif ack is AckType.RELEASE:
                self._release(span, delivery_limit)
            else:  # REJECT, GAP
                self._finish(span, S.ARCHIVED)
        self._advance()
        return True

    def release_member(self, member_id: str, delivery_limit: int) -> int:
        """Release every record `member_id` holds (it left, or closed its share session):
        returns how many."""
        count = 0
        for span in self.spans:
            if span.state is S.ACQUIRED and span.member_id == member_id:
                count += span.last - span.first + 1
                self._release(span, delivery_limit)
        self._advance()
        return count

    def expire_locks(self, now: float, delivery_limit: int) -> int:
        """Release the records whose acquisition lock ran out: returns how many."""
        count = 0
        for span in self.spans:
            if span.state is S.ACQUIRED and span.deadline <= now:
                count += span.last - span.first + 1
                self._release(span, delivery_limit)
        self._advance()
        return count

    def _release(self, span: Span, delivery_limit: int) -> None:
        # A record delivered as often as the limit allows is archived instead (Kafka).
        span.state = S.ARCHIVED if span.delivery_count >= delivery_limit else S.AVAILABLE
        span.member_id = None
        span.deadline = 0.0
        self.dirty = True

    def _finish(self, span: Span, state: RecordState) -> None:
        span.state = state
        span.member_id = None
        span.deadline = 0.0
        self.dirty = True

    def _covering(self, lo: int, hi: int) -> Iterator[Span]:
        i = max(self._index(lo), 0)
        while i < len(self.spans) and self.spans[i].first <= hi:
            if self.spans[i].last >= lo:
                yield self.spans[i]
            i += 1

    def _cut(self, offset: int) -> None:
        """Make `offset` the first offset of a span (when it is inside one)."""
        if offset <= self.start_offset or offset >= self.end_offset:
            return
        i = self._index(offset)
        span = self.spans[i]
        if span.first < offset:
            self.spans.insert(i + 1, span.split_at(offset))

    def _advance(self) -> None:
        """Move the start offset past the done spans at the front, and merge neighbours."""
        drop = 0
        for span in self.spans:
            if span.state not in _DONE:
                break
            drop += 1
        if drop:
            self.start_offset = self.spans[drop - 1].last + 1
            del self.spans[:drop]
            self.state_epoch += 1
        self._merge()

    def _merge(self) -> None:
        merged: list[Span] = []
        for span in self.spans:
            prev = merged[-1] if merged else None
            if (
                prev is not None
                and prev.state is span.state
                and span.state is not S.ACQUIRED
                and prev.delivery_count == span.delivery_count
                and prev.last + 1 == span.first
            ):
                prev.last = span.last
            else:
                merged.append(span)
        self.spans = merged

    # -- moving ---------------------------------------------------------------------------

    def reset_to(self, offset: int) -> None:
        """Start over at `offset` (the log start moved past the start offset, or an
        administrator set it): every in-flight record before it is archived."""
        self.spans = [s for s in self.spans if s.last >= offset]
        if self.spans and self.spans[0].first < offset:
            self.spans[0].first = offset
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)
        self.state_epoch += 1
        self.dirty = True
