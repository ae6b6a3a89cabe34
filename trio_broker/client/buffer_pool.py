"""BufferPool: the producer's `buffer.memory`, as Kafka's BufferPool accounts it.

Memory is counted once, in two parts: a free list of `batch.size` buffers, kept for reuse
so the common batch costs no allocation, and the non-pooled remainder, from which any
other size is carved (and to which it returns). A request that cannot be met waits in a
FIFO queue, first come first served, up to `max.block.ms`, then raises
BufferExhaustedError. Returning memory (a batch acknowledged or failed) wakes the waiter
at the head of the queue.

    buffer = await pool.allocate(pool.poolable_size, max_block_s=60)
    ...
    pool.deallocate(buffer)
"""

from __future__ import annotations

from collections import deque

import trio

from trio_broker.client.errors import BufferExhaustedError

__all__ = ["BufferPool"]


class BufferPool:
    def __init__(self, total_memory: int, poolable_size: int) -> None:
        if poolable_size <= 0 or total_memory < poolable_size:
            raise ValueError("buffer.memory must hold at least one batch.size buffer")
        self.total_memory = total_memory
        self.poolable_size = poolable_size
        self._free: deque[bytearray] = deque()
        self._non_pooled_available = total_memory
        self._waiters: deque[trio.Event] = deque()
        # How many buffers were ever created (not taken from the free list): a test
        # counts these to show buffers are per batch and reused, never per record.
        self.buffers_created = 0

    # -- accounting -----------------------------------------------------------------------

    @property
    def available_memory(self) -> int:
        """Free bytes: pooled buffers on the free list plus the non-pooled remainder."""
        return len(self._free) * self.poolable_size + self._non_pooled_available

    @property
    def unallocated_memory(self) -> int:
        return self._non_pooled_available

    @property
    def free_buffers(self) -> int:
        return len(self._free)

    @property
    def queued(self) -> int:
        """How many allocations are waiting for memory."""
        return len(self._waiters)

    # -- allocation ------------------------------------------------------------------------

    def try_allocate(self, size: int) -> bytearray | None:
        """A buffer of `size` bytes now, or None (also when others are already waiting:
        FIFO means a newcomer never overtakes the queue)."""
        self._check_size(size)
        if self._waiters:
            return None
        return self._take(size)

    async def allocate(self, size: int, max_block_s: float) -> bytearray:
        """A buffer of `size` bytes, waiting (FIFO) up to `max_block_s` for the memory."""
        buffer = self.try_allocate(size)
        if buffer is not None:
            await trio.lowlevel.checkpoint_if_cancelled()
            return buffer
        event = trio.Event()
        self._waiters.append(event)
        try:
            with trio.move_on_after(max_block_s):
                while True:
                    if self._waiters[0] is event:
                        buffer = self._take(size)
                        if buffer is not None:
                            return buffer
                    await event.wait()
                    event = self._rearm(event)
            raise BufferExhaustedError(
                f"failed to allocate {size} bytes within the configured max blocking time "
                f"{max_block_s * 1000:.0f} ms (buffer.memory={self.total_memory}, "
                f"{self.available_memory} available, {len(self._waiters) - 1} waiting ahead "
                "or behind)"
            )
        finally:
            self._waiters.remove(event)
            self._wake_head()

    def _rearm(self, event: trio.Event) -> trio.Event:
        # An Event cannot be cleared: put a fresh one in this waiter's place in the queue.
        fresh = trio.Event()
        self._waiters[self._waiters.index(event)] = fresh
        return fresh

    def _take(self, size: int) -> bytearray | None:
        if size == self.poolable_size and self._free:
            return self._free.popleft()
        # Release pooled buffers into the non-pooled remainder until `size` fits.
        while self._non_pooled_available < size and self._free:
            self._free.pop()
            self._non_pooled_available += self.poolable_size
        if self._non_pooled_available < size:
            return None
        self._non_pooled_available -= size
        self.buffers_created += 1
        return bytearray(size)

    def deallocate(self, buffer: bytearray, size: int | None = None) -> None:
        """Return `buffer` (of `size` bytes, default its length) to the pool."""
        size = len(buffer) if size is None else size
        if size == self.poolable_size and len(buffer) == size:
            self._free.append(buffer)
        else:
            self._non_pooled_available += size
        self._wake_head()

    def _wake_head(self) -> None:
        if self._waiters:
            self._waiters[0].set()

    def _check_size(self, size: int) -> None:
        if size > self.total_memory:
            # Kafka's RecordTooLargeException: no amount of waiting would help.
            from trio_broker.client.errors import RecordTooLargeError

            raise RecordTooLargeError(
                f"a {size}-byte buffer is larger than buffer.memory={self.total_memory}"
            )
