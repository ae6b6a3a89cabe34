"""Zero-copy writes: record data goes from the segment file to the socket with os.sendfile.

Trio has no sendfile of its own, so this is the one place the broker touches a socket's
file descriptor. The socket is already non-blocking (trio sockets always are): call
sendfile until EAGAIN, only then wait for writability, and yield to the scheduler every
few MiB so one large fetch cannot starve other connections.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from typing import Any, Protocol

import trio

__all__ = ["FileRegionLike", "send_response"]

_CHUNK = 4 * 1024 * 1024  # bytes per sendfile call, and between scheduler checkpoints
_BROKEN = (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ESHUTDOWN, errno.EBADF)


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
        offset += sent
        remaining -= sent
        since_checkpoint += sent
        if since_checkpoint >= _CHUNK:
            await trio.lowlevel.checkpoint()
            since_checkpoint = 0


async def send_response(
    stream: trio.SocketStream, buf: bytearray, regions: Sequence[tuple[int, Any]]
) -> None:
    """Write an encoded response: its bytes, with each file region spliced in at its offset."""
    if not regions:
        await stream.send_all(buf)
        return
    view = memoryview(buf)
    pos = 0
    for at, region in regions:
        if at > pos:
            await stream.send_all(view[pos:at])
            pos = at
        # A `records` field may be several regions back to back (a read across segments).
        for part in getattr(region, "regions", (region,)):
            if part.size:
                await sendfile(stream.socket, part)
    if pos < len(buf):
        await stream.send_all(view[pos:])
