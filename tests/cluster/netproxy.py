"""A TCP forwarder the tests can cut, to partition the network between processes.

    proxy = TcpProxy(("127.0.0.1", zk_port)).start()
    ... point a broker at 127.0.0.1:proxy.port ...
    proxy.cut()    # every forwarded connection closed; new ones accepted and left silent
    proxy.heal()   # the silent ones closed; new connections are forwarded again

While cut the proxy behaves like a partitioned network as a peer sees it: what was
connected breaks, and a new connection goes nowhere (it is accepted, then neither read nor
answered, so the peer waits for its own timeout rather than hearing a refusal). It runs a
Trio loop on a daemon thread, as `trio_broker.testing.BrokerThread` does, so blocking
tests drive it with plain calls.
"""

from __future__ import annotations

import threading
from typing import Any

import trio

from trio_broker.testing import free_port

__all__ = ["TcpProxy"]


class TcpProxy:
    def __init__(self, target: tuple[str, int], *, port: int | None = None) -> None:
        self.target = target
        self.port = port or free_port()
        self.forwarded = 0  # connections forwarded to the target so far
        self.blackholed = 0  # connections accepted while cut
        self._cut = False
        self._scopes: set[trio.CancelScope] = set()
        self._held: set[trio.CancelScope] = set()
        self._token: trio.lowlevel.TrioToken | None = None
        self._main_scope: trio.CancelScope | None = None
        self._started = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    # --- from the test's thread -------------------------------------------------------------

    def start(self) -> TcpProxy:
        self._thread = threading.Thread(target=self._run, name="tcp-proxy", daemon=True)
        self._thread.start()
        if not self._started.wait(10) or self._error is not None:
            raise RuntimeError(f"proxy did not start on port {self.port}") from self._error
        return self

    def cut(self) -> None:
        """Close every forwarded connection; blackhole new ones until `heal()`."""
        self._in_loop(self._do_cut)

    def heal(self) -> None:
        """Close the blackholed connections (their peers reconnect); forward again."""
        self._in_loop(self._do_heal)

    def close(self) -> None:
        if self._thread is None:
            return
        if self._thread.is_alive() and self._main_scope is not None:
            self._in_loop(self._main_scope.cancel)
        self._thread.join(10)
        self._thread = None

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _in_loop(self, fn: Any) -> None:
        assert self._token is not None
        try:
            trio.from_thread.run_sync(fn, trio_token=self._token)
        except trio.RunFinishedError:
            pass

    # --- on the proxy's Trio loop -----------------------------------------------------------

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:
            self._error = exc
            self._started.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
        with trio.CancelScope() as scope:
            self._main_scope = scope
            async with trio.open_nursery() as nursery:
                self._started.set()
                await trio.serve_listeners(self._handle, listeners, handler_nursery=nursery)

    def _do_cut(self) -> None:
        self._cut = True
        for scope in list(self._scopes):
            scope.cancel()

    def _do_heal(self) -> None:
        self._cut = False
        # Their connections close (the peer reads EOF at once and connects again).
        for scope in list(self._held):
            scope.cancel()

    async def _handle(self, client: trio.SocketStream) -> None:
        async with client:
            if self._cut:
                self.blackholed += 1
                with trio.CancelScope() as held:
                    self._held.add(held)
                    try:
                        await trio.sleep_forever()
                    finally:
                        self._held.discard(held)
                return
            with trio.CancelScope() as scope:
                self._scopes.add(scope)
                try:
                    try:
                        upstream = await trio.open_tcp_stream(*self.target)
                    except OSError:
                        return  # the target is down: the client sees its connection close
                    self.forwarded += 1
                    async with upstream, trio.open_nursery() as nursery:
                        nursery.start_soon(self._pump, client, upstream, nursery.cancel_scope)
                        nursery.start_soon(self._pump, upstream, client, nursery.cancel_scope)
                finally:
                    self._scopes.discard(scope)

    @staticmethod
    async def _pump(
        source: trio.SocketStream, sink: trio.SocketStream, done: trio.CancelScope
    ) -> None:
        """Copy until either side ends; then the whole connection goes."""
        try:
            while data := await source.receive_some(65536):
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        done.cancel()
