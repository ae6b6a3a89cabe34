"""Sans-IO framing of Kafka requests: bytes in, size-delimited frames out.

A Kafka request is an int32 size followed by that many bytes (header + body). The
reader refuses a frame whose declared size exceeds the limit *before* buffering it,
so a peer cannot make the broker allocate 2 GiB by sending four bytes; and a frame under
the limit gets its memory as its bytes arrive, not when its size does.

    reader = FrameReader(max_frame_bytes=config.socket_request_max_bytes)
    reader.receive_data(chunk)
    while (frame := reader.next_frame()) is not NEED_DATA:
        ...

Given a `pool` (the broker's `queued.max.request.bytes`), every frame handed out and
every buffer grown for a large frame is charged to it first; when the pool refuses,
`next_frame()` answers NEED_MEMORY (or `receive_buffer()` None) and the caller waits for
`memory_wanted` bytes itself (the reader does no I/O and never waits), then calls
`granted()`. A frame of the pool's `large_frame_bytes` or more is charged as large
(`memory_large`): the pool keeps part of itself for the others, so that small requests are
never starved by large frames that clients are slow to send (server/memory_pool.py).
"""

from __future__ import annotations

import enum
import mmap
import struct
import sys
from collections.abc import Callable
from typing import Protocol

__all__ = [
    "NEED_DATA",
    "NEED_MEMORY",
    "FrameReader",
    "FrameTooLarge",
    "InvalidFrame",
    "RequestMemory",
    "SpareBudget",
]

_SIZE = struct.Struct(">i")


class _NeedData(enum.Enum):
    NEED_DATA = "NEED_DATA"
    NEED_MEMORY = "NEED_MEMORY"


NEED_DATA = _NeedData.NEED_DATA
NEED_MEMORY = _NeedData.NEED_MEMORY

# A large frame's buffer doubles as its bytes arrive, from twice the chunk, and jumps to
# the frame's exact size once this fraction of it is here: a client that sends its
# request at once costs one copy of an eighth of it, while one that announces 100 MB and
# sends a little makes the broker hold at most twice that little (or 8x, past an eighth).
_EXACT_FRACTION = 8

# A buffer this large is an anonymous mapping rather than a bytearray: a bytearray is
# zeroed when made (100 MB took 60-220 ms, the processor's whole loop stopped meanwhile),
# a mapping's pages cost nothing until the socket writes into them, and go back to the
# system as soon as the frame is done with.
_MAPPED_BYTES = 8 * 1024 * 1024


def _new_buffer(size: int) -> bytearray:
    if size >= _MAPPED_BYTES:
        return mmap.mmap(-1, size)  # type: ignore[return-value]  # the same buffer interface
    return bytearray(size)


# Large buffers handed out with frames are kept (up to this many, each up to the reader's
# `spare_max_bytes`) and filled again once nothing refers to them any more: a 1 MiB
# produce request or fetch response then costs no fresh allocation, which on the
# replication path was a third of the leader's time (py-spy: `bytearray(size)` zeroing and
# faulting in a new mapping for every request).
_KEPT = 2


def _refs(kept: list[bytearray], i: int) -> int:
    return sys.getrefcount(kept[i])


# What `_refs` counts for a buffer only the list refers to (measured, not assumed: the
# interpreter's own count of a call's borrowed references differs between versions).
_FREE_REFS = _refs([bytearray(1)], 0)


