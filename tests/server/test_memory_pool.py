"""queued.max.request.bytes: the request memory pool, and frames that take from it only as
their bytes arrive."""

import struct

import pytest
import trio

from trio_broker.protocol.framing import NEED_DATA, NEED_MEMORY, FrameReader
from trio_broker.server.memory_pool import MemoryPool
from trio_broker.server.sendfile import queued_bytes

# -- the pool -------------------------------------------------------------------------------


async def test_reserve_and_release():
    pool = MemoryPool(100)
    await pool.reserve(30)
    assert pool.try_reserve(50)
    assert (pool.used, pool.available) == (80, 20)
    pool.release(30)
    pool.release(50)
    assert pool.used == 0


async def test_one_reservation_may_overshoot_while_any_memory_is_left():
    # Kafka's non-strict SimpleMemoryPool: a request as large as the pool always fits
    # once the pool is not exhausted.
    pool = MemoryPool(100)
    assert pool.try_reserve(90)
    assert pool.try_reserve(60)
    assert pool.available == -50
    assert not pool.try_reserve(1)
    pool.release(60)
    assert pool.try_reserve(1)


def test_release_more_than_reserved_is_a_bug():
    pool = MemoryPool(100)
    pool.try_reserve(10)
    with pytest.raises(AssertionError):
        pool.release(11)


async def test_waiters_resume_in_order_and_newcomers_queue_behind(nursery):
    pool = MemoryPool(100)
    assert pool.try_reserve(100)
    order = []

    async def want(name, size):
        await pool.reserve(size)
        order.append(name)

    for name in "abc":
        nursery.start_soon(want, name, 10)
        await trio.testing.wait_all_tasks_blocked()
    assert pool.waiting == 3
    assert not pool.try_reserve(1)  # no overtaking the line

    pool.release(5)  # 95 used: room for one (non-strict), in order
    await trio.testing.wait_all_tasks_blocked()
    assert order == ["a"]
    assert pool.used == 105
    pool.release(10)
    await trio.testing.wait_all_tasks_blocked()
    assert order == ["a", "b"]
    pool.release(85)  # the rest of the first 100
    await trio.testing.wait_all_tasks_blocked()
    assert order == ["a", "b", "c"]
    assert pool.used == 30  # what the three waiters hold now
    assert pool.waiting == 0


async def test_cancelled_waiter_leaves_the_line_and_holds_nothing(nursery):
    pool = MemoryPool(10)
    assert pool.try_reserve(10)
    got = []

    async def want(name, scope):
        with scope:
            await pool.reserve(4)
            got.append(name)

    first, second = trio.CancelScope(), trio.CancelScope()
    nursery.start_soon(want, "first", first)
    await trio.testing.wait_all_tasks_blocked()
    nursery.start_soon(want, "second", second)
    await trio.testing.wait_all_tasks_blocked()
    first.cancel()
    await trio.testing.wait_all_tasks_blocked()
    assert pool.waiting == 1
    pool.release(10)
    await trio.testing.wait_all_tasks_blocked()
    assert got == ["second"]
    assert pool.used == 4


async def test_granted_but_cancelled_gives_the_memory_back():
    # All reserved memory is the caller's own: granted at once (a standstill), but the
    # caller is cancelled at that checkpoint, so the grant must go back.
    pool = MemoryPool(10)
    assert pool.try_reserve(10)
    with trio.CancelScope() as scope:
        scope.cancel()
        await pool.reserve(7, held=10)
    assert scope.cancelled_caught
    assert pool.used == 10
    assert pool.waiting == 0


async def test_standstill_lets_the_biggest_holder_through(nursery):
    # Two frames each hold part of their memory and wait for more; nobody else holds any,
    # so nothing would ever be released: the one holding most goes on.
    pool = MemoryPool(100)
    assert pool.try_reserve(40)
    assert pool.try_reserve(60)
    got = []

    async def grow(name, held):
        await pool.reserve(30, held=held)
        got.append(name)

    nursery.start_soon(grow, "small", 40)
    await trio.testing.wait_all_tasks_blocked()
    assert got == []  # the other 60 bytes may yet come back
    nursery.start_soon(grow, "big", 60)
    await trio.testing.wait_all_tasks_blocked()
    assert got == ["big"]
    assert pool.used == 130
    pool.release(90)  # "big" read and answered its frame
    await trio.testing.wait_all_tasks_blocked()
    assert got == ["big", "small"]


async def test_unbounded_pool_never_waits():
    pool = MemoryPool(-1)
    await pool.reserve(10**12)
    assert pool.try_reserve(10**12)
    pool.release(2 * 10**12)
    assert pool.used == 0


# -- frames charged to the pool ---------------------------------------------------------------


