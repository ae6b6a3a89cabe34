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


# -- fairness (issue 34): large frames in progress cannot starve small requests ----------------

MiB = 1 << 20


def test_the_pool_scales_its_fairness_to_its_size():
    pool = MemoryPool(100 * MiB)
    assert pool.large_frame_bytes == MiB
    assert (pool.small_reserve, pool.large_limit) == (25 * MiB, 75 * MiB)
    assert pool.share == 75 * MiB // 8
    small = MemoryPool(MiB)  # a 1 MiB pool still tells large frames from small ones
    assert small.large_frame_bytes == 128 * 1024


def test_small_requests_get_memory_while_large_frames_hold_the_pool():
    pool = MemoryPool(100)
    pool.large_frame_bytes = 10
    pool.share = 100  # (this test is not about shares)
    assert pool.try_reserve(60, large=True)
    assert pool.try_reserve(40, large=True)  # the limit (75) overshot by one reservation
    assert not pool.try_reserve(1, large=True)
    assert pool.try_reserve(10)  # small: the pool is spent, its reserved quarter is not
    assert pool.try_reserve(20)  # ... non-strict, as the whole pool is
    assert not pool.try_reserve(1)
    assert (pool.used, pool.large_used) == (130, 100)


async def test_large_frames_wait_in_their_own_line(nursery):
    pool = MemoryPool(100)
    pool.share = 100
    assert pool.try_reserve(80, large=True)
    got = []

    async def want(name, size, large):
        await pool.reserve(size, large=large)
        got.append(name)

    nursery.start_soon(want, "large", 10, True)
    await trio.testing.wait_all_tasks_blocked()
    nursery.start_soon(want, "small", 10, False)  # not behind the large one
    await trio.testing.wait_all_tasks_blocked()
    assert got == ["small"]
    pool.release(30, large=True)
    await trio.testing.wait_all_tasks_blocked()
    assert got == ["small", "large"]


def test_a_connection_past_its_share_goes_on_only_when_alone():
    pool = MemoryPool(800)  # large frames may take 600, each connection 75 of it
    assert pool.share == max(600 // 8, pool.large_frame_bytes)
    pool.share = 75
    assert pool.try_reserve(50, large=True, holding=50)
    # Another connection's frame, growing past 75, while the first holds 50: refused.
    assert not pool.try_reserve(100, large=True, held=40, holding=100)
    # Within its share it may grow.
    assert pool.try_reserve(70, large=True, held=0, holding=70)
    pool.release(50, large=True)
    pool.release(70, large=True)
    # Alone, a frame takes what it needs (one request of socket.request.max.bytes).
    assert pool.try_reserve(40, large=True)
    assert pool.try_reserve(700, large=True, held=40, holding=740)
    assert pool.large_used == 740


async def test_large_frames_past_their_share_waiting_on_each_other_go_on(nursery):
    # Two connections each hold their share and wait to grow past it: nobody else holds
    # anything, so the one holding most goes on (the standstill rule, per line).
    pool = MemoryPool(800)
    pool.share = 75
    assert pool.try_reserve(70, large=True, holding=70)
    assert pool.try_reserve(60, large=True, holding=60)
    got = []

    async def grow(name, held):
        await pool.reserve(200, large=True, held=held, holding=200)
        got.append(name)

    nursery.start_soon(grow, "second", 60)
    await trio.testing.wait_all_tasks_blocked()
    assert got == []  # the first's 70 may come back
    nursery.start_soon(grow, "first", 70)
    await trio.testing.wait_all_tasks_blocked()
    assert got == ["first"]
    pool.release(270, large=True)  # read and answered
    await trio.testing.wait_all_tasks_blocked()
    assert got == ["first", "second"]


def test_reader_charges_large_frames_as_large():
    pool = MemoryPool(64 * MiB)
    assert pool.large_frame_bytes == MiB
    reader = FrameReader(max_frame_bytes=8 * MiB, pool=pool)
    size = 2 * MiB
    data = struct.pack(">i", size) + b"z" * size
    (frame,) = feed(reader, data, 256 * 1024)
    assert pool.large_used == pool.used == size + 4
    reader.frame_done()
    feed(reader, struct.pack(">i", 5) + b"small", 100)
    assert (pool.used, pool.large_used) == (5, 0)
    reader.close()
    assert (pool.used, pool.large_used) == (0, 0)
