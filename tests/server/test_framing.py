import struct

import pytest
from test_memory_pool import feed  # writes into the reader's own buffers, as a socket does

from trio_broker.protocol.framing import NEED_DATA, FrameReader, FrameTooLarge, InvalidFrame


def frames(*bodies: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(b)) + b for b in bodies)


def drain(reader: FrameReader) -> list[bytes]:
    out = []
    while (frame := reader.next_frame()) is not NEED_DATA:
        out.append(bytes(frame))
    return out


BODIES = [b"hello", b"", b"x" * 1000, b"\x00\x12\x00\x03"]


def test_whole_input():
    reader = FrameReader(max_frame_bytes=10_000)
    reader.receive_data(frames(*BODIES))
    assert drain(reader) == BODIES
    assert reader.buffered == 0


def test_byte_by_byte():
    reader = FrameReader(max_frame_bytes=10_000)
    got = []
    for b in frames(*BODIES):
        reader.receive_data(bytes([b]))
        got.extend(drain(reader))
    assert got == BODIES


@pytest.mark.parametrize("split", [1, 3, 4, 5, 7, 100, 1004])
def test_split_anywhere(split):
    data = frames(*BODIES)
    reader = FrameReader(max_frame_bytes=10_000)
    reader.receive_data(data[:split])
    got = drain(reader)
    reader.receive_data(data[split:])
    got += drain(reader)
    assert got == BODIES


def test_frames_are_writable_for_in_place_offset_rewrites():
    reader = FrameReader(max_frame_bytes=100)
    reader.receive_data(frames(b"abcd", b"efgh"))
    first = reader.next_frame()
    first[0:1] = b"z"
    assert bytes(first) == b"zbcd"
    assert bytes(reader.next_frame()) == b"efgh"


def test_refuses_large_frame_before_buffering_it():
    reader = FrameReader(max_frame_bytes=1024)
    reader.receive_data(struct.pack(">i", 2**31 - 1))  # a 2 GiB length prefix, nothing else
    with pytest.raises(FrameTooLarge) as info:
        reader.next_frame()
    assert info.value.size == 2**31 - 1


def test_negative_size_is_invalid():
    reader = FrameReader(max_frame_bytes=1024)
    reader.receive_data(struct.pack(">i", -5))
    with pytest.raises(InvalidFrame):
        reader.next_frame()


def test_receive_into_reader_buffer_small_and_large_frames():
    big = bytes(range(256)) * 1000  # larger than the 64 KiB chunk
    bodies = [b"a", big, b"bc", b"", big[:70_000]]
    data = memoryview(frames(*bodies))
    reader = FrameReader(max_frame_bytes=1 << 20)
    got, pos = [], 0
    while pos < len(data):
        target = reader.receive_buffer()
        assert len(target) > 0
        n = min(len(target), 5_000, len(data) - pos)
        target[:n] = data[pos : pos + n]
        reader.received(n)
        pos += n
        while (frame := reader.next_frame()) is not NEED_DATA:
            got.append(frame)
    assert [bytes(f) for f in got] == bodies
    # A large frame is handed over as its own buffer, without a copy: writable, exact size.
    assert len(got[1].obj) == len(big) + 4
    got[1][0] = 0xFF


def test_large_frame_refused_before_its_buffer_exists():
    reader = FrameReader(max_frame_bytes=1000)
    target = reader.receive_buffer()
    target[:4] = struct.pack(">i", 1001)
    reader.received(4)
    with pytest.raises(FrameTooLarge):
        reader.next_frame()


def test_large_frame_buffer_is_filled_again_once_free():
    first, second = b"\x01" * 300_000, b"\x02" * 250_000
    reader = FrameReader(max_frame_bytes=1 << 20)
    [frame] = feed(reader, frames(first), 200_000)
    assert bytes(frame) == first
    del frame  # the request is done with it
    [frame] = feed(reader, frames(second), 200_000)
    assert bytes(frame) == second
    # Handed over in the first frame's buffer (no new allocation): its tail is still there.
    assert len(frame.obj) == 4 + len(first)
    assert frame.obj[-1] == 1


def test_large_frame_still_referenced_is_never_overwritten():
    first, second, third = b"\x01" * 300_000, b"\x02" * 300_000, b"\x03" * 300_000
    reader = FrameReader(max_frame_bytes=1 << 20)
    [a] = feed(reader, frames(first), 200_000)
    record_view = a[1000:2000]  # e.g. a record batch someone still holds
    del a
    [b] = feed(reader, frames(second), 200_000)
    [c] = feed(reader, frames(third), 200_000)
    assert bytes(record_view) == first[1000:2000]
    assert record_view.obj is not b.obj and record_view.obj is not c.obj
    assert (bytes(b), bytes(c)) == (second, third)


