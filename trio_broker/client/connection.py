"""The connection layer (Kafka's NetworkClient, in Trio): one connection per broker.

    async with NetworkClient(ClientConfig.build(bootstrap_servers="h:9092")) as client:
        response = await client.send("h:9092", MetadataRequest(topics=None))
        response = await client.send(1, ProduceRequest(...), version=9)   # a node id

A connection is opened on first use and negotiates versions with ApiVersions: each
request goes at the highest version both sides speak unless the caller names one. Up to
`max.in.flight.requests.per.connection` requests are pipelined; the broker answers in
order, so responses are matched to the oldest request and checked by correlation id.
A request unanswered after `request.timeout.ms` closes the connection (as Kafka does),
failing everything in flight on it. A failed connect waits `reconnect.backoff.ms` before
the next attempt, doubling up to `reconnect.backoff.max.ms`, with 20% jitter.

Each connection is two tasks in the client's nursery: a writer (the only task that
writes to the socket) fed by a bounded channel, and a reader that completes requests in
order. `submit()` queues a request and returns its `InFlightRequest` without waiting
for the answer, so a caller (the producer's sender) keeps the order of its requests.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import struct
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import trio

from trio_broker.client.config import ClientConfig, parse_address
from trio_broker.client.errors import KafkaConnectionError, RequestTimedOutError, error_for
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated import request_class, response_class
from trio_broker.protocol._generated.api_versions_request import ApiVersionsRequest
from trio_broker.protocol._generated.api_versions_response import ApiVersionsResponse
from trio_broker.protocol._generated.request_header import RequestHeader
from trio_broker.protocol._generated.response_header import ResponseHeader
from trio_broker.protocol.framing import NEED_DATA, FrameReader, InvalidFrame

__all__ = ["BrokerConnection", "InFlightRequest", "NetworkClient", "Node"]

log = logging.getLogger(__name__)

API_VERSIONS_KEY = 18
_SIZE = struct.Struct(">i")
_INT16 = struct.Struct(">h")
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
        stream: trio.SocketStream,
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
            tuple[bytearray, InFlightRequest | None]
        ](self._max_in_flight)
        self._reader = FrameReader(max_frame_bytes=config.receive_max_bytes)
        self._read_scope: trio.CancelScope | None = None
        self._scope = trio.CancelScope()

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
            written = [pending for _, pending in items if pending is not None]
            if written:
                # acks=0 requests are done once written (Kafka completes them on send).
                for pending in written:
                    self._unwritten.remove(pending)
                    pending._finish(None)
                self._slot_freed()

    async def _read_loop(self) -> None:
        reader = self._reader
        sock = self._stream.socket
        in_flight = self._in_flight
        while True:
            frame = reader.next_frame()
            if frame is NEED_DATA:
                deadline = min((r.deadline for r in in_flight), default=math.inf)
                with trio.CancelScope(deadline=deadline) as scope:
                    self._read_scope = scope
                    n = await sock.recv_into(reader.receive_buffer())
                self._read_scope = None
                if scope.cancelled_caught:
                    head = in_flight[0] if in_flight else None
                    if head is not None and head.deadline <= trio.current_time():
                        raise RequestTimedOutError(
                            f"no response to api key {head.api_key} v{head.version} "
                            f"(correlation id {head.correlation_id}) from {self._where} within "
                            f"{self._timeout_s * 1000:.0f} ms"
                        )
                    continue
                if n == 0:
                    raise KafkaConnectionError(f"{self._where} closed the connection")
                reader.received(n)
                continue
            if not in_flight:
                raise KafkaConnectionError(f"{self._where} sent a response nobody asked for")
            self._complete(in_flight.popleft(), frame)

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


@attrs.define
class _NodeState:
    """Reconnect bookkeeping per address (ClusterConnectionStates in Kafka)."""

    failures: int = 0
    next_attempt: float = -float("inf")
    last_error: BaseException | None = None


class NetworkClient:
    """Connections to a cluster's brokers, by node id or address; see the module docstring.

    `async with` opens the nursery the connections' tasks live in and closes them all on
    exit. Node ids are known once `set_nodes()` is told them (ClusterMetadata does that).
    """

    def __init__(self, config: ClientConfig | None = None, **kwargs: Any) -> None:
        self.config = config if config is not None else ClientConfig.build(**kwargs)
        self.bootstrap: tuple[Address, ...] = tuple(
            parse_address(s) for s in self.config.bootstrap_servers
        )
        self._nodes: dict[int, Address] = {}
        self._connections: dict[Address, BrokerConnection] = {}
        self._connecting: dict[Address, trio.Event] = {}
        self._states: dict[Address, _NodeState] = {}
        self._listeners: list[Callable[[], None]] = []
        self._disconnect_listeners: list[Callable[[Address], None]] = []
        self._nursery: trio.Nursery | None = None
        self._exit_stack: contextlib.AsyncExitStack | None = None

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> NetworkClient:
        stack = contextlib.AsyncExitStack()
        self._nursery = await stack.enter_async_context(trio.open_nursery())
        self._exit_stack = stack
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        assert self._exit_stack is not None and self._nursery is not None
        self.close()
        self._nursery.cancel_scope.cancel()
        try:
            return await self._exit_stack.__aexit__(*exc_info)
        finally:
            self._nursery = None

    def close(self) -> None:
        for connection in list(self._connections.values()):
            connection.close()

    @property
    def nursery(self) -> trio.Nursery:
        if self._nursery is None:
            raise RuntimeError("the NetworkClient is not open: use `async with`")
        return self._nursery

    # -- nodes ----------------------------------------------------------------------------

    def set_nodes(self, nodes: Mapping[int, Address]) -> None:
        """The cluster's brokers by node id (from a Metadata response)."""
        self._nodes = dict(nodes)

    @property
    def nodes(self) -> Mapping[int, Address]:
        return self._nodes

    def address_of(self, node: Node) -> Address:
        if isinstance(node, int):
            address = self._nodes.get(node)
            if address is None:
                raise error_for(ErrorCode.LEADER_NOT_AVAILABLE, f"node {node} is not known")
            return address
        if isinstance(node, str):
            return parse_address(node)
        return (node[0], int(node[1]))

    def add_listener(self, callback: Callable[[], None]) -> None:
        """`callback()` runs (synchronously) when a connection opens, closes or frees a slot."""
        self._listeners.append(callback)

    def add_disconnect_listener(self, callback: Callable[[Address], None]) -> None:
        self._disconnect_listeners.append(callback)

    def _notify(self) -> None:
        for callback in self._listeners:
            callback()

    # -- connections --------------------------------------------------------------------

    def connection_if_ready(self, node: Node) -> BrokerConnection | None:
        """The open connection to `node` if it has a free in-flight slot, else None."""
        connection = self._connections.get(self.address_of(node))
        if connection is not None and connection.can_send:
            return connection
        return None

    def is_connected(self, node: Node) -> bool:
        connection = self._connections.get(self.address_of(node))
        return connection is not None and not connection.closed

    def in_flight_count(self, node: Node) -> int:
        connection = self._connections.get(self.address_of(node))
        return 0 if connection is None else connection.in_flight_count

    def backoff_remaining(self, node: Node) -> float:
        state = self._states.get(self.address_of(node))
        if state is None:
            return 0.0
        return max(0.0, state.next_attempt - trio.current_time())

    def initiate_connect(self, node: Node) -> None:
        """Start connecting in the background (the sender polls `connection_if_ready`)."""
        address = self.address_of(node)
        if address in self._connections or address in self._connecting:
            return
        self.nursery.start_soon(self._connect_quietly, address)

    async def _connect_quietly(self, address: Address) -> None:
        with contextlib.suppress(KafkaError):  # the failure is kept in the node's state
            await self.connection(address)

    async def connection(self, node: Node) -> BrokerConnection:
        """The connection to `node`, opening it (after any reconnect backoff) if needed."""
        address = self.address_of(node)
        while True:
            connection = self._connections.get(address)
            if connection is not None and not connection.closed:
                return connection
            connecting = self._connecting.get(address)
            if connecting is None:
                return await self._connect(address)
            await connecting.wait()
            if address not in self._connections:
                state = self._states.get(address)
                error = state.last_error if state else None
                raise KafkaConnectionError(f"cannot connect to {address[0]}:{address[1]}: {error}")

    async def _connect(self, address: Address) -> BrokerConnection:
        done = self._connecting[address] = trio.Event()
        state = self._states.setdefault(address, _NodeState())
        try:
            await trio.sleep_until(state.next_attempt)
            try:
                connection = await self.nursery.start(self._run_connection, address)
            except (OSError, KafkaError, trio.TooSlowError) as exc:
                state.failures += 1
                state.last_error = exc
                backoff_ms = min(
                    self.config.reconnect_backoff_ms * 2 ** (state.failures - 1),
                    self.config.reconnect_backoff_max_ms,
                )
                state.next_attempt = trio.current_time() + backoff_ms / 1000 * random.uniform(
                    0.8, 1.2
                )
                log.info("cannot connect to %s:%s: %s", address[0], address[1], exc)
                if isinstance(exc, KafkaError):
                    raise
                raise KafkaConnectionError(
                    f"cannot connect to {address[0]}:{address[1]}: {exc or type(exc).__name__}"
                ) from exc
            state.failures = 0
            state.last_error = None
            self._connections[address] = connection
            return connection
        finally:
            del self._connecting[address]
            done.set()
            self._notify()

    async def _run_connection(
        self, address: Address, *, task_status: trio.TaskStatus[BrokerConnection]
    ) -> None:
        host, port = address
        with trio.fail_after(self.config.socket_connection_setup_timeout_ms / 1000):
            stream = await trio.open_tcp_stream(host, port)
        connection = BrokerConnection(
            address, stream, self.config, self._connection_closed, self._notify
        )
        failed: KafkaError | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(connection.run)
            try:
                await self._negotiate(connection)
            except KafkaError as exc:  # raised below, outside the nursery (not in a group)
                failed = exc
                connection.close()
            else:
                task_status.started(connection)
        if failed is not None:
            raise failed

    async def _negotiate(self, connection: BrokerConnection) -> None:
        """ApiVersions at our highest version; on UNSUPPORTED_VERSION, at the broker's."""
        version = _client_range(API_VERSIONS_KEY)[1]  # type: ignore[index]
        request = ApiVersionsRequest(
            client_software_name=_SOFTWARE_NAME, client_software_version=_SOFTWARE_VERSION
        )
        for _ in range(2):
            response: ApiVersionsResponse = await connection.send(request, version)
            if response.error_code != ErrorCode.UNSUPPORTED_VERSION:
                break
            theirs = {k.api_key: k.max_version for k in response.api_keys}
            version = min(theirs.get(API_VERSIONS_KEY, 0), version)
        if response.error_code:
            raise error_for(response.error_code, "ApiVersions")
        for key in response.api_keys:
            connection.broker_versions[key.api_key] = (key.min_version, key.max_version)
            ours = _client_range(key.api_key)
            if ours is None:
                continue
            hi = min(ours[1], key.max_version)
            if hi >= max(ours[0], key.min_version):
                connection.api_versions[key.api_key] = hi

    def _connection_closed(self, connection: BrokerConnection) -> None:
        address = connection.address
        if self._connections.get(address) is connection:
            del self._connections[address]
            state = self._states.setdefault(address, _NodeState())
            # After a disconnect, the next connect waits the base backoff (Kafka does too).
            state.next_attempt = trio.current_time() + self.config.reconnect_backoff_ms / 1000
            for callback in self._disconnect_listeners:
                callback(address)
        self._notify()

    # -- requests -----------------------------------------------------------------------

    async def submit(
        self,
        node: Node,
        request: Any,
        version: int | None = None,
        *,
        expect_response: bool = True,
        callback: Callable[[InFlightRequest], None] | None = None,
        timeout_s: float | None = None,
    ) -> InFlightRequest:
        """Connect if needed, wait for an in-flight slot, queue `request`; returns at once
        after queueing, so consecutive submits from one task go out in order."""
        connection = await self.connection(node)
        await connection.wait_can_send()
        return connection.submit(
            request,
            version,
            expect_response=expect_response,
            callback=callback,
            timeout_s=timeout_s,
        )

    async def send(
        self,
        node: Node,
        request: Any,
        version: int | None = None,
        *,
        timeout_s: float | None = None,
    ) -> Any:
        """Send `request` to `node` and return its decoded response.

        `version` defaults to the highest both sides speak. Raises KafkaConnectionError
        when the connection fails, RequestTimedOutError after request.timeout.ms (or
        `timeout_s`). Error codes inside the response are the caller's to read.
        """
        pending = await self.submit(node, request, version, timeout_s=timeout_s)
        return await pending.wait()

    async def api_version(self, node: Node, api_key: int) -> int:
        """The version requests of `api_key` go to `node` at (connecting if needed)."""
        return (await self.connection(node)).version_for(api_key)

    def least_loaded_node(self) -> Node:
        """A connected node with the fewest requests in flight, else any known, else bootstrap."""
        best: tuple[int, Address] | None = None
        for address, connection in self._connections.items():
            if not connection.closed and (best is None or connection.in_flight_count < best[0]):
                best = (connection.in_flight_count, address)
        if best is not None:
            return best[1]
        candidates = [*self._nodes.values()] or list(self.bootstrap)
        ready = [a for a in candidates if self.backoff_remaining(a) == 0]
        return random.choice(ready or candidates)
