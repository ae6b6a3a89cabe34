"""Kafka's SocketServer in trio: one acceptor per listener, N processors, memory channels.

SocketServer.run                                      its own nursery
├── acceptor task per listener: accept -> connection quotas (refuse at once, or)
│                               round-robin -> a processor's connection channel
└── Processor.run x num.network.threads               each with a nursery
    ├── response task: (connection, response) from the response channel -> connection
    └── Connection.serve per connection, in its own cancel scope
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Mapping
from typing import Any

import trio

from trio_broker.config import BrokerConfig, Listener
from trio_broker.server.connection import AT_ONCE_ACKS, AT_ONCE_ACKS_LONE, Connection
from trio_broker.server.connection_quotas import ConnectionQuotas, normalize_host
from trio_broker.server.log_limit import LogLimiter
from trio_broker.server.memory_pool import MemoryPool
from trio_broker.server.memory_reclaim import MemoryReclaimer
from trio_broker.server.requests import Request, Response

logger = logging.getLogger(__name__)

__all__ = ["BoundListener", "Processor", "SocketServer"]

# Accept errors that mean "out of resources for now": log, back off, keep accepting
# (the same list trio's serve_listeners uses).
_ACCEPT_CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
_ACCEPT_BACKOFF_S = 0.100
# Bad frames and refused connections: one log line per client address per this many s.
_LOG_INTERVAL_S = 60.0
_READ_BUFFER_BYTES = 64 * 1024  # as a frame reader's chunk
# Responses the response task hands over in one run before it passes the scheduler.
_DRAIN = 256


class Processor:
    """Kafka's Processor: owns a set of connections and their response channel."""

    # The broker's metrics.BrokerMetrics when metrics are on; its connections time requests.
    metrics: Any = None
    # The acks of a produce its connections may batch and hold (connection.py _may_hold).
    at_once_acks = AT_ONCE_ACKS

    def __init__(
        self,
        index: int,
        requests: trio.MemorySendChannel[Request],
        *,
        config: BrokerConfig,
        supported: Mapping[int, tuple[int, int]],
        pool: MemoryPool,
        quotas: ConnectionQuotas,
        client_lines: LogLimiter,
        factories: Mapping[str, Any] | None = None,
        reclaimer: MemoryReclaimer | None = None,
    ) -> None:
        self.index = index
        self.draining = False  # shutting down: connections close once their request is done
        if not config.zookeeper_connect:
            self.at_once_acks = AT_ONCE_ACKS_LONE
        # Listener name -> what makes its connections, for listeners that are not
        # PLAINTEXT (security/listener.py, through Broker.secure_listener); Connection for the others.
        self._factories = factories or {}
        self._requests = requests
        self._config = config
        self._supported = supported
        self._pool = pool
        self._quotas = quotas
        self._client_lines = client_lines
        self._reclaimer = reclaimer
        # Where a connection with nothing buffered reads its next bytes (Connection
        # _next_frame): one buffer for all of them, as reads never wait half done.
        self.read_buffer = bytearray(_READ_BUFFER_BYTES)
        self.connections: set[Connection] = set()
        self.new_connections_send, self._new_connections = trio.open_memory_channel[
            tuple[trio.SocketStream, str, str]
        ](20)
        # Bounded by the connections' one-request-in-flight rule in practice; the bound is
        # backpressure on handlers should a processor fall behind.
        self._responses_send, self._responses = trio.open_memory_channel[
            tuple[Connection, Response | list[Response]]
        ](max(config.queued_max_requests, 1))

    async def deliver(self, connection: Connection, response: Response | list[Response]) -> None:
        try:
            self._responses_send.send_nowait((connection, response))
        except trio.WouldBlock:
            await self._responses_send.send((connection, response))

    def deliver_now(self, connection: Connection, response: Response | list[Response]) -> bool:
        """deliver() without a coroutine when the response channel has room (always, but
        for a processor far behind): False when it is full, and deliver() must wait."""
        try:
            self._responses_send.send_nowait((connection, response))
        except trio.WouldBlock:
            return False
        return True

    async def _close_idle(self, idle_s: float) -> None:
        """Kafka's connections.max.idle.ms: close connections that have been quiet that long
        (no byte read and no request in flight), and with them partly read requests that
        stopped coming."""
        interval = min(max(idle_s / 10, 0.01), 30.0)
        while True:
            await trio.sleep(interval)
            now = trio.current_time()
            for connection in list(self.connections):
                idle = connection.idle_for(now)
                if idle >= idle_s:
                    connection.close_idle(idle)

    async def _response_task(self) -> None:
        # Each receive() ends with a scheduler pass even when a response is waiting;
        # deliver() never blocks, so what is already queued is handed over in one run.
        responses = self._responses
        async for connection, response in responses:
            connection.deliver(response)
            for _ in range(_DRAIN):
                try:
                    connection, response = responses.receive_nowait()
                except trio.WouldBlock:
                    break
                connection.deliver(response)
            del connection, response  # hold no finished answer while waiting

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery, self._requests:
            nursery.start_soon(self._response_task)
            if self._config.connections_max_idle_ms > 0:
                nursery.start_soon(self._close_idle, self._config.connections_max_idle_ms / 1000)
            task_status.started()
            async with self._new_connections:
                async for stream, listener, host in self._new_connections:
                    try:
                        connection = self._factories.get(listener, Connection)(
                            stream,
                            self,
                            listener=listener,
                            max_request_bytes=self._config.socket_request_max_bytes,
                            supported=self._supported,
                            pool=self._pool,
                            client_lines=self._client_lines,
                            peer_host=host,
                        )
                    except BaseException:
                        self._quotas.release(host)
                        raise
                    self.connections.add(connection)
                    logger.debug(
                        "[conn %s] accepted from %s on processor %d",
                        connection.id,
                        connection.peer,
                        self.index,
                    )
                    # The connection's task is its own serve(), which calls
                    # connection_closed() as it ends: no coroutine of ours wraps it (an idle
                    # connection costs what its frames do). It sends requests on this
                    # processor's channel, which outlives every connection of the processor,
                    # rather than on a clone of its own. The name is a constant: trio would
                    # format one for each task.
                    nursery.start_soon(
                        connection.serve, self._requests, name="trio_broker connection"
                    )
            # Shutdown: no new connections; finish those we have, then stop responding.
            # A connection whose task has not started yet closes as soon as it starts.
            self.draining = True
            for connection in list(self.connections):
                connection.close_when_idle()
            while self.connections:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    def connection_closed(self, connection: Connection) -> None:
        """Called by each connection's serve() as it ends."""
        self.connections.discard(connection)
        self._quotas.release(connection.peer_host)
        if self._reclaimer is not None:
            self._reclaimer.connection_closed()

    def compact(self) -> None:
        """After many connections closed: a set never shrinks by itself."""
        self.connections = set(self.connections)


