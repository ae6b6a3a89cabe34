"""One client connection: one task, one cancel scope, one request in flight.

The task reads a frame, sends the request to the handlers, waits for that request's
response, writes it, and only then reads the next frame. Pipelined requests wait in the
kernel's socket buffer; that is Kafka's mute/unmute, made structural. Closing the
connection (peer gone, bad frame, idle timeout, shutdown) cancels its scope, and with it
everything waiting on its behalf.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

import trio

from trio_broker.protocol.framing import NEED_DATA, FrameReader, InvalidFrame
from trio_broker.protocol.quirks import InvalidRequest, parse_request
from trio_broker.server.requests import NO_RESPONSE, Request, Response
from trio_broker.server.sendfile import send_response

if TYPE_CHECKING:
    from trio_broker.server.socket_server import Processor

logger = logging.getLogger(__name__)

__all__ = ["Connection"]

_ids = itertools.count(1)
_RECEIVE_BYTES = 256 * 1024


class Connection:
    def __init__(
        self,
        stream: trio.SocketStream,
        processor: Processor,
        *,
        listener: str,
        max_request_bytes: int,
        idle_timeout_s: float,
        supported: Mapping[int, tuple[int, int]],
    ) -> None:
        self.id = next(_ids)
        self.stream = stream
        self.processor = processor
        self.listener = listener
        self.supported = supported
        self.idle_timeout_s = idle_timeout_s
        self.reader = FrameReader(max_frame_bytes=max_request_bytes)
        self.scope = trio.CancelScope()
        self.client_id: str | None = None
        self.in_flight = False
        self._closing = False
        self._response_send, self._response_receive = trio.open_memory_channel[Response](1)
        try:
            self.peer = "{}:{}".format(*stream.socket.getpeername()[:2])
        except OSError:
            self.peer = "?"

    def __repr__(self) -> str:
        return f"<Connection {self.id} {self.peer} client={self.client_id!r}>"

    def close(self) -> None:
        """Close now: cancels whatever this connection is doing."""
        self.scope.cancel()

    def close_when_idle(self) -> None:
        """Graceful shutdown: finish the request in flight, then close."""
        self._closing = True
        if not self.in_flight:
            self.scope.cancel()

    def deliver(self, response: Response) -> None:
        """Called by the processor's response task; never blocks (one request in flight)."""
        try:
            self._response_send.send_nowait(response)
        except (trio.ClosedResourceError, trio.BrokenResourceError, trio.WouldBlock):
            logger.debug("[conn %s] response for a closed connection dropped", self.id)

    async def _next_frame(self) -> memoryview | None:
        while True:
            frame = self.reader.next_frame()
            if frame is not NEED_DATA:
                return frame
            data = await self.stream.receive_some(max(self.reader.bytes_wanted, _RECEIVE_BYTES))
            if not data:
                if self.reader.buffered:
                    logger.info(
                        "[conn %s] %s closed mid-frame (%d bytes buffered)",
                        self.id,
                        self.peer,
                        self.reader.buffered,
                    )
                return None
            self.reader.receive_data(data)

    async def run(self, requests: trio.MemorySendChannel[Request]) -> None:
        try:
            with self.scope:
                async with self.stream, self._response_receive:
                    await self._serve(requests)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            logger.debug("[conn %s] %s went away", self.id, self.peer)
        finally:
            self._response_send.close()
            logger.debug("[conn %s] closed", self.id)

    async def _serve(self, requests: trio.MemorySendChannel[Request]) -> None:
        while not self._closing:
            frame = None
            with trio.move_on_after(self.idle_timeout_s):
                frame = await self._next_frame()
                if frame is None:
                    return
            if frame is None:
                logger.info("[conn %s] idle for %.0f s; closing", self.id, self.idle_timeout_s)
                return
            try:
                parsed = parse_request(frame, self.supported)
            except (InvalidFrame, InvalidRequest) as exc:
                logger.warning(
                    "[conn %s] bad request from %s (client %r): %s; closing",
                    self.id,
                    self.peer,
                    self.client_id,
                    exc,
                )
                return
            self.client_id = parsed.client_id
            self.in_flight = True
            await requests.send(Request(parsed, self))
            response = await self._response_receive.receive()
            if response is not NO_RESPONSE:
                await send_response(self.stream, response.buf, response.regions)
            self.in_flight = False

    async def serve(self, requests: trio.MemorySendChannel[Request]) -> None:
        """Entry point for the processor: run, turning frame errors into a closed connection."""
        try:
            await self.run(requests)
        except InvalidFrame as exc:
            logger.warning(
                "[conn %s] bad frame from %s (client %r): %s; closing",
                self.id,
                self.peer,
                self.client_id,
                exc,
            )