def feed(reader: FrameReader, data: bytes, step: int) -> list[memoryview]:
    """Write `data` into the reader's own buffers `step` bytes at a time."""
    frames, pos = [], 0
    while pos < len(data):
        target = reader.receive_buffer()
        n = min(len(target), step, len(data) - pos)
        target[:n] = data[pos : pos + n]
        reader.received(n)
        pos += n
        while (frame := reader.next_frame()) not in (NEED_DATA, NEED_MEMORY):
            frames.append(frame)
    return frames


def test_announced_size_alone_costs_no_pool_memory():
    pool = MemoryPool(1 << 30)
    reader = FrameReader(max_frame_bytes=100_000_000, pool=pool)
    assert feed(reader, struct.pack(">i", 100_000_000), 4) == []
    assert reader.next_frame() is NEED_DATA
    assert pool.used == 0
    assert len(reader.receive_buffer()) <= 64 * 1024


def test_large_frame_grows_with_its_bytes():
    pool = MemoryPool(1 << 30)
    size = 8 * 1024 * 1024
    reader = FrameReader(max_frame_bytes=size, pool=pool)
    body = bytes(range(256)) * (size // 256)
    data = struct.pack(">i", size) + body
    sent = 0
    while sent < size // 8:
        feed(reader, data[sent : sent + 10_000], 10_000)
        sent += 10_000
        # Under an eighth of the frame: at most twice what arrived (or two chunks).
        assert pool.used <= max(2 * sent, 128 * 1024), sent
    (frame,) = feed(reader, data[sent:], 100_000)
    assert frame == body
    assert pool.used == size + 4  # the exact buffer, handed over whole
    frame[0] = 0  # writable, in place
    reader.frame_done()
    assert pool.used == 0


def test_small_frames_are_charged_until_done():
    pool = MemoryPool(1 << 20)
    reader = FrameReader(max_frame_bytes=1000, pool=pool)
    frames = feed(reader, struct.pack(">i", 5) + b"hello" + struct.pack(">i", 3) + b"abc", 100)
    assert [bytes(f) for f in frames] == [b"hello", b"abc"]
    assert pool.used == 8
    reader.frame_done()
    assert pool.used == 0


def test_exhausted_pool_answers_need_memory_until_granted():
    pool = MemoryPool(10)
    assert pool.try_reserve(10)
    reader = FrameReader(max_frame_bytes=1000, pool=pool)
    assert feed(reader, struct.pack(">i", 5) + b"hello", 100) == []
    assert reader.next_frame() is NEED_MEMORY
    assert reader.memory_wanted == 5
    pool.release(10)
    assert pool.try_reserve(5)  # what the connection does, awaiting pool.reserve()
    reader.granted(5)
    assert bytes(reader.next_frame()) == b"hello"
    reader.close()
    assert pool.used == 0


def test_close_mid_frame_returns_everything():
    pool = MemoryPool(1 << 30)
    reader = FrameReader(max_frame_bytes=10_000_000, pool=pool)
    feed(reader, struct.pack(">i", 5_000_000) + b"x" * 1_000_000, 50_000)
    assert pool.used > 0
    reader.close()
    assert pool.used == 0


def test_large_frame_already_queued_gets_its_exact_buffer_at_once():
    # The socket says the rest of the frame is already there (FIONREAD): no growing in
    # steps, one buffer of the frame's size that the socket fills directly.
    pool = MemoryPool(1 << 30)
    size = 4 * 1024 * 1024
    reader = FrameReader(max_frame_bytes=size, pool=pool)
    data = struct.pack(">i", size) + bytes(range(256)) * (size // 256)
    first = 10_004
    reader.receive_buffer()[:first] = data[:first]
    reader.received(first)
    assert reader.next_frame() is NEED_DATA
    target = reader.receive_buffer(lambda: len(data) - first)
    assert len(target) == len(data) - first
    assert pool.used == len(data)
    target[:] = data[first:]
    reader.received(len(target))
    assert reader.next_frame() == data[4:]


def test_large_frame_not_yet_sent_stays_in_the_chunk():
    pool = MemoryPool(1 << 30)
    reader = FrameReader(max_frame_bytes=100_000_000, pool=pool)
    reader.receive_buffer()[:4] = struct.pack(">i", 100_000_000)
    reader.received(4)
    assert reader.next_frame() is NEED_DATA
    assert len(reader.receive_buffer(lambda: 0)) == 64 * 1024 - 4
    assert pool.used == 0


async def test_queued_bytes_says_what_the_socket_holds():
    a, b = trio.socket.socketpair()
    with a, b:
        assert queued_bytes(b) == 0
        await a.send(b"x" * 1000)
        await trio.lowlevel.wait_readable(b)
        assert queued_bytes(b) == 1000
