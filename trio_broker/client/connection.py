"""One connection to one broker (the per-connection half of Kafka's NetworkClient).

A `BrokerConnection` is opened by `NetworkClient` (network_client.py), negotiates versions
with ApiVersions (`negotiate`), then carries requests: each gets the next correlation id,
up to `max.in.flight.requests.per.connection` are pipelined, and the broker answers in
order, so a response is matched to the oldest request and checked by its correlation id.
A request unanswered after `request.timeout.ms` closes the connection (as Kafka does),
failing everything in flight on it.

It is two tasks: a writer fed by a bounded channel, and a reader that completes requests
in order. `submit()` queues a request and returns its `InFlightRequest` without waiting
for the answer, so a caller (the producer's sender) keeps the order of its requests. When
nothing is queued for the writer, `submit()` writes the frame to the (non-blocking) socket
itself and hands the writer only what the socket did not take, so the socket's bytes stay
in submit order and a lone request costs no wake of the writer.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import socket
import struct
from collections import deque
from collections.abc import Callable
from typing import Any

import trio

from trio_broker.client.config import ClientConfig
from trio_broker.client.errors import KafkaConnectionError, RequestTimedOutError, error_for
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated import request_class, response_class
from trio_broker.protocol._generated.api_versions_request import ApiVersionsRequest
from trio_broker.protocol._generated.api_versions_response import ApiVersionsResponse
from trio_broker.protocol._generated.request_header import RequestHeader
from trio_broker.protocol._generated.response_header import ResponseHeader
from trio_broker.protocol.framing import NEED_DATA, FrameReader, InvalidFrame

__all__ = ["Address", "BrokerConnection", "InFlightRequest", "Node"]

log = logging.getLogger(__name__)

API_VERSIONS_KEY = 18
_SIZE = struct.Struct(">i")
_INT16 = struct.Struct(">h")
# Reads in a row the read loop makes without a scheduler pass while bytes keep arriving
# (then one trio read, which checkpoints): one connection's stream of answers cannot
# starve the other tasks.
_READS_PER_YIELD = 16
_CUT = object()  # a read loop's wait ended by its deadline scope, not by the socket
_SOFTWARE_NAME = "trio-broker"
_SOFTWARE_VERSION = "0.1.0"

Address = tuple[str, int]
Node = int | str | Address  # a node id from metadata, "host:port", or (host, port)


def _flexible(cls: type, version: int) -> bool:
    first = cls.FLEXIBLE_MIN_VERSION
    return first is not None and version >= first


def _client_range(api_key: int) -> tuple[int, int] | None:
    """The versions this client's codec speaks for `api_key` (stable ones only)."""
    try:
        cls = request_class(api_key)
    except (KeyError, ImportError):
        return None
    hi = cls.MAX_VERSION - (1 if getattr(cls, "LATEST_VERSION_UNSTABLE", False) else 0)
    return cls.MIN_VERSION, hi


class InFlightRequest:
    """A request written (or queued) on a connection, waiting for its response.

    `await wait()` returns the decoded response or raises the error that ended it. A
    `callback(request)` given to `submit` runs when it completes, in the reader task: it
    must not block (the producer uses it to complete batches without a task per request).
    """

    __slots__ = (
        "api_key",
        "callback",
        "correlation_id",
        "deadline",
        "error",
        "expect_response",
        "response",
        "version",
        "_done",
        "_finished",
    )

    def __init__(
        self,
        api_key: int,
        version: int,
        correlation_id: int,
        deadline: float,
        expect_response: bool,
        callback: Callable[[InFlightRequest], None] | None,
    ) -> None:
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.deadline = deadline
        self.expect_response = expect_response
        self.callback = callback
        self.response: Any = None
        self.error: BaseException | None = None
        self._done: trio.Event | None = None
        self._finished = False

    @property
    def finished(self) -> bool:
        return self._finished

    def _finish(self, response: Any = None, error: BaseException | None = None) -> None:
        if self._finished:
            return
        self._finished = True
        self.response = response
        self.error = error
        if self._done is not None:
            self._done.set()
        if self.callback is not None:
            self.callback(self)

    async def wait(self) -> Any:
        if not self._finished:
            if self._done is None:
                self._done = trio.Event()
            await self._done.wait()
        else:
            await trio.lowlevel.checkpoint()
        if self.error is not None:
            raise self.error
        return self.response


