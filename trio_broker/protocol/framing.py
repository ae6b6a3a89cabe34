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
    """

    __slots__ = ("_buf", "_need", "max_frame_bytes")

    def __init__(self, *, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._need = -1  # the current frame's size once its prefix is read

    @property
    def buffered(self) -> int:
        return len(self._buf)

    @property
    def bytes_wanted(self) -> int:
        """How many more bytes complete the current frame (a hint for the receive size)."""
        if self._need < 0:
            return max(4 - len(self._buf), 1)
        return max(self._need + 4 - len(self._buf), 1)

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        self._buf += data

    def next_frame(self) -> memoryview | _NeedData:
        buf = self._buf
        if self._need < 0:
            if len(buf) < 4:
                return NEED_DATA
            (size,) = _SIZE.unpack_from(buf, 0)
            if size < 0:
                raise InvalidFrame(f"negative frame size {size}")
            if size > self.max_frame_bytes:
                raise FrameTooLarge(size, self.max_frame_bytes)
            self._need = size
        end = 4 + self._need
        if len(buf) < end:
            return NEED_DATA
        if len(buf) == end:
            # The common case: hand over the whole buffer without copying.
            frame = memoryview(buf)[4:]
            self._buf = bytearray()
        else:
            frame = memoryview(bytearray(memoryview(buf)[4:end]))
            del buf[:end]
        self._need = -1
        return frame
