"""Kafka's request memory pool (`queued.max.request.bytes`): a bound on request bytes.

Every request frame's buffer is charged here before it exists and released once the
request is answered, so the bytes the broker holds for requests stay under the pool's size
however many clients announce however large frames. As Kafka's `SimpleMemoryPool` in its
broker (non-strict) mode, a reservation succeeds while *any* memory is left, so the pool
may overshoot by one reservation; that is what lets a single request as large as
`socket.request.max.bytes` through even when the pool is nearly full.

Unlike Kafka, a connection that finds the pool empty does not spin on a mute/unmute
cycle: it waits here, in line. Waiters are served first come, first served, and a newcomer
never overtakes them. Frames grow as their bytes arrive (see `FrameReader`), so a frame
can hold part of its memory while waiting for more; if every reserved byte belongs to a
connection that is itself waiting here, nothing would ever be released, and the first in
line holding the most is let through regardless (one frame's overshoot, which ends the
standstill once that frame is read and answered).

Fairness (issue 34). A large frame (`large_frame_bytes`, 1 MiB, or an eighth of a smaller
pool) holds its memory for as long as its client takes to send it, and fifty clients that
announce 100 MB and stop sending once held every byte, starving everyone. So large frames
have a line of their own and may take at most `large_limit` (three quarters of the pool)
together, each connection at most `share` of that (an eighth) while others hold large
frames too; past its share a frame waits until it is alone or the standstill rule lets it
through, so one request of `socket.request.max.bytes` still always gets through. Small
frames take from the whole pool as before, and always from the quarter large ones cannot
take: however many large frames are in progress, small requests are read and answered.
Large frames that stop progressing are dropped by the processor's idle sweep.
"""

from __future__ import annotations

import collections

import trio

from trio_broker.protocol.framing import SpareBudget

__all__ = ["MemoryPool"]

SPARE_BYTES = 64 * 1024 * 1024
LARGE_FRAME_BYTES = 1024 * 1024  # "such as 1 MiB": below it a request is small
_MIN_LARGE_FRAME_BYTES = 128 * 1024  # two read chunks: a frame that fits one is small
_SMALL_RESERVE = 4  # 1/4 of the pool is never taken by large frames
_SHARE = 8  # a connection's large frame: 1/8 of what large frames may take, unless alone


class _Waiter:
    __slots__ = ("event", "granted", "held", "holding", "large", "size")

    def __init__(self, size: int, held: int, large: bool, holding: int) -> None:
        self.size = size
        self.held = held
        self.large = large
        self.holding = holding
        self.granted = False
        self.event = trio.Event()


class _Line:
    """Waiters of one class, in order, and what they hold meanwhile."""

    __slots__ = ("hold", "waiters")

    def __init__(self) -> None:
        self.waiters: collections.deque[_Waiter] = collections.deque()
        self.hold = 0


