"""Sans-IO framing of Kafka requests: bytes in, size-delimited frames out.

A Kafka request is an int32 size followed by that many bytes (header + body). The
reader refuses a frame whose declared size exceeds the limit *before* buffering it,
so a peer cannot make the broker allocate 2 GiB by sending four bytes.

    reader = FrameReader(max_frame_bytes=config.socket_request_max_bytes)
    reader.receive_data(chunk)
    while (frame := reader.next_frame()) is not NEED_DATA:
        ...
"""

from __future__ import annotations

import enum
import struct

__all__ = ["NEED_DATA", "FrameReader", "FrameTooLarge", "InvalidFrame"]

_SIZE = struct.Struct(">i")


class _NeedData(enum.Enum):
    NEED_DATA = "NEED_DATA"


NEED_DATA = _NeedData.NEED_DATA


class InvalidFrame(Exception):
    """The peer sent bytes that are not a Kafka frame; the connection must close."""


class FrameTooLarge(InvalidFrame):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds socket.request.max.bytes={limit}")
        self.size = size
        self.limit = limit


class FrameReader:
    """Accumulates received bytes and yields complete frames (without the size prefix).

    A returned frame is a writable memoryview over a buffer the reader no longer touches,
    so the caller may keep slices of it and rewrite record batch offsets in place.

    Bytes arrive either by copy (`receive_data`) or, on the hot path, straight into the
    reader's own buffer: `receive_buffer()` is where the next bytes go and `received(n)`
    says how many went there. Small frames are read many to a chunk and copied out one by
    one; a frame larger than a chunk gets a buffer of exactly its size once its length
    prefix is known, so the socket fills it directly and it is handed over whole.
    """

    __slots__ = ("_buf", "_chunk", "_end", "_need", "_start", "max_frame_bytes")

    def __init__(self, *, max_frame_bytes: int, chunk_bytes: int = 64 * 1024) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._chunk = chunk_bytes
        self._buf = bytearray()  # allocated on first receive: idle connections cost nothing
        self._start = 0  # unread bytes are _buf[_start:_end]
        self._end = 0
        self._need = -1  # the current frame's size once its prefix is read

    @property
    def buffered(self) -> int:
        return self._end - self._start

    @property
    def bytes_wanted(self) -> int:
        """How many more bytes complete the current frame (a hint for the receive size)."""
        if self._need < 0:
            return max(4 - self.buffered, 1)
        return max(self._need + 4 - self.buffered, 1)

    def receive_buffer(self) -> memoryview:
        """A writable view the next received bytes should be written into; never empty
        when `next_frame()` has just answered NEED_DATA."""
        want = 4 + self._need if self._need >= 0 else 4
        if want > self._chunk and len(self._buf) - self._start < want:
            # A large frame: its own buffer, exactly its size, holding what we have of it.
            self._move_to(bytearray(want))
        elif not self._buf or len(self._buf) - self._end < min(want - self.buffered, 512):
            # Little room left at the tail: a fresh chunk, starting with the unread bytes.
            # (Frames taken out of the old one were copies; nothing else holds it.)
            self._move_to(bytearray(max(self._chunk, want)))
        return memoryview(self._buf)[self._end :]

    def received(self, n: int) -> None:
        """`n` bytes were written at the start of the last `receive_buffer()`."""
        self._end += n

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Copy `data` in: for callers that have bytes rather than a socket."""
        view = memoryview(data).cast("B")
        if len(self._buf) - self._end < len(view):
            self._move_to(bytearray(self.buffered + len(view)))
        self._buf[self._end : self._end + len(view)] = view
        self._end += len(view)

    def _move_to(self, fresh: bytearray) -> None:
        """Continue in `fresh`, with the unread bytes at its start."""
        pending = self.buffered
        fresh[:pending] = memoryview(self._buf)[self._start : self._end]
        self._buf, self._start, self._end = fresh, 0, pending

    def next_frame(self) -> memoryview | _NeedData:
        buf = self._buf
        start = self._start
        if self._need < 0:
            if self._end - start < 4:
                return NEED_DATA
            (size,) = _SIZE.unpack_from(buf, start)
            if size < 0:
                raise InvalidFrame(f"negative frame size {size}")
            if size > self.max_frame_bytes:
                raise FrameTooLarge(size, self.max_frame_bytes)
            self._need = size
        end = start + 4 + self._need
        if self._end < end:
            return NEED_DATA
        self._need = -1
        if start == 0 and end == len(buf):
            # The frame fills its buffer (always so for a large one): hand it over whole.
            frame = memoryview(buf)[4:]
            self._buf = bytearray()
            self._start = self._end = 0
            return frame
        frame = memoryview(bytearray(memoryview(buf)[start + 4 : end]))
        if end == self._end:
            self._start = self._end = 0  # all read: reuse the chunk from its start
        else:
            self._start = end
        return frame