class BrokerConnection:
    """One TCP connection to one broker, after ApiVersions; built by `NetworkClient`."""

    def __init__(
        self,
        address: Address,
        stream: trio.SocketStream | trio.SSLStream[Any],
        config: ClientConfig,
        on_closed: Callable[[BrokerConnection], None],
        on_slot_freed: Callable[[], None],
    ) -> None:
        self.address = address
        self.config = config
        self.api_versions: dict[int, int] = {}  # api key -> negotiated (highest common) version
        self.broker_versions: dict[int, tuple[int, int]] = {}  # as the broker listed them
        self.closed = False
        self.close_reason: BaseException | None = None
        self._stream = stream
        self._on_closed = on_closed
        self._on_slot_freed = on_slot_freed
        self._max_in_flight = config.max_in_flight_requests_per_connection
        self._timeout_s = config.request_timeout_ms / 1000
        self._client_id = config.client_id
        self._next_correlation_id = 0
        self._in_flight: deque[InFlightRequest] = deque()  # awaiting a response, in order
        self._unwritten: deque[InFlightRequest] = deque()  # acks=0 requests not yet written
        self._slot_waiters = trio.lowlevel.ParkingLot()
        # (frame, the acks=0 request it carries, or None when a response will come)
        self._send_channel, self._receive_channel = trio.open_memory_channel[
            tuple[bytearray | memoryview, InFlightRequest | None]
        ](self._max_in_flight)
        self._reader = FrameReader(max_frame_bytes=config.receive_max_bytes)
        self._read_scope: trio.CancelScope | None = None
        self._scope = trio.CancelScope()
        # Frames given to the write loop and not yet written: a new frame queues behind
        # them. With none, submit() writes a frame itself (plain TCP: the socket's fd).
        self._queued = 0
        self._fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else -1

    def __repr__(self) -> str:
        host, port = self.address
        return f"<BrokerConnection {host}:{port}{' closed' if self.closed else ''}>"

    # -- capacity ---------------------------------------------------------------------

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight) + len(self._unwritten)

    @property
    def can_send(self) -> bool:
        return not self.closed and self.in_flight_count < self._max_in_flight

    async def wait_can_send(self) -> None:
        """Wait for a free in-flight slot; raises KafkaConnectionError if the connection closes."""
        while not self.can_send:
            if self.closed:
                raise self._closed_error()
            await self._slot_waiters.park()
        if self.closed:
            raise self._closed_error()

    def version_for(self, api_key: int) -> int:
        version = self.api_versions.get(api_key)
        if version is None:
            raise error_for(
                ErrorCode.UNSUPPORTED_VERSION,
                f"broker {self.address[0]}:{self.address[1]} supports no version of api key "
                f"{api_key} this client speaks",
            )
        return version

    async def negotiate(self) -> None:
        """ApiVersions at our highest version; on UNSUPPORTED_VERSION, at the broker's."""
        version = _client_range(API_VERSIONS_KEY)[1]  # type: ignore[index]
        request = ApiVersionsRequest(
            client_software_name=_SOFTWARE_NAME, client_software_version=_SOFTWARE_VERSION
        )
        for _ in range(2):
            response: ApiVersionsResponse = await self.send(request, version)
            if response.error_code != ErrorCode.UNSUPPORTED_VERSION:
                break
            theirs = {k.api_key: k.max_version for k in response.api_keys}
            version = min(theirs.get(API_VERSIONS_KEY, 0), version)
        if response.error_code:
            raise error_for(response.error_code, "ApiVersions")
        for key in response.api_keys:
            self.broker_versions[key.api_key] = (key.min_version, key.max_version)
            ours = _client_range(key.api_key)
            if ours is None:
                continue
            hi = min(ours[1], key.max_version)
            if hi >= max(ours[0], key.min_version):
                self.api_versions[key.api_key] = hi

    # -- sending ----------------------------------------------------------------------

    def submit(
        self,
        request: Any,
        version: int | None = None,
        *,
        expect_response: bool = True,
        callback: Callable[[InFlightRequest], None] | None = None,
        timeout_s: float | None = None,
    ) -> InFlightRequest:
        """Queue `request` now (no checkpoint), in order after earlier submits.

        Needs a free slot (`can_send`); raises KafkaConnectionError on a closed connection.
        `expect_response=False` is for acks=0 produce: the request completes once written.
        """
        if self.closed:
            raise self._closed_error()
        if self.in_flight_count >= self._max_in_flight:
            raise RuntimeError("no free in-flight slot: await wait_can_send() first")
        api_key = type(request).API_KEY
        if version is None:
            version = self.version_for(api_key)
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        frame = self._encode(request, api_key, version, correlation_id)
        timeout = self._timeout_s if timeout_s is None else timeout_s
        pending = InFlightRequest(
            api_key,
            version,
            correlation_id,
            trio.current_time() + timeout,
            expect_response,
            callback,
        )
        if expect_response:
            self._in_flight.append(pending)
            scope = self._read_scope
            if scope is not None and pending.deadline < scope.deadline:
                scope.deadline = pending.deadline
        else:
            self._unwritten.append(pending)
        if expect_response and not self._queued and self._fd >= 0:
            # Nothing waits to be written: write it now rather than wake the write loop for
            # it, a scheduler pass per request (a follower's fetch is one request per round
            # trip). The socket is non-blocking; what it does not take goes to the loop, as
            # does an error, which the loop meets again and fails the connection with.
            try:
                n = os.write(self._fd, frame)
            except OSError:
                n = 0
            if n == len(frame):
                return pending
            frame = memoryview(frame)[n:]
        self._queued += 1
        # Cannot block: the channel holds max_in_flight frames and each has a slot.
        self._send_channel.send_nowait((frame, None if expect_response else pending))
        return pending

    async def send(self, request: Any, version: int | None = None, **kwargs: Any) -> Any:
        await self.wait_can_send()
        return await self.submit(request, version, **kwargs).wait()

    def _encode(self, request: Any, api_key: int, version: int, correlation_id: int) -> bytearray:
        buf = bytearray(4)
        header_version = 2 if _flexible(type(request), version) else 1
        RequestHeader(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id=self._client_id,
        ).encode(header_version, buf)
        request.encode(version, buf)
        _SIZE.pack_into(buf, 0, len(buf) - 4)
        return buf

    # -- the connection's tasks ---------------------------------------------------------

    async def run(self) -> None:
        """The reader and writer, until the connection fails or is closed."""
        with self._scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._guarded, self._write_loop)
                await self._guarded(self._read_loop)
        self._fail(KafkaConnectionError(f"connection to {self._where} closed"))
        with trio.CancelScope(shield=True):
            await self._stream.aclose()

    async def _guarded(self, loop: Callable[[], Any]) -> None:
        # Either loop ending ends the connection; what broke it goes to every waiter.
        try:
            await loop()
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._fail(KafkaConnectionError(f"connection to {self._where}: {exc}"))
        except InvalidFrame as exc:
            self._fail(KafkaConnectionError(f"bad response frame from {self._where}: {exc}"))
        except (KafkaConnectionError, RequestTimedOutError) as exc:
            self._fail(exc)

    @property
    def _where(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    async def _write_loop(self) -> None:
        stream = self._stream
        receive = self._receive_channel
        async for item in receive:
            items = [item]
            while True:  # gather what is queued into one write
                try:
                    items.append(receive.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            if len(items) == 1:
                await stream.send_all(item[0])
            else:
                await stream.send_all(b"".join([frame for frame, _ in items]))
            self._queued -= len(items)
            written = [pending for _, pending in items if pending is not None]
            if written:
                # acks=0 requests are done once written (Kafka completes them on send).
                for pending in written:
                    self._unwritten.remove(pending)
                    pending._finish(None)
                self._slot_freed()

    async def _read_loop(self) -> None:
        reader = self._reader
        stream = self._stream
        fd = self._fd
        if isinstance(stream, trio.SocketStream):
            sock = stream.socket
            recv_into = sock.recv_into
        else:  # TLS (client/security.py): decrypted through the SSLStream
            from trio_broker.client.security import receive_into

            recv_into = functools.partial(receive_into, stream)
        in_flight = self._in_flight
        unyielded = 0  # reads in a row that found bytes waiting and did not yield
        while True:
            frame = reader.next_frame()
            if frame is NEED_DATA:
                if fd >= 0 and unyielded < _READS_PER_YIELD:
                    # What the kernel already holds is read without a scheduler pass (a
                    # megabyte's fetch answer arrives in a few reads); only a read that
                    # would block waits, under the in-flight requests' deadline.
                    try:
                        n = os.readv(fd, (reader.receive_buffer(),))
                    except BlockingIOError:
                        n = -1
                    if n < 0:
                        unyielded = 0
                        await self._until_deadline(trio.lowlevel.wait_readable, sock)
                        continue  # and read again
                    unyielded += 1
                else:
                    unyielded = 0
                    n = await self._until_deadline(recv_into, reader.receive_buffer())
                    if n is _CUT:
                        continue
                if n == 0:
                    raise KafkaConnectionError(f"{self._where} closed the connection")
                reader.received(n)
                continue
            if not in_flight:
                raise KafkaConnectionError(f"{self._where} sent a response nobody asked for")
            self._complete(in_flight.popleft(), frame)

    async def _until_deadline(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`await fn(*args)` until the first in-flight request's deadline: its result, or
        _CUT if the deadline came first (RequestTimedOutError if that request is due: a
        request added meanwhile, see submit, may have moved the deadline)."""
        deadline = min((r.deadline for r in self._in_flight), default=math.inf)
        with trio.CancelScope(deadline=deadline) as scope:
            self._read_scope = scope
            result = await fn(*args)
        self._read_scope = None
        if not scope.cancelled_caught:
            return result
        head = self._in_flight[0] if self._in_flight else None
        if head is not None and head.deadline <= trio.current_time():
            raise RequestTimedOutError(
                f"no response to api key {head.api_key} v{head.version} "
                f"(correlation id {head.correlation_id}) from {self._where} within "
                f"{self._timeout_s * 1000:.0f} ms"
            )
        return _CUT

    def _complete(self, pending: InFlightRequest, frame: memoryview) -> None:
        cls = response_class(pending.api_key)
        # ApiVersions answers with header v0 even when flexible (ApiVersionsResponse.json).
        flexible = _flexible(cls, pending.version) and pending.api_key != API_VERSIONS_KEY
        try:
            header, pos = ResponseHeader.decode(frame, 1 if flexible else 0)
            if header.correlation_id != pending.correlation_id:
                raise KafkaConnectionError(
                    f"{self._where} answered correlation id {header.correlation_id}, "
                    f"expected {pending.correlation_id}"
                )
            version = pending.version
            if pending.api_key == API_VERSIONS_KEY and _INT16.unpack_from(frame, pos)[0] == int(
                ErrorCode.UNSUPPORTED_VERSION
            ):
                version = 0  # KIP-511: an unknown ApiVersions version is answered in v0
            response, _ = cls.decode(frame, version, pos)
        except (ValueError, struct.error) as exc:
            raise KafkaConnectionError(
                f"cannot decode api key {pending.api_key} v{pending.version} response "
                f"from {self._where}: {exc}"
            ) from None
        pending._finish(response)
        self._slot_freed()

    def _slot_freed(self) -> None:
        self._slot_waiters.unpark()
        self._on_slot_freed()

    # -- closing ----------------------------------------------------------------------

    def _closed_error(self) -> KafkaConnectionError:
        reason = self.close_reason
        if isinstance(reason, KafkaConnectionError):
            return KafkaConnectionError(str(reason).removeprefix("NETWORK_EXCEPTION: "))
        return KafkaConnectionError(f"connection to {self._where} is closed ({reason})")

    def _fail(self, error: BaseException) -> None:
        if self.closed:
            return
        self.closed = True
        self.close_reason = error
        self._scope.cancel()
        self._send_channel.close()
        pending = [*self._in_flight, *self._unwritten]
        self._in_flight.clear()
        self._unwritten.clear()
        log.info("connection to %s closed: %s", self._where, error)
        for i, request in enumerate(pending):
            # The request that timed out gets the timeout; the others were cut off by it.
            request._finish(
                None,
                error
                if i == 0 or not isinstance(error, RequestTimedOutError)
                else KafkaConnectionError(f"connection to {self._where} closed after a timeout"),
            )
        self._slot_waiters.unpark_all()
        self._on_closed(self)

    def close(self) -> None:
        self._fail(KafkaConnectionError(f"connection to {self._where} closed by the client"))

    def abort(self) -> None:
        """Make the next close a reset (SO_LINGER 0): the kernel drops what it has not sent
        instead of retransmitting it after the close, so a peer that comes back from a
        network partition never reads requests meant for it before."""
        stream = getattr(self._stream, "transport_stream", self._stream)
        sock = getattr(stream, "socket", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
