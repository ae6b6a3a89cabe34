"""NetworkClient: connections to a cluster's brokers, by node id or address.

    async with NetworkClient(ClientConfig.build(bootstrap_servers="h:9092")) as client:
        response = await client.send("h:9092", MetadataRequest(topics=None))
        response = await client.send(1, ProduceRequest(...), version=9)   # a node id

A connection (connection.py) is opened on first use and negotiates versions with
ApiVersions: each request goes at the highest version both sides speak unless the caller
names one. A failed connect waits `reconnect.backoff.ms` before the next attempt,
doubling up to `reconnect.backoff.max.ms`, with 20% jitter; a closed connection waits the
base backoff. Every connection's tasks live in the client's nursery, which `async with`
opens and closes.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import trio

from trio_broker.client.config import ClientConfig, parse_address
from trio_broker.client.connection import Address, BrokerConnection, InFlightRequest, Node
from trio_broker.client.errors import AuthenticationError, KafkaConnectionError, error_for
from trio_broker.errors import ErrorCode, KafkaError

__all__ = ["NetworkClient"]

log = logging.getLogger(__name__)


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
        if self.config.security_protocol in ("SSL", "SASL_SSL"):
            from trio_broker.client.security import client_context

            client_context(self.config)  # bad key or trust store files fail here, by name
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
        # The last failed authentication (SASL or TLS), until a connection authenticates:
        # not retriable, so the consumer's poll raises it (Kafka's maybeThrowAuthFailure).
        self.auth_error: AuthenticationError | None = None

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
            # The body's exception is not handed to the nursery: it propagates as raised,
            # not wrapped in an ExceptionGroup (the nursery only holds our own tasks).
            await self._exit_stack.__aexit__(None, None, None)
        finally:
            self._nursery = None
        return None

    def close(self) -> None:
        for connection in list(self._connections.values()):
            connection.close()

    def disconnect(self, node: Node) -> None:
        """Close the connection to `node`, whatever it holds (requests in flight fail with
        KafkaConnectionError, bytes the kernel has not sent yet are dropped), and let the
        next request connect at once. For a peer known to be another process now: a
        connection that outlived a network partition may sit in TCP's retransmission
        backoff for many seconds, and nothing sent on it would arrive before that."""
        address = self.address_of(node)
        connection = self._connections.get(address)
        if connection is not None:
            connection.abort()
            connection.close()
        self._states.pop(address, None)

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
                if isinstance(exc, AuthenticationError):
                    self.auth_error = exc
                if isinstance(exc, KafkaError):
                    raise
                raise KafkaConnectionError(
                    f"cannot connect to {address[0]}:{address[1]}: {exc or type(exc).__name__}"
                ) from exc
            state.failures = 0
            state.last_error = None
            self.auth_error = None
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
        config = self.config
        with trio.fail_after(config.socket_connection_setup_timeout_ms / 1000):
            try:
                stream: Any = await trio.open_tcp_stream(host, port)
            except (ValueError, OverflowError) as exc:
                # A host or port from a broker's metadata that no resolver takes (a label
                # too long for IDNA, a port out of range): a failed connect, not a crash.
                raise OSError(f"cannot connect to {host!r}:{port}: {exc}") from exc
            if config.secure and config.security_protocol in ("SSL", "SASL_SSL"):
                from trio_broker.client.security import tls_stream

                stream = await tls_stream(stream, config, host, port)
        connection = BrokerConnection(
            address, stream, config, self._connection_closed, self._notify
        )
        failed: KafkaError | None = None
        async with trio.open_nursery() as nursery:
            if not config.secure:
                nursery.start_soon(connection.run)
            else:
                sasl_scope = trio.CancelScope()  # re-authentication ends with the connection

                async def run() -> None:
                    await connection.run()
                    sasl_scope.cancel()

                nursery.start_soon(run)
            try:
                await connection.negotiate()
                if config.secure and config.security_protocol.startswith("SASL_"):
                    from trio_broker.client.security import authenticate, reauthenticate

                    with trio.fail_after(config.socket_connection_setup_timeout_ms / 1000):
                        lifetime_ms = await authenticate(connection, config)
                    if lifetime_ms > 0:

                        async def reauth() -> None:
                            with sasl_scope:
                                await reauthenticate(connection, config, lifetime_ms)

                        nursery.start_soon(reauth)
            except trio.TooSlowError:
                failed = KafkaConnectionError(f"SASL authentication with {host}:{port} timed out")
                connection.close()
            except KafkaError as exc:  # raised below, outside the nursery (not in a group)
                failed = exc
                connection.close()
            else:
                task_status.started(connection)
        if failed is not None:
            raise failed

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