class BoundListener:
    def __init__(self, listener: Listener, sockets: list[trio.SocketListener]) -> None:
        self.listener = listener
        self.sockets = sockets
        host, port = sockets[0].socket.getsockname()[:2]
        self.host = host
        self.port = port

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port


class SocketServer:
    metrics: Any = None  # handed to each processor (see Processor.metrics)

    def __init__(
        self,
        config: BrokerConfig,
        requests: trio.MemorySendChannel[Request],
        supported: Mapping[int, tuple[int, int]],
        *,
        secure: Callable[[str, str], Any] | None = None,
    ) -> None:
        self.config = config
        self._requests = requests
        self._supported = supported
        # secure(listener, protocol) -> the connection factory of a listener that is not
        # PLAINTEXT (its TLS and SASL). The broker hands it in (Broker.secure_listener), so
        # that the socket server stands below trio_broker.security and a plaintext broker
        # never imports it.
        self._secure_listener = secure
        self._factories: dict[str, Any] = {}
        self.processors: list[Processor] = []
        self._processor_count = 0
        self._nursery: trio.Nursery | None = None
        self.bound: list[BoundListener] = []
        self._accept_scope = trio.CancelScope()
        self.finished = trio.Event()
        # queued.max.request.bytes, never below one request of the largest size allowed.
        pool_bytes = config.queued_max_request_bytes
        if 0 < pool_bytes < config.socket_request_max_bytes:
            logger.info(
                "queued.max.request.bytes=%d raised to socket.request.max.bytes=%d",
                pool_bytes,
                config.socket_request_max_bytes,
            )
            pool_bytes = config.socket_request_max_bytes
        self.pool = MemoryPool(pool_bytes)
        self.quotas = ConnectionQuotas(
            max_connections=config.max_connections,
            max_connections_per_ip=config.max_connections_per_ip,
            overrides=config.max_connections_per_ip_overrides,
            max_connection_creation_rate=config.max_connection_creation_rate,
        )
        # Bad frames, stalled or idle connections, handler failures: lines clients cause.
        self.client_lines = LogLimiter(_LOG_INTERVAL_S)
        self._refusals = LogLimiter(_LOG_INTERVAL_S)
        self.reclaimer = MemoryReclaimer(on_reclaim=self._compact)

    def _compact(self) -> None:
        for processor in self.processors:
            processor.compact()

    async def bind(self) -> list[BoundListener]:
        for listener in self.config.listeners:
            host = listener.host or None
            sockets = await trio.open_tcp_listeners(listener.port, host=host)
            bound = BoundListener(listener, sockets)
            self._secure(listener.name)
            self.bound.append(bound)
            logger.info("listening on %s://%s:%d", listener.name, bound.host, bound.port)
        return self.bound

    def _secure(self, name: str) -> None:
        protocol = self.config.security_protocol(name)
        if protocol != "PLAINTEXT" and name not in self._factories:
            if self._secure_listener is None:
                raise RuntimeError(f"listener {name} is {protocol}: no broker security state")
            self._factories[name] = self._secure_listener(name, protocol)

    def stop_accepting(self) -> None:
        self._accept_scope.cancel()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the bound listeners until stop_accepting(), then drain connections."""
        try:
            await self._run(task_status)
        finally:
            self.finished.set()

    def _new_processor(self) -> Processor:
        processor = Processor(
            self._processor_count,
            self._requests.clone(),
            config=self.config,
            supported=self._supported,
            pool=self.pool,
            quotas=self.quotas,
            client_lines=self.client_lines,
            factories=self._factories,
            reclaimer=self.reclaimer,
        )
        self._processor_count += 1
        processor.metrics = self.metrics
        self.processors.append(processor)
        return processor

    def resize_processors(self, count: int) -> None:
        """num.network.threads changed at runtime: start processors, or retire the newest.
        A retired processor takes no new connections and closes its own as each goes idle
        (as Kafka's do, the clients reconnect to the others)."""
        nursery = self._nursery
        if nursery is None or self._accept_scope.cancel_called:
            return
        while len(self.processors) < count:
            nursery.start_soon(self._new_processor().run)
        while len(self.processors) > max(count, 1):
            self.processors.pop().new_connections_send.close()

    async def _run(self, task_status: trio.TaskStatus[None]) -> None:
        async with trio.open_nursery() as nursery, self._requests:
            for _ in range(self.config.num_network_threads):
                await nursery.start(self._new_processor().run)
            self._nursery = nursery
            task_status.started()
            with self._accept_scope:
                async with trio.open_nursery() as acceptors:
                    acceptors.start_soon(self.reclaimer.run)
                    for bound in self.bound:
                        for sock in bound.sockets:
                            acceptors.start_soon(self._accept_loop, sock, bound.listener.name)
            for bound in self.bound:
                for sock in bound.sockets:
                    await sock.aclose()
            for processor in self.processors:
                await processor.new_connections_send.aclose()

    async def _accept_loop(self, sock: trio.SocketListener, listener: str) -> None:
        turn = 0
        while True:
            try:
                stream = await sock.accept()
            except OSError as exc:
                if exc.errno in _ACCEPT_CAPACITY_ERRNOS:
                    logger.error(
                        "accept on %s failed (%s); retrying in %.0f ms",
                        listener,
                        errno.errorcode.get(exc.errno, exc.errno),
                        _ACCEPT_BACKOFF_S * 1000,
                    )
                    await trio.sleep(_ACCEPT_BACKOFF_S)
                    continue
                raise
            host = _peer_host(stream)
            refused = self.quotas.admit(host, trio.current_time())
            if refused is not None:
                await self._refuse(stream, host, listener, refused)
                continue
            try:
                turn = await self._hand_over(stream, listener, host, turn)
            except BaseException:
                self.quotas.release(host)
                await trio.aclose_forcefully(stream)
                raise
            turn += 1

    async def _hand_over(
        self, stream: trio.SocketStream, listener: str, host: str, turn: int
    ) -> int:
        """Give a new connection to the processors in turn; returns the turn taken."""
        while True:
            processor = self.processors[turn % len(self.processors)]
            try:
                await processor.new_connections_send.send((stream, listener, host))
                return turn
            except trio.ClosedResourceError:
                if processor in self.processors:
                    raise  # closed by the server's shutdown
                turn += 1  # retired by resize_processors: the next one takes it

    async def _refuse(self, stream: trio.SocketStream, host: str, listener: str, why: str) -> None:
        # Closed at once: the client sees the connection end instead of hanging unread.
        await trio.aclose_forcefully(stream)
        skipped = self._refusals.hit(host, trio.current_time())
        if skipped is not None:
            logger.warning(
                "refused a connection from %s on %s: %s%s",
                host,
                listener,
                why,
                f" ({skipped} more refused since the last such line)" if skipped else "",
            )


def _peer_host(stream: trio.SocketStream) -> str:
    try:
        return normalize_host(stream.socket.getpeername()[0])
    except OSError:
        return "?"