class SpareBudget:
    """What all the readers sharing it may keep in spare buffers together (a broker's
    connections share one, so a thousand idle producers do not hold a gigabyte)."""

    __slots__ = ("held", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0


class InvalidFrame(Exception):
    """The peer sent bytes that are not a Kafka frame; the connection must close."""


class RequestMemory(Protocol):
    """What the reader needs of a memory pool (`trio_broker.server.memory_pool`).

    `held` is what the reader holds already, `holding` what its growing frame will hold
    once this reservation is made (the reader lets go of the buffer it replaces)."""

    large_frame_bytes: int

    def try_reserve(
        self, size: int, *, large: bool = False, held: int = 0, holding: int = 0
    ) -> bool: ...

    def release(self, size: int, *, large: bool = False) -> None: ...


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
    one. A frame larger than a chunk gets buffers of its own, growing as its bytes arrive
    (doubling, then its exact size once an eighth of it is here), so the socket fills the
    last one directly and it is handed over whole.

    With a pool, a handed-out frame stays charged until `frame_done()`, and `close()`
    returns everything the reader holds.

    An idle connection need hold no buffer: when no byte is buffered here, the next bytes
    can be read into a buffer the reader does not own (one per processor) and lent with
    `borrow()`; complete frames are copied out of it as out of the chunk, and `settle()`
    copies what is left, if anything, into a chunk of the reader's own. A frame is never
    handed out as a view of a borrowed buffer.
    """

    __slots__ = (
        "_borrowed",
        "_buf",
        "_buf_charge",
        "_buf_large",
        "_chunk",
        "_credit",
        "_end",
        "_frame_charge",
        "_frame_large",
        "_kept",
        "_large_bytes",
        "_need",
        "_pool",
        "_spare_max",
        "_spares",
        "_start",
        "max_frame_bytes",
        "memory_holding",
        "memory_large",
        "memory_wanted",
    )

    def __init__(
        self,
        *,
        max_frame_bytes: int,
        chunk_bytes: int = 64 * 1024,
        pool: RequestMemory | None = None,
        spare_max_bytes: int = 2 * 1024 * 1024,
        spares: SpareBudget | None = None,
    ) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._chunk = chunk_bytes
        self._pool = pool
        # Large buffers lent out with frames, to be filled again once free (see _KEPT).
        # Not charged to the pool while idle: at most _KEPT x spare_max_bytes a reader,
        # and no more than `spares` allows all the readers sharing it.
        self._kept: list[bytearray] = []
        self._spare_max = spare_max_bytes
        self._spares = spares
        self._buf = bytearray()  # allocated on first receive: idle connections cost nothing
        self._borrowed = False  # _buf is not ours (borrow()) until settle()
        self._start = 0  # unread bytes are _buf[_start:_end]
        self._end = 0
        self._need = -1  # the current frame's size once its prefix is read
        self._buf_charge = 0  # what _buf cost the pool (0 for the shared chunk)
        self._buf_large = False  # ... charged as a large frame's
        self._frame_charge = 0  # what frames handed out and not yet done cost the pool
        self._frame_large = 0  # ... of it charged as large frames'
        self._credit = 0  # granted by the caller after NEED_MEMORY, not yet spent
        # Frames this large are charged as large (the pool's threshold; none without one).
        self._large_bytes = getattr(pool, "large_frame_bytes", max_frame_bytes + 1)
        self.memory_wanted = 0  # after NEED_MEMORY: bytes to reserve, then granted()
        self.memory_large = False  # ... charged as a large frame's
        self.memory_holding = 0  # ... and what the frame then holds (its new buffer)

    @property
    def buffered(self) -> int:
        return self._end - self._start

    @property
    def held(self) -> int:
        """Bytes charged to the pool for this reader's frames (handed out or growing)."""
        return self._buf_charge + self._frame_charge + self._frame_large + self._credit

    @property
    def has_buffer(self) -> bool:
        """Whether the reader holds a read buffer now (kept spares aside)."""
        return bool(self._buf)

    @property
    def bytes_wanted(self) -> int:
        """How many more bytes complete the current frame (a hint for the receive size)."""
        if self._need < 0:
            return max(4 - self.buffered, 1)
        return max(self._need + 4 - self.buffered, 1)

    def granted(self, size: int) -> None:
        """The caller reserved `size` bytes of the pool for this reader (after NEED_MEMORY),
        in the class `memory_large` said; the next step of the same frame spends them."""
        self._credit += size

    def frame_done(self) -> None:
        """The frames handed out so far are no longer used: their memory goes back."""
        if self._frame_charge:
            charge, self._frame_charge = self._frame_charge, 0
            self._release(charge, False)
        if self._frame_large:
            charge, self._frame_large = self._frame_large, 0
            self._release(charge, True)

    def drop_buffer(self) -> None:
        """Nothing is buffered: let go of the read chunk (a connection about to wait for its
        next request holds no buffer). A frame's own growing buffer is kept."""
        if self._end == self._start and not self._buf_charge and not self._borrowed:
            self._buf = bytearray()
            self._start = self._end = 0

    def borrow(self, buf: bytearray, n: int) -> None:
        """`n` bytes were read into `buf`, a buffer the reader does not own, while nothing
        was buffered here: take frames from it with `next_frame()`, then `settle()` before
        anyone else writes into `buf`."""
        if self._end != self._start or self._buf_charge:
            raise AssertionError("borrow() with bytes already buffered")
        self._buf, self._start, self._end = buf, 0, n
        self._borrowed = True

    def settle(self) -> None:
        """Stop using the borrowed buffer: the bytes left in it (the start of the next
        frames) are copied into a chunk of the reader's own; none left, no chunk."""
        if not self._borrowed:
            return
        self._borrowed = False
        pending = self._end - self._start
        if pending:
            self._move_to(bytearray(max(self._chunk, pending)))
        else:
            self._buf = bytearray()
            self._start = self._end = 0

    def close(self) -> None:
        """Return all memory; the reader is not used again."""
        self.frame_done()
        if self._buf_charge:
            charge, self._buf_charge = self._buf_charge, 0
            self._release(charge, self._buf_large)
        if self._credit:
            charge, self._credit = self._credit, 0
            self._release(charge, self.memory_large)
        self._buf = bytearray()
        self._unkeep(sum(len(b) for b in self._kept))
        self._kept = []
        self._start = self._end = 0
        self._borrowed = False

    def _keep(self, buf: bytearray) -> None:
        size = len(buf)
        if size > self._spare_max:
            return
        kept = self._kept
        if len(kept) == _KEPT:
            self._unkeep(len(kept.pop(0)))
        spares = self._spares
        if spares is not None:
            if spares.held + size > spares.limit:
                return
            spares.held += size
        kept.append(buf)

    def _unkeep(self, size: int) -> None:
        if self._spares is not None:
            self._spares.held -= size

    def _reuse(self, size: int) -> bytearray | None:
        """A kept buffer of at least `size` bytes that nothing refers to any more."""
        kept = self._kept
        for i in range(len(kept)):
            if len(kept[i]) >= size and _refs(kept, i) == _FREE_REFS:
                buf = kept.pop(i)
                self._unkeep(len(buf))
                return buf
        return None

    def _take(self, size: int) -> bool:
        """Charge `size` bytes for the current frame: the credit granted for it first, the
        pool for the rest. False (and `memory_wanted` set) when the pool refused."""
        pool = self._pool
        if pool is None:
            return True
        large = self._need >= self._large_bytes
        credit = self._credit
        if credit >= size:
            self._credit = 0
            if credit > size:
                self._release(credit - size, large)
            return True
        if pool.try_reserve(size - credit, large=large, held=self.held, holding=size):
            self._credit = 0
            return True
        self.memory_wanted = size - credit
        self.memory_large = large
        self.memory_holding = size
        return False

    def _release(self, size: int, large: bool) -> None:
        if self._pool is not None and size:
            self._pool.release(size, large=large)

    def _make_room(self, queued: Callable[[], int] | None) -> bool:
        """Make room for the next read; False when that needs memory the pool refused."""
        total = 4 + self._need if self._need >= 0 else 4
        pending = self._end - self._start
        room = len(self._buf) - self._end
        arrived = -1
        if self._buf_charge:
            if room:
                return True  # a large frame's own buffer, not full yet
        elif total <= self._chunk:
            if room >= min(total - pending, 512):
                return True
            # Little room left at the tail: a fresh chunk, starting with the unread bytes.
            # (Frames taken out of the old one were copies; nothing else holds it.)
            self._move_to(bytearray(self._chunk))
            return True
        else:
            # A large frame still in the chunk: stay there unless enough of it is here to
            # justify its own buffer.
            arrived = pending + (queued() if queued is not None else 0)
            if arrived * _EXACT_FRACTION < total and room >= 512:
                return True
        # A large frame outgrew its buffer: grow it only as far as its bytes justify.
        if arrived < 0:
            arrived = pending + (queued() if queued is not None else 0)
        # A kept buffer holds the whole frame at no new cost (charged as the frame's size).
        fresh = self._reuse(total) if self._kept else None
        if fresh is not None or arrived * _EXACT_FRACTION >= total:
            size = total
        else:
            size = min(total, max(2 * arrived, 2 * self._chunk))
        if not self._take(size):
            if fresh is not None:
                self._keep(fresh)
            return False
        old, old_large = self._buf_charge, self._buf_large
        self._move_to(fresh if fresh is not None else _new_buffer(size))
        self._buf_charge = size
        self._buf_large = self._need >= self._large_bytes
        self._release(old, old_large)
        return True

    def receive_buffer(self, queued: Callable[[], int] | None = None) -> memoryview | None:
        """A writable view the next received bytes should be written into, never empty;
        None only with a pool that refused the memory a large frame needs to grow (then
        reserve `memory_wanted`, `granted()`, and ask again). `queued`, when given, says
        how many bytes the socket holds unread: a large frame whose bytes are all there
        gets its exact buffer at once instead of growing step by step."""
        if not self._make_room(queued):
            return None
        if self._buf_charge and self._need >= 0:
            # A frame's own buffer, perhaps a kept one larger than the frame: the next
            # frame's bytes must not land in it.
            return memoryview(self._buf)[self._end : 4 + self._need]
        return memoryview(self._buf)[self._end :]

    def received(self, n: int) -> None:
        """`n` bytes were written at the start of the last `receive_buffer()`."""
        self._end += n

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Copy `data` in: for callers that have bytes rather than a socket (the pool is
        charged only for the frames taken out)."""
        view = memoryview(data).cast("B")
        if len(self._buf) - self._end < len(view):
            self._move_to(bytearray(self.buffered + len(view)))
            charge, self._buf_charge = self._buf_charge, 0
            self._release(charge, self._buf_large)
        self._buf[self._end : self._end + len(view)] = view
        self._end += len(view)

    def _move_to(self, fresh: bytearray) -> None:
        """Continue in `fresh`, with the unread bytes at its start."""
        pending = self.buffered
        fresh[:pending] = memoryview(self._buf)[self._start : self._end]
        self._buf, self._start, self._end = fresh, 0, pending

    def next_frame(self) -> memoryview | _NeedData:
        """The next complete frame; NEED_DATA (receive more first) or NEED_MEMORY (reserve
        `memory_wanted` bytes of the pool, call `granted()`, then ask again)."""
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
        charge = self._buf_charge
        if start == 0 and (end == len(buf) or (charge and end == self._end)) and not self._borrowed:
            # The frame fills its buffer (always so for a large one): hand it over whole.
            if not charge:
                if not self._take(self._need):
                    return NEED_MEMORY
                charge = self._need
                large = self._need >= self._large_bytes
            else:
                self._keep(buf)
                large = self._buf_large
            if large:
                self._frame_large += charge
            else:
                self._frame_charge += charge
            self._need = -1
            frame = memoryview(buf)[4:end]
            self._buf = bytearray()
            self._buf_charge = 0
            self._start = self._end = 0
            return frame
        if not self._take(self._need):
            return NEED_MEMORY
        if self._need >= self._large_bytes:
            self._frame_large += self._need
        else:
            self._frame_charge += self._need
        self._need = -1
        if buf.__class__ is bytearray:
            frame = memoryview(buf[start + 4 : end])  # a copy, in one step
        else:
            frame = memoryview(bytearray(memoryview(buf)[start + 4 : end]))
        if end == self._end:
            self._start = self._end = 0  # all read: reuse the chunk from its start
        else:
            self._start = end
        return frame
