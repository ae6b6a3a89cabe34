"""One client connection: one task, one cancel scope, one request in flight.

The task reads a frame, sends the request to the handlers, waits for that request's
response, writes it, and only then reads the next frame. Pipelined requests wait in the
kernel's socket buffer (or, already read, in the frame reader); that is Kafka's
mute/unmute, made structural. Closing the connection (peer gone, bad frame, idle
timeout, shutdown) cancels its scope, and with it everything waiting on its behalf.

Small produces already read together (a pipelining client's) are sent to the handlers as
one batch (requests.Batch) and answered as one, in order: then the request in flight is
that batch, and its answers leave in one write.

Idle connections are closed by the processor's sweep, as Kafka's Selector does, rather
than by a timeout around every read: a deadline per request costs more than the sweep. As
in Kafka, any byte read is activity (a large request sent slowly is not cut off), and a
request in flight is too, until its response is written. A connection with nothing of a
request buffered holds no read buffer: its next bytes are read into its processor's.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import outcome
import trio

from trio_broker.protocol.framing import NEED_DATA, NEED_MEMORY, FrameReader, InvalidFrame
from trio_broker.protocol.quirks import InvalidRequest, ParsedRequest, parse_request
from trio_broker.server.connection_quotas import normalize_host
from trio_broker.server.log_safe import CLIENT_ADDRESS
from trio_broker.server.requests import NO_RESPONSE, Batch, Request, Response
from trio_broker.server.sendfile import (
    queued_bytes,
    receive_into,
    receive_now,
    send_bytes,
    send_response,
)

if TYPE_CHECKING:
    from trio_broker.server.log_limit import LogLimiter
    from trio_broker.server.memory_pool import MemoryPool
    from trio_broker.server.socket_server import Processor

logger = logging.getLogger(__name__)

__all__ = ["Connection"]

_ids = itertools.count(1)

# Write coalescing. A pipelining client (librdkafka keeps up to five, or a million,
# requests in flight) leaves many frames in one read; answering each with its own
# send() costs a syscall and a loopback wakeup apiece, the largest single cost of small
# requests. So a response to a request that can never be delayed is held while the next
# request is already here, and the held responses go out in one writev. Requests are
# still handled one at a time, in order; only the writes are gathered.
_HOLD_BYTES = 64 * 1024
_HOLD_COUNT = 64  # well under IOV_MAX (1024)
# A read that finds bytes there returns without a checkpoint (server/sendfile.py), so a
# client streaming a large request as fast as it is read would hold the processor: yield
# after this many bytes read in a row, as a large fetch's sendfile does.
_YIELD_BYTES = 4 * 1024 * 1024


class _Held:
    """Encoded responses waiting to be written together, in order."""

    __slots__ = ("bufs", "nbytes", "send")

    def __init__(self, send: Any = send_bytes) -> None:
        self.bufs: list[bytearray] = []
        self.nbytes = 0
        self.send = send

    def add(self, buf: bytearray) -> bool:
        """Hold `buf`; True when enough is held that it should be flushed now."""
        bufs = self.bufs
        bufs.append(buf)
        self.nbytes += len(buf)
        return self.nbytes >= _HOLD_BYTES or len(bufs) >= _HOLD_COUNT

    async def flush(self, sock: trio.socket.SocketType) -> None:
        if self.bufs:
            bufs = self.bufs
            self.bufs = []
            self.nbytes = 0
            await self.send(sock, *bufs)


# Request batching: a produce answered at once, read together with more such requests of
# its connection, goes to the handlers with them as one item (requests.Batch), so that a
# pipelining client's small produces cost one wakeup of a handler, of the response task
# and of the connection per batch rather than per request. A batch runs in one handler
# task without a checkpoint; this bounds how long (a few ms of small produces).
_BATCH_MAX = 32


# The acks of a produce answered at once. In a cluster (ZooKeeper) acks=all waits for the
# ISR in the purgatory; a lone broker is its own ISR and answers it at once too (the
# default of librdkafka and the Java client).
AT_ONCE_ACKS = frozenset({0, 1})
# Every acks a produce may carry; any other is answered alone (INVALID_REQUIRED_ACKS).
_VALID_ACKS = frozenset({0, 1, -1})
AT_ONCE_ACKS_LONE = _VALID_ACKS


def _may_hold(parsed: ParsedRequest, at_once: frozenset[int]) -> bool:
    # A produce answered at once: holding its answer while its successor runs adds at
    # most one short handler run to its latency. A request that may wait in the purgatory
    # (a fetch, acks=all in a cluster) must not delay the answers before it.
    return parsed.api_key == 0 and parsed.body is not None and parsed.body.acks in at_once


def _may_batch(parsed: ParsedRequest) -> bool:
    # A produce of any valid acks, but never a transactional one: in a cluster its first
    # batch may wait for the transaction coordinator, and would hold back its batch's
    # answers. A batch is of produces answered at once, or (a cluster's acks=all) of
    # produces that all wait for the ISR, never both (see _serve): an answer made at once
    # never waits for the purgatory because of its neighbours.
    body = parsed.body
    return (
        parsed.api_key == 0
        and body is not None
        and body.acks in _VALID_ACKS
        and not body.transactional_id
    )


class Connection:
    # The socket I/O (server/sendfile.py) and its target, `self.io`: the raw socket here; a
    # TLS connection (security/connection.py) swaps in its SSLStream and functions.
    _receive_into = staticmethod(receive_into)
    _send_bytes = staticmethod(send_bytes)
    _send_response = staticmethod(send_response)
    # Who is on the other end, for the authorizer: a TLS or SASL connection sets its own.
    principal = "User:ANONYMOUS"
    # Client quotas (security/client_quotas.py): no request is read before this time.
    throttled_until = 0.0
    # Once throttled, a connection's requests go one at a time (no batches): a quota mutes
    # it after the answer to the request that went over, as Kafka does, not after a batch.
    unbatched = False

    def __init__(
        self,
        stream: trio.SocketStream,
        processor: Processor,
        *,
        listener: str,
        max_request_bytes: int,
        supported: Mapping[int, tuple[int, int]],
        pool: MemoryPool,
        client_lines: LogLimiter,
        peer_host: str | None = None,
    ) -> None:
        self.id = next(_ids)
        self.stream = stream
        self.sock = stream.socket
        self.io: Any = stream.socket
        self.processor = processor
        self.listener = listener
        self.supported = supported
        self.pool = pool
        self.reader = FrameReader(max_frame_bytes=max_request_bytes, pool=pool, spares=pool.spares)
        # Lines this connection's client causes: at most one of a kind per address per
        # interval (server/log_limit.py), shared by all connections.
        self._client_lines = client_lines
        self.scope = trio.CancelScope()
        # The scopes of this connection's request running outside a handler task
        # (server/handler_pool.py _detached): closing the connection cancels it too.
        self.side_scopes: list[trio.CancelScope] = []
        self.client_id: str | None = None
        self.in_flight = False
        self.waiting_for_memory = False
        self.last_active = trio.current_time()
        # Activity for the idle sweep: bytes read so far, and when the sweep saw them change.
        self.bytes_read = 0
        self._read_seen = 0
        self._read_at = self.last_active
        self._closing = False
        # The request observer (metrics, request log) when either is on, else None.
        self.metrics = processor.metrics
        # The answer to the request in flight: deliver() hands it to this connection's task
        # parked in _response(), or leaves it here for it. (A slot, not a memory channel: an
        # idle connection's channel cost 1.4 KB.)
        self._answer: Response | list[Response] | None = None
        self._answer_waiter: Any = None
        self._open = True
        try:
            host, port = stream.socket.getpeername()[:2]
            self.peer = f"{host}:{port}"
            # As the acceptor found it (normalized for the per-address quotas and logs).
            self.peer_host = normalize_host(host) if peer_host is None else peer_host
        except OSError:
            self.peer = "?"
            self.peer_host = "?" if peer_host is None else peer_host

    def __repr__(self) -> str:
        return f"<Connection {self.id} {self.peer} client={self.client_id!r}>"

    def close(self) -> None:
        """Close now: cancels whatever this connection is doing."""
        self.scope.cancel()
        for scope in self.side_scopes:
            scope.cancel()

    def close_when_idle(self) -> None:
        """Graceful shutdown: finish the request in flight, then close."""
        self._closing = True
        if not self.in_flight:
            self.scope.cancel()

    def throttle(self, seconds: float) -> None:
        """Over its quota: once the current response is written, read nothing for this long."""
        self.throttled_until = max(self.throttled_until, trio.current_time() + seconds)
        self.unbatched = True

    async def _mute(self) -> None:
        await trio.sleep_until(self.throttled_until)
        self.throttled_until = 0.0

    def deliver(self, response: Response | list[Response]) -> None:
        """Called by the processor's response task; never blocks (one request, or one
        batch of requests answered as a list, in flight)."""
        if not self._open or self._answer is not None:
            logger.debug("[conn %s] response for a closed connection dropped", self.id)
            return
        waiter = self._answer_waiter
        if waiter is None:
            self._answer = response
        else:
            self._answer_waiter = None
            trio.lowlevel.reschedule(waiter, outcome.Value(response))

    async def _response(self) -> Any:
        """The answer to the request in flight, once deliver() has it."""
        answer = self._answer
        if answer is not None:
            await trio.lowlevel.checkpoint_if_cancelled()
            self._answer = None
            await trio.lowlevel.cancel_shielded_checkpoint()
            return answer
        # (A cancellation point either way: the wait below is one.)
        self._answer_waiter = trio.lowlevel.current_task()
        return await trio.lowlevel.wait_task_rescheduled(self._abort_response)  # type: ignore[no-any-return]

    def _abort_response(self, _: Any) -> trio.lowlevel.Abort:
        self._answer_waiter = None
        return trio.lowlevel.Abort.SUCCEEDED

    async def _next_frame(self) -> memoryview | None:
        reader = self.reader
        # A plain socket is readable exactly when bytes are there (a TLS stream may hold
        # decrypted bytes the socket does not show): only then can the wait for the next
        # request be made without a buffer.
        plain = self.io is self.sock
        unyielded = 0
        while True:
            if plain and not reader.buffered:
                # Nothing of a frame here: read into the processor's buffer, take what
                # frames are complete, and keep (copied) only the start of the next one.
                scratch = self.processor.read_buffer
                n = receive_now(self.sock, scratch)
                if n is None:
                    reader.drop_buffer()  # what the last read left over is used up
                    await trio.lowlevel.wait_readable(self.sock)
                    continue
                if not n:
                    return None
                self.bytes_read += n
                reader.borrow(scratch, n)
                try:
                    frame = reader.next_frame()
                finally:
                    reader.settle()
            else:
                frame = reader.next_frame()
                if frame is NEED_DATA:
                    buf = reader.receive_buffer(self._queued)
                    if buf is None:  # a large frame must grow, and the pool is spent
                        await self._wait_for_memory()
                        continue
                    n = await self._receive_into(self.io, buf)
                    if not n:
                        if reader.buffered:
                            self.log_client(
                                "mid-frame",
                                logging.INFO,
                                "[conn %s] %s closed mid-frame (%d bytes buffered)",
                                self.id,
                                self.peer,
                                reader.buffered,
                            )
                        return None
                    self.bytes_read += n
                    reader.received(n)
                    unyielded += n
                    if unyielded >= _YIELD_BYTES:
                        unyielded = 0
                        await trio.lowlevel.checkpoint()
                    continue
            if frame is NEED_MEMORY:
                await self._wait_for_memory()
            elif frame is not NEED_DATA:
                return frame

    async def _wait_for_memory(self) -> None:
        # queued.max.request.bytes is spent: stop reading (Kafka mutes the channel) until
        # answered requests give memory back; then the reader goes on where it was. The
        # wait is the broker's doing, so it is not idleness of the client's.
        reader = self.reader
        wanted = reader.memory_wanted
        logger.debug("[conn %s] waiting for %d bytes of request memory", self.id, wanted)
        self.waiting_for_memory = True
        try:
            await self.pool.reserve(
                wanted,
                held=reader.held,
                large=reader.memory_large,
                holding=reader.memory_holding,
            )
        finally:
            self.waiting_for_memory = False
        reader.granted(wanted)

    def _queued(self) -> int:
        return queued_bytes(self.sock)

    def idle_for(self, now: float) -> float:
        """Seconds since this connection last read a byte or finished a request (0 while a
        request is in flight, or while it waits for request memory). For the processor's
        sweep: new bytes count from the sweep that first sees them, so a connection is
        closed at most one sweep interval late, never early."""
        if self.in_flight or self.waiting_for_memory:
            return 0.0
        if self.bytes_read != self._read_seen:
            self._read_seen = self.bytes_read
            self._read_at = now
        return now - max(self.last_active, self._read_at)

    def close_idle(self, idle_s: float) -> None:
        """connections.max.idle.ms passed without a byte or a request: close, saying so
        (a partly read frame that stopped progressing is dropped with its memory)."""
        reader = self.reader
        if reader.buffered:
            self.log_client(
                "stalled",
                logging.INFO,
                "[conn %s] %s sent nothing for %.0f s in the middle of a request (%d bytes"
                " read, %d bytes of request memory held); dropping it and closing",
                self.id,
                self.peer,
                idle_s,
                reader.buffered,
                reader.held,
            )
        else:
            self.log_client(
                "idle",
                logging.INFO,
                "[conn %s] %s idle for %.0f s; closing",
                self.id,
                self.peer,
                idle_s,
            )
        self.close()

    async def serve(self, requests: trio.MemorySendChannel[Request]) -> None:
        """The connection's task, started by its processor: serve until closed (bad bytes
        close it with a log line), then tell the processor. (One coroutine frame: an idle
        connection's frames are most of what it costs.)"""
        # Lines logged on this connection's behalf are rate-limited by its address
        # (server/log_safe.py), wherever they are logged from.
        CLIENT_ADDRESS.set(self.peer_host)
        try:
            with self.scope:
                async with self.stream:
                    await self._serve(requests)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            logger.debug("[conn %s] %s went away", self.id, self.peer)
        except InvalidFrame as exc:
            self._log_bad("bad frame", exc)
        finally:
            for scope in self.side_scopes:
                scope.cancel()
            self._open = False
            self._answer = None
            # The request in flight, if any, has finished with its frame (its handler
            # returned, or the broker is stopping): all of this reader's memory goes back.
            self.reader.close()
            logger.debug("[conn %s] closed", self.id)
            self.processor.connection_closed(self)

    async def _serve(self, requests: trio.MemorySendChannel[Request]) -> None:
        # Responses already made but not yet written: see _may_hold. Written in order,
        # always before this task waits for the socket or for a request that may wait.
        held = _Held(self._send_bytes)
        reader = self.reader
        metrics = self.metrics
        at_once = self.processor.at_once_acks
        # What gathering a batch (_gather) read and could not add to it: the request after
        # the batch, or the bad bytes or request that end the connection once the batch
        # is answered.
        after: tuple[memoryview, ParsedRequest] | None = None
        bad_frame: InvalidFrame | None = None
        bad_request: Exception | None = None
        try:
            while not self._closing:
                if after is not None:
                    frame, parsed = after
                    after = None
                elif bad_frame is not None:
                    raise bad_frame
                elif bad_request is not None:
                    self._log_bad("bad request", bad_request)
                    break
                else:
                    frame = reader.next_frame()
                    if frame is NEED_DATA or frame is NEED_MEMORY:
                        if held.bufs:
                            await held.flush(self.io)
                        frame = await self._next_frame()
                        if frame is None:
                            break
                    try:
                        parsed = parse_request(frame, self.supported)
                    except (InvalidFrame, InvalidRequest) as exc:
                        self._log_bad("bad request", exc)
                        break
                hold = _may_hold(parsed, at_once)
                if not hold and held.bufs:
                    await held.flush(self.io)
                self.client_id = parsed.client_id
                self.in_flight = True
                request = Request(parsed, self)
                if metrics is not None:
                    request.timing = metrics.new_timing()
                # More requests already read behind this one go with it as one batch
                # (requests.Batch): one handler wakeup, one answer, for all of them.
                members = None
                if reader.buffered > 4 and not self.unbatched and _may_batch(parsed):
                    members, frames = [request], [frame]
                    while len(members) < _BATCH_MAX:
                        try:
                            following = reader.next_frame()
                        except InvalidFrame as exc:
                            bad_frame = exc
                            break
                        if following is NEED_DATA or following is NEED_MEMORY:
                            break
                        try:
                            parsed = parse_request(following, self.supported)
                        except (InvalidFrame, InvalidRequest) as exc:
                            bad_request = exc
                            break
                        # _may_batch, inline (this runs for every request of a batch).
                        body = parsed.body
                        if (
                            parsed.api_key
                            or body is None
                            or (body.acks in at_once) is not hold
                            or body.acks not in _VALID_ACKS
                            or body.transactional_id
                        ):
                            after = (following, parsed)
                            break
                        member = Request(parsed, self)
                        if metrics is not None:
                            member.timing = metrics.new_timing()
                        members.append(member)
                        frames.append(following)
                    if len(members) == 1:
                        members = None
                    else:
                        Batch(members)
                    following = member = body = None
                try:
                    requests.send_nowait(request)
                except trio.WouldBlock:
                    # queued.max.requests reached: backpressure. Answers already made
                    # must not wait for other connections' requests.
                    if held.bufs:
                        await held.flush(self.io)
                    await requests.send(request)
                # Always parks (no handler has run since the send): this connection's
                # checkpoint.
                answer = await self._response()
                # The handler is done with the request: its frame's memory goes back to the
                # pool (a produce's records were copied into the log, nothing keeps them).
                reader.frame_done()
                if members is None:
                    if metrics is not None:
                        request.timing.response_dequeue = time.perf_counter()
                    response = answer
                    if response is not NO_RESPONSE:
                        if response.regions or not hold:
                            if held.bufs:
                                await held.flush(self.io)
                            await self._send_response(self.io, response.buf, response.regions)
                        elif held.add(response.buf):
                            await held.flush(self.io)
                    if metrics is not None:
                        metrics.request_done(request, response, len(frame))
                else:
                    # A batch: produces answered at once, all held for one write.
                    if metrics is None:
                        for response in answer:
                            if response is not NO_RESPONSE and held.add(response.buf):
                                await held.flush(self.io)
                    else:
                        for member, response, member_frame in zip(
                            members, answer, frames, strict=True
                        ):
                            if response is not NO_RESPONSE and held.add(response.buf):
                                await held.flush(self.io)
                            member.timing.response_dequeue = time.perf_counter()
                            metrics.request_done(member, response, len(member_frame))
                        del member, member_frame
                    del members, frames
                # Nothing of this request may outlive it here: its frame's buffer is
                # filled again once no view of it is left (FrameReader._reuse).
                del frame, parsed, request, response, answer
                self.in_flight = False
                self.last_active = trio.current_time()
                if self.throttled_until:
                    if held.bufs:
                        await held.flush(self.io)
                    await self._mute()
        except InvalidFrame:
            # The bytes after the good requests are garbage; their answers still go out.
            if held.bufs:
                await held.flush(self.io)
            raise
        if held.bufs:
            await held.flush(self.io)

    def _log_bad(self, what: str, exc: Exception) -> None:
        # A client looping on a bad frame must not fill the broker's log.
        self.log_client(
            "bad",
            logging.WARNING,
            "[conn %s] %s from %s (client %r): %s; closing",
            self.id,
            what,
            self.peer,
            self.client_id,
            exc,
        )

    def log_client(
        self, kind: str, level: int, msg: str, *args: Any, exc_info: bool = False
    ) -> None:
        """Log a line this connection's client caused: at most one of each `kind` per client
        address per interval, the next one saying how many were not logged."""
        suppressed = self._client_lines.hit(f"{self.peer_host} {kind}", trio.current_time())
        if suppressed is None:
            return
        if suppressed:
            msg += " (%d more from %s not logged)"
            args = (*args, suppressed, self.peer_host)
        logger.log(level, msg, *args, exc_info=exc_info)