def test_kept_buffer_larger_than_the_frame_leaves_the_next_frames_intact():
    big, smaller = bytes(range(256)) * 1200, bytes(range(255, -1, -1)) * 400  # 300 KiB, 100 KiB
    reader = FrameReader(max_frame_bytes=1 << 20)
    [frame] = feed(reader, frames(big), 200_000)
    del frame
    # The smaller frame goes into the larger kept buffer; the frames right behind it (sent
    # in the same bursts) must not be swallowed by that buffer's spare room.
    bodies = [smaller, b"next", smaller[:90_000], b""]
    got = feed(reader, frames(*bodies), 1 << 20)
    assert [bytes(f) for f in got] == bodies


def test_buffers_beyond_the_spare_limit_are_not_kept():
    reader = FrameReader(max_frame_bytes=1 << 22, spare_max_bytes=200_000)
    [frame] = feed(reader, frames(b"\x01" * 300_000), 200_000)
    del frame
    [frame] = feed(reader, frames(b"\x02" * 150_000), 200_000)
    assert bytes(frame) == b"\x02" * 150_000
    assert len(frame.obj) == 4 + 150_000  # a buffer of its own, the 300 KB one was let go


def test_readers_sharing_a_spare_budget_keep_no_more_than_it_allows():
    from trio_broker.protocol.framing import SpareBudget

    budget = SpareBudget(limit=350_000)
    a = FrameReader(max_frame_bytes=1 << 20, spares=budget)
    b = FrameReader(max_frame_bytes=1 << 20, spares=budget)
    [frame] = feed(a, frames(b"\x01" * 300_000), 200_000)
    del frame
    assert budget.held == 300_004  # a keeps its buffer
    [frame] = feed(b, frames(b"\x02" * 300_000), 200_000)
    del frame
    assert budget.held == 300_004  # b's would pass the limit: let go
    [frame] = feed(b, frames(b"\x03" * 150_000), 200_000)
    assert len(frame.obj) == 4 + 150_000  # so b allocates anew
    del frame
    [frame] = feed(a, frames(b"\x04" * 150_000), 200_000)
    assert len(frame.obj) == 300_004 and bytes(frame) == b"\x04" * 150_000  # a reuses its own
    del frame
    a.close()
    b.close()
    assert budget.held == 0


# -- reading into a buffer the reader does not own (an idle connection holds none) ----------


def borrowed(reader: FrameReader, scratch: bytearray, data: bytes) -> list[bytes]:
    """What a connection with nothing buffered does: read into its processor's buffer,
    take the frames complete there, settle; then the rest through its own buffers."""
    scratch[: len(data)] = data
    reader.borrow(scratch, len(data))
    try:
        frame = reader.next_frame()
    finally:
        reader.settle()
    out = [] if frame is NEED_DATA else [bytes(frame)]
    return out + drain(reader)


def test_frames_read_into_a_borrowed_buffer_are_copies():
    reader = FrameReader(max_frame_bytes=1 << 20)
    scratch = bytearray(64 * 1024)
    assert borrowed(reader, scratch, frames(b"one request")) == [b"one request"]
    assert not reader.has_buffer  # nothing left over: no buffer of its own either
    # Pipelined requests: those after the first wait in a chunk of the reader's own,
    # dropped once they are all taken (when the connection would wait for more).
    assert borrowed(reader, scratch, frames(*BODIES)) == BODIES
    reader.drop_buffer()
    assert not reader.has_buffer
    # A frame exactly the size of the borrowed buffer is copied too, never lent out.
    body = b"y" * (len(scratch) - 4)
    scratch[:] = frames(body)
    reader.borrow(scratch, len(scratch))
    frame = reader.next_frame()
    reader.settle()
    scratch[:] = bytes(len(scratch))  # the next connection's bytes
    assert bytes(frame) == body


def test_the_start_of_the_next_frame_is_kept_in_a_buffer_of_its_own():
    reader = FrameReader(max_frame_bytes=1 << 20)
    scratch = bytearray(64 * 1024)
    data = frames(b"first", b"second-and-longer")
    assert borrowed(reader, scratch, data[:15]) == [b"first"]
    assert reader.buffered == 15 - 9 and reader.has_buffer
    scratch[:] = bytes(len(scratch))  # overwritten by another connection: no harm
    reader.receive_data(data[15:])
    assert drain(reader) == [b"second-and-longer"]


def test_borrow_only_when_nothing_is_buffered():
    reader = FrameReader(max_frame_bytes=100)
    reader.receive_data(b"\x00\x00")
    with pytest.raises(AssertionError):
        reader.borrow(bytearray(10), 2)
