"""BufferPool: pooled batch.size buffers, the non-pooled remainder, FIFO waiters, max.block.ms."""

from __future__ import annotations

import pytest
import trio

from trio_broker.client.buffer_pool import BufferPool
from trio_broker.client.errors import BufferExhaustedError, RecordTooLargeError

KiB = 1024


async def test_pooled_buffers_are_reused():
    pool = BufferPool(4 * KiB, 1 * KiB)
    first = await pool.allocate(KiB, max_block_s=1)
    assert len(first) == KiB and pool.available_memory == 3 * KiB
    pool.deallocate(first)
    assert pool.free_buffers == 1 and pool.available_memory == 4 * KiB
    again = await pool.allocate(KiB, max_block_s=1)
    assert again is first  # from the free list, not a new allocation
    assert pool.buffers_created == 1


async def test_other_sizes_come_from_the_non_pooled_remainder():
    pool = BufferPool(4 * KiB, 1 * KiB)
    pooled = [await pool.allocate(KiB, 1) for _ in range(3)]
    for buf in pooled:
        pool.deallocate(buf)
    assert pool.free_buffers == 3 and pool.unallocated_memory == KiB
    # 3 KiB needs the free list's buffers given back to the remainder.
    big = await pool.allocate(3 * KiB, 1)
    assert len(big) == 3 * KiB
    assert pool.free_buffers == 1 and pool.available_memory == KiB
    pool.deallocate(big)
    assert pool.available_memory == 4 * KiB and pool.unallocated_memory == 3 * KiB
    with pytest.raises(RecordTooLargeError, match="MESSAGE_TOO_LARGE"):
        await pool.allocate(5 * KiB, 1)


async def test_waiters_are_served_first_come_first_served(autojump_clock):
    pool = BufferPool(2 * KiB, KiB)
    held = [await pool.allocate(KiB, 1), await pool.allocate(KiB, 1)]
    order: list[str] = []

    async def wants(name: str, size: int, task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        buf = await pool.allocate(size, max_block_s=100)
        order.append(name)
        await trio.sleep(1)
        pool.deallocate(buf)

    async with trio.open_nursery() as nursery:
        await nursery.start(wants, "big", 2 * KiB)  # first in line, needs everything
        await nursery.start(wants, "small", KiB)
        assert pool.queued == 2
        # A newcomer does not jump the queue even when memory is there for it.
        pool.deallocate(held.pop())
        await trio.sleep(0.1)
        assert order == [] and pool.try_allocate(KiB) is None
        pool.deallocate(held.pop())
    assert order == ["big", "small"]
    assert pool.available_memory == 2 * KiB and pool.queued == 0


async def test_allocation_times_out_after_max_block(autojump_clock):
    pool = BufferPool(2 * KiB, KiB)
    held = [await pool.allocate(KiB, 1), await pool.allocate(KiB, 1)]
    start = trio.current_time()
    with pytest.raises(BufferExhaustedError, match="max blocking time 250 ms"):
        await pool.allocate(KiB, max_block_s=0.25)
    assert trio.current_time() - start == pytest.approx(0.25)
    assert pool.queued == 0
    for buf in held:
        pool.deallocate(buf)
    assert pool.available_memory == 2 * KiB


async def test_a_cancelled_waiter_leaves_the_queue_and_passes_its_turn(autojump_clock):
    pool = BufferPool(KiB, KiB)
    held = await pool.allocate(KiB, 1)
    got: list[bytearray] = []
    first = trio.CancelScope()

    async def cancelled_one():
        with first:
            await pool.allocate(KiB, 100)

    async def second():
        got.append(await pool.allocate(KiB, 100))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancelled_one)
        await trio.sleep(0.01)
        nursery.start_soon(second)
        await trio.sleep(0.01)
        assert pool.queued == 2
        first.cancel()
        await trio.sleep(0.01)
        assert pool.queued == 1
        pool.deallocate(held)
    assert len(got) == 1 and pool.queued == 0 and pool.available_memory == 0
