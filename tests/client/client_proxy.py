"""A TCP proxy for client tests: forwards to a broker, and can cut or stall connections.

async with open_proxy(nursery, ("127.0.0.1", broker_port)) as proxy:
    ... connect to proxy.address ...
    proxy.cut()            # close every connection through it now
    proxy.stall = True     # stop forwarding broker -> client (a silent broker)
    proxy.cut_after(bytes_up=..)  # cut once that many client bytes went through
"""

from __future__ import annotations

import math

import trio


class Proxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.address: tuple[str, int] = ("127.0.0.1", 0)
        self.stall = False
        self.connections = 0
        self.bytes_up = 0
        self.cut_at_bytes_up = math.inf
        self._scopes: set[trio.CancelScope] = set()
        self._unstall = trio.Event()

    def cut(self) -> None:
        for scope in list(self._scopes):
            scope.cancel()

    def resume(self) -> None:
        self.stall = False
        self._unstall.set()
        self._unstall = trio.Event()

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.address = listeners[0].socket.getsockname()[:2]
        task_status.started(self.address)
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, client: trio.SocketStream) -> None:
        self.connections += 1
        with trio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                server = await trio.open_tcp_stream(*self.target)
            except OSError:
                await client.aclose()
                return
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, client, server, True, nursery.cancel_scope)
                    nursery.start_soon(self._pump, server, client, False, nursery.cancel_scope)
            finally:
                self._scopes.discard(scope)
        with trio.CancelScope(shield=True):
            await client.aclose()
            await server.aclose()

    async def _pump(self, src, dst, up: bool, scope: trio.CancelScope) -> None:
        try:
            while True:
                data = await src.receive_some(65536)
                if not data:
                    break
                if not up:
                    while self.stall:
                        await self._unstall.wait()
                else:
                    if self.bytes_up + len(data) >= self.cut_at_bytes_up:
                        # Forward part of it, then cut: the broker sees a torn request.
                        part = int(self.cut_at_bytes_up - self.bytes_up)
                        await dst.send_all(data[:part])
                        self.bytes_up += part
                        self.cut_at_bytes_up = math.inf
                        self.cut()
                        return
                    self.bytes_up += len(data)
                await dst.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()


async def start_proxy(nursery: trio.Nursery, target: tuple[str, int]) -> Proxy:
    proxy = Proxy(target)
    await nursery.start(proxy.serve)
    return proxy
