import struct

import pytest

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
