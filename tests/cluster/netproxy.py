"""A TCP forwarder the tests can cut, to partition the network between processes.

    proxy = TcpProxy(("127.0.0.1", zk_port)).start()
    ... point a broker at 127.0.0.1:proxy.port ...
    proxy.cut()    # every forwarded connection closed; new ones accepted and left silent
    proxy.heal()   # the silent ones closed; new connections are forwarded again

While cut the proxy behaves like a partitioned network as a peer sees it. Two ways:

- `cut()` (`silent=False`): what was connected breaks (closed), and a new connection goes
  nowhere: it is accepted, then neither read nor answered, so the peer waits for its own
  timeout rather than hearing a refusal. `heal()` closes those, and the peers connect
  again.
- `cut(silent=True)`: nothing is closed; bytes simply stop moving, on the connections
  that exist and on new ones (accepted, not yet connected onward), as when packets are
  dropped. Each side notices only by its own timeouts. `heal()` lets everything flow
  again, what was sent meanwhile included, as TCP's retransmissions would deliver it;
  a connection made during the cut is connected onward then.

It runs a Trio loop on a daemon thread, as `trio_broker.testing.BrokerThread` does, so
blocking tests drive it with plain calls.
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
        self._silent = False
        # Set while bytes may move; a silent cut replaces it with an unset one.
        self._flowing: trio.Event | None = None
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

    def cut(self, *, silent: bool = False) -> None:
        """Close every forwarded connection and blackhole new ones until `heal()`; with
        `silent`, stall every connection, old and new, instead."""
        self._in_loop(lambda: self._do_cut(silent))

    def heal(self) -> None:
        """After `cut()`: close the blackholed connections (their peers reconnect) and
        forward new ones. After `cut(silent=True)`: let everything flow again."""
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
        self._flowing = trio.Event()
        self._flowing.set()
        listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
        with trio.CancelScope() as scope:
            self._main_scope = scope
            async with trio.open_nursery() as nursery:
                self._started.set()
                await trio.serve_listeners(self._handle, listeners, handler_nursery=nursery)

    def _do_cut(self, silent: bool) -> None:
        if self._cut:
            return
        self._cut, self._silent = True, silent
        if silent:
            self._flowing = trio.Event()
            return
        for scope in list(self._scopes):
            scope.cancel()

    def _do_heal(self) -> None:
        if not self._cut:
            return
        self._cut = False
        if self._silent:
            assert self._flowing is not None
            self._flowing.set()
            return
        # Their connections close (the peer reads EOF at once and connects again).
        for scope in list(self._held):
            scope.cancel()

    async def _wait_flowing(self) -> None:
        assert self._flowing is not None
        await self._flowing.wait()

    async def _handle(self, client: trio.SocketStream) -> None:
        async with client:
            if self._cut and not self._silent:
                self.blackholed += 1
                with trio.CancelScope() as held:
                    self._held.add(held)
                    try:
                        await trio.sleep_forever()
                    finally:
                        self._held.discard(held)
                return
            if self._cut:
                self.blackholed += 1
            with trio.CancelScope() as scope:
                self._scopes.add(scope)
                try:
                    await self._wait_flowing()  # a silent cut: connect onward at the heal
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

    async def _pump(
        self, source: trio.SocketStream, sink: trio.SocketStream, done: trio.CancelScope
    ) -> None:
        """Copy until either side ends; then the whole connection goes. During a silent
        cut what was read waits here (and the kernel's buffers behind it) until the heal."""
        try:
            while data := await source.receive_some(65536):
                await self._wait_flowing()
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        await self._wait_flowing()  # an end of stream, too, arrives only after the heal
        done.cancel()