class MemoryPool:
    """`size_bytes` <= 0 means unbounded (Kafka's -1): reservations always succeed."""

    def __init__(self, size_bytes: int) -> None:
        self.size_bytes = size_bytes
        self.bounded = size_bytes > 0
        # Large request buffers the connections keep to fill again (FrameReader): not
        # requests, so not charged here, but bounded for all connections together.
        self.spares = SpareBudget(
            min(SPARE_BYTES, size_bytes // 4) if self.bounded else SPARE_BYTES
        )
        self.large_frame_bytes = (
            min(LARGE_FRAME_BYTES, max(size_bytes // 8, _MIN_LARGE_FRAME_BYTES))
            if self.bounded
            else LARGE_FRAME_BYTES
        )
        self.small_reserve = size_bytes // _SMALL_RESERVE if self.bounded else 0
        self.large_limit = size_bytes - self.small_reserve
        self.share = max(self.large_limit // _SHARE, self.large_frame_bytes)
        self.used = 0
        self.large_used = 0  # of `used`, by large frames
        self._small = _Line()
        self._large = _Line()

    def __repr__(self) -> str:
        return (
            f"<MemoryPool {self.used}/{self.size_bytes} used ({self.large_used} by large"
            f" frames), {self.waiting} waiting>"
        )

    @property
    def available(self) -> int:
        """Bytes left; negative after an overshoot."""
        return self.size_bytes - self.used

    @property
    def waiting(self) -> int:
        return len(self._small.waiters) + len(self._large.waiters)

    def _small_fits(self) -> bool:
        return self.used < self.size_bytes or self.used - self.large_used < self.small_reserve

    def _large_fits(self, held: int, holding: int) -> bool:
        if self.used >= self.size_bytes or self.large_used >= self.large_limit:
            return False
        # Past its share only while no other connection holds a large frame.
        return holding <= self.share or self.large_used <= held

    def try_reserve(
        self, size: int, *, large: bool = False, held: int = 0, holding: int = 0
    ) -> bool:
        """Reserve `size` bytes if memory is left and nobody waits in line; never blocks.
        `large`: for a frame of `large_frame_bytes` or more; `held` is what the caller
        holds already, `holding` what its frame will hold with this (default `size`)."""
        if self.bounded:
            if large:
                if self._large.waiters or not self._large_fits(held, holding or size):
                    return False
            elif self._small.waiters or not self._small_fits():
                return False
        self._charge(size, large)
        return True

    def _charge(self, size: int, large: bool) -> None:
        self.used += size
        if large:
            self.large_used += size

    async def reserve(
        self, size: int, *, held: int = 0, large: bool = False, holding: int = 0
    ) -> None:
        """Reserve `size` bytes, waiting in line while the pool is exhausted. `held` is what
        the caller already holds and cannot release before this reservation succeeds."""
        if self.try_reserve(size, large=large, held=held, holding=holding):
            await trio.lowlevel.checkpoint()
            return
        waiter = _Waiter(size, held, large, holding or size)
        line = self._large if large else self._small
        line.waiters.append(waiter)
        line.hold += held
        self._grant()
        try:
            await waiter.event.wait()
        except BaseException:
            if waiter.granted:
                self.release(size, large=large)
            else:
                line.waiters.remove(waiter)
                line.hold -= held
                self._grant()
            raise

    def release(self, size: int, *, large: bool = False) -> None:
        """Return `size` previously reserved bytes, letting waiters in while memory is left."""
        if size <= 0:
            return
        self.used -= size
        if large:
            self.large_used -= size
        if self.used < 0 or self.large_used < 0:
            raise AssertionError(f"memory pool released more than reserved: {self!r}")
        if self._small.waiters or self._large.waiters:
            self._grant()

    def _grant(self) -> None:
        small = self._small
        while small.waiters and (self._small_fits() or not self.bounded):
            self._admit(small, small.waiters.popleft())
        if small.waiters and self.used - self.large_used <= small.hold:
            # A standstill: all memory small frames hold is held by small frames waiting
            # here (large frames may never give theirs back). Let through the one holding
            # most (the frame closest to complete) and keep letting it through, so the
            # overshoot is one frame, not a step of every waiting frame.
            self._admit_most(small)
        large = self._large
        while large.waiters and (
            not self.bounded or self._large_fits(large.waiters[0].held, large.waiters[0].holding)
        ):
            self._admit(large, large.waiters.popleft())
        if (
            large.waiters
            and self.large_used <= large.hold
            and (self.used < self.size_bytes or self.used <= large.hold + small.hold)
        ):
            # The same for large frames: every byte they hold is held by one waiting here
            # (and no small frame holds what would let them in).
            self._admit_most(large)

    def _admit_most(self, line: _Line) -> None:
        chosen = max(line.waiters, key=lambda w: w.held)
        line.waiters.remove(chosen)
        self._admit(line, chosen)

    def _admit(self, line: _Line, waiter: _Waiter) -> None:
        line.hold -= waiter.held
        self._charge(waiter.size, waiter.large)
        waiter.granted = True
        waiter.event.set()
