"""The connection's socket I/O: zero-copy sendfile, and reads and writes without a yield.

Trio has no sendfile of its own, so this is the one place the broker touches a socket's
file descriptor. The socket is already non-blocking (trio sockets always are): call
sendfile until EAGAIN, only then wait for writability, and yield to the scheduler every
few MiB so one large fetch cannot starve other connections.

Plain bytes go the same way. trio's `send_all` and `receive_some` end every call with a
scheduler checkpoint even when the kernel took or gave the bytes at once; on a
small-request workload that is one extra scheduler round per request. The connection
task checkpoints anyway while it waits for each response, so here a read or write that
succeeds returns at once, and only one that would block waits (a checkpoint).
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from collections.abc import Sequence
from typing import Any, Protocol

import trio

__all__ = [
    "FileRegionLike",
    "queued_bytes",
    "receive_into",
    "receive_now",
    "send_bytes",
    "send_response",
]

_CHUNK = 4 * 1024 * 1024  # bytes per sendfile call, and between scheduler checkpoints
# A fetch answer carrying at most this much record data is read and written in one
# writev instead: a tailing consumer's answer holds a batch or two, and a write for the
# header, a sendfile and a write for the rest cost three syscalls and three wakeups of
# the client where one does. Larger record data always goes by sendfile.
_INLINE_BYTES = 16 * 1024
_IOV_MAX = 512  # Linux allows 1024 buffers per writev
_BROKEN = (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ESHUTDOWN, errno.EBADF)


# os.sendfile calls and the bytes they moved since the process started (a benchmark reads
# them: how many calls serving followers cost per byte).
SENDFILE_STATS = [0, 0]


class FileRegionLike(Protocol):
    fd: int
    position: int
    size: int


async def sendfile(sock: trio.socket.SocketType, region: FileRegionLike) -> None:
    """Send `region.size` bytes of the file from `region.position` on `sock`."""
    out_fd = sock.fileno()
    offset = region.position
    remaining = region.size
    since_checkpoint = 0
    while remaining > 0:
        try:
            sent = os.sendfile(out_fd, region.fd, offset, min(remaining, _CHUNK))
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            since_checkpoint = 0
            continue
        except OSError as exc:
            if exc.errno in _BROKEN:
                raise trio.BrokenResourceError("peer closed during sendfile") from exc
            raise
        if sent == 0:
            # The file is shorter than the region said: the response would be corrupt, so
            # the connection must not continue.
            raise trio.BrokenResourceError(
                f"file region ended early at {offset} ({remaining} bytes missing)"
            )
        SENDFILE_STATS[0] += 1
        SENDFILE_STATS[1] += sent
        offset += sent
        remaining -= sent
        since_checkpoint += sent
        if since_checkpoint >= _CHUNK:
            await trio.lowlevel.checkpoint()
            since_checkpoint = 0


_ZERO_INT = bytes(4)
_FIONREAD: int | None = None


def queued_bytes(sock: trio.socket.SocketType) -> int:
    """Bytes received by the kernel and not yet read (FIONREAD); 0 when it cannot say."""
    global _FIONREAD
    if _FIONREAD is None:
        import termios  # only large frames ask; start-up does not pay for it

        _FIONREAD = termios.FIONREAD
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), _FIONREAD, _ZERO_INT))[0]
    except OSError:
        return 0


def receive_now(sock: trio.socket.SocketType, buf: bytearray) -> int | None:
    """Read into `buf` what is there, without waiting: None when nothing is yet, 0 when
    the peer closed."""
    try:
        return os.readv(sock.fileno(), (buf,))
    except BlockingIOError:
        return None
    except OSError as exc:
        if exc.errno in _BROKEN:
            return 0
        raise


async def receive_into(sock: trio.socket.SocketType, buf: memoryview) -> int:
    """Read into `buf`; 0 means the peer closed. Waits only when nothing is there yet."""
    fd = sock.fileno()
    while True:
        try:
            return os.readv(fd, (buf,))
        except BlockingIOError:
            await trio.lowlevel.wait_readable(sock)
        except OSError as exc:
            if exc.errno in _BROKEN:
                return 0
            raise


async def send_bytes(sock: trio.socket.SocketType, *parts: Any) -> None:
    """Write every byte of `parts` (buffers), gathered into as few syscalls as the kernel
    allows; waits for writability only after EAGAIN."""
    fd = sock.fileno()
    # Byte buffers as they are (most often: held answers), anything else as bytes.
    views = [
        p if p.__class__ is bytearray or p.__class__ is bytes else memoryview(p).cast("B")
        for p in parts
        if len(p)
    ]
    while views:
        try:
            if len(views) > 1:
                sent = os.writev(fd, views[:_IOV_MAX])  # more buffers than that: EINVAL
            else:
                sent = os.write(fd, views[0])
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        except OSError as exc:
            if exc.errno in _BROKEN:
                raise trio.BrokenResourceError("peer closed during send") from exc
            raise
        if len(views) <= _IOV_MAX and sent == sum(map(len, views)):
            return  # all of it, the usual case
        while sent:
            head = views[0]
            if sent >= len(head):
                sent -= len(head)
                views.pop(0)
            else:
                views[0] = memoryview(head).cast("B")[sent:]
                sent = 0


def _inlined(buf: bytearray, regions: Sequence[tuple[int, Any]]) -> bytearray:
    """The response as one buffer: its bytes with each region's file bytes read in place
    (a small answer: one write of one buffer, no memoryview per part)."""
    view = memoryview(buf)
    out = bytearray()
    pos = 0
    for at, region in regions:
        out += view[pos:at]
        pos = at
        for part in getattr(region, "regions", (region,)):
            if part.size:
                data = os.pread(part.fd, part.size, part.position)
                if len(data) != part.size:
                    # As in sendfile: a short file would make the answer corrupt.
                    raise trio.BrokenResourceError(
                        f"file region ended early at {part.position + len(data)}"
                    )
                out += data
    out += view[pos:]
    return out


async def send_response(
    sock: trio.socket.SocketType, buf: bytearray, regions: Sequence[tuple[int, Any]]
) -> None:
    """Write an encoded response: its bytes, with each file region spliced in at its offset."""
    if not regions:
        await send_bytes(sock, buf)
        return
    if sum(region.size for _, region in regions) <= _INLINE_BYTES:
        await send_bytes(sock, _inlined(buf, regions))
        return
    view = memoryview(buf)
    pos = 0
    for at, region in regions:
        if at > pos:
            await send_bytes(sock, view[pos:at])
            pos = at
        # A `records` field may be several regions back to back (a read across segments).
        for part in getattr(region, "regions", (region,)):
            if part.size:
                await sendfile(sock, part)
    if pos < len(buf):
        await send_bytes(sock, view[pos:])
