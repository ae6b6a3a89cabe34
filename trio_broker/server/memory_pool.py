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
"""

from __future__ import annotations

import collections

import trio

from trio_broker.protocol.framing import SpareBudget

__all__ = ["MemoryPool"]

SPARE_BYTES = 64 * 1024 * 1024


class _Waiter:
    __slots__ = ("event", "granted", "held", "size")

    def __init__(self, size: int, held: int) -> None:
        self.size = size
        self.held = held
        self.granted = False
        self.event = trio.Event()


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
        self.used = 0
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._waiters_hold = 0  # bytes reserved by connections now waiting here

    def __repr__(self) -> str:
        return f"<MemoryPool {self.used}/{self.size_bytes} used, {len(self._waiters)} waiting>"

    @property
    def available(self) -> int:
        """Bytes left; negative after an overshoot."""
        return self.size_bytes - self.used

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def try_reserve(self, size: int) -> bool:
        """Reserve `size` bytes if memory is left and nobody waits in line; never blocks."""
        if not self.bounded:
            self.used += size
            return True
        if self._waiters or self.used >= self.size_bytes:
            return False
        self.used += size
        return True

    async def reserve(self, size: int, *, held: int = 0) -> None:
        """Reserve `size` bytes, waiting in line while the pool is exhausted. `held` is what
        the caller already holds and cannot release before this reservation succeeds."""
        if self.try_reserve(size):
            await trio.lowlevel.checkpoint()
            return
        waiter = _Waiter(size, held)
        self._waiters.append(waiter)
        self._waiters_hold += held
        self._grant()
        try:
            await waiter.event.wait()
        except BaseException:
            if waiter.granted:
                self.release(size)
            else:
                self._waiters.remove(waiter)
                self._waiters_hold -= held
                self._grant()
            raise

    def release(self, size: int) -> None:
        """Return `size` previously reserved bytes, letting waiters in while memory is left."""
        if size <= 0:
            return
        self.used -= size
        if self.used < 0:
            raise AssertionError(f"memory pool released more than reserved ({self.used})")
        if self._waiters:
            self._grant()

    def _grant(self) -> None:
        waiters = self._waiters
        while waiters and (self.used < self.size_bytes or not self.bounded):
            self._admit(waiters.popleft())
        if waiters and self.used <= self._waiters_hold:
            # A standstill: all reserved memory is held by waiters. Let through the one
            # holding most (the frame closest to complete) and keep letting it through,
            # so the overshoot is one frame, not a step of every waiting frame.
            chosen = max(waiters, key=lambda w: w.held)
            waiters.remove(chosen)
            self._admit(chosen)

    def _admit(self, waiter: _Waiter) -> None:
        self._waiters_hold -= waiter.held
        self.used += waiter.size
        waiter.granted = True
        waiter.event.set()
