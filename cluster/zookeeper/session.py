"""A ZooKeeper session (kazoo) bridged into Trio.

The bridge: kazoo's asynchronous API and the Trio token, no worker threads. Every call
(`get`, `create`, `set`, a transaction, ...) starts kazoo's `*_async` form, which only
queues the request for kazoo's connection thread, and links a callback to its result.
kazoo runs that callback on its own callback thread, where it does one thing:
`TrioToken.run_sync_soon(event.set)`. The Trio task waits on the event, then takes the
value (or kazoo's exception) on the event loop. Watches and session-state changes come in
the same way: kazoo calls our function on its thread, and the function only hands the
news to the loop with `run_sync_soon`.

Why not `trio.to_thread.run_sync(client.get, ...)`, the simpler bridge: it holds a worker
thread for every outstanding call (a controller reacting to a dead broker issues hundreds
at once, and Trio's default limiter is 40 threads), and a cancelled Trio task could not
take back a thread blocked inside kazoo. Here a cancelled call just stops waiting; kazoo's
late answer sets an event nobody waits on. Only `stop()`, which joins kazoo's threads,
runs in a worker thread.

Watches are ZooKeeper's, one-shot. `watch_children` and `watch_data` re-read the znode
after each firing and send the fresh value into a memory channel: a consumer that is slow
sees the latest state on its next receive, not a queue of stale ones, and the channel
stays bounded without dropping anything that matters. kazoo fires every armed watch (with
an event of type NONE) when the connection drops; the re-read then waits for the
connection to come back.

Sessions: kazoo reconnects by itself, and after a session expiry it opens a new session.
What belongs to one session (ephemeral znodes: the broker's registration, /controller)
is redone by `each_session(fn)`, which runs `fn(session_id)` once per session in a scope
cancelled when that session ends.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio

from trio_broker.errors import FatalBrokerError

logger = logging.getLogger(__name__)

__all__ = ["ZkConnect", "ZooKeeperSession", "ZooKeeperTimeout"]

# Requests a pipelined call (`get_many`, `transactions`) has on the wire at once: the
# answers of one wave are awaited before the next is sent, which bounds what is queued
# in kazoo and in ZooKeeper's request processors.
_PIPELINE = 1000


class ZooKeeperTimeout(FatalBrokerError):
    """No connection to ZooKeeper within zookeeper.connection.timeout.ms."""


@attrs.frozen(kw_only=True)
class ZkConnect:
    """`zookeeper.connect`: "host:port[,host:port...][/chroot]", as Kafka reads it."""

    hosts: str
    chroot: str  # "" or "/a/b", without a trailing slash

    @classmethod
    def parse(cls, text: str) -> ZkConnect:
        text = text.strip()
        slash = text.find("/")
        hosts, chroot = (text, "") if slash < 0 else (text[:slash], text[slash:].rstrip("/"))
        if not hosts:
            raise ValueError(f"no ZooKeeper host in zookeeper.connect={text!r}")
        return cls(hosts=hosts, chroot=chroot)


# The longest a connection's handshake may go unanswered before the next attempt.
_HANDSHAKE_S = 2.0


class _HostsForHandshake(list):
    """kazoo's (host, port) list, whose length is the divisor that bounds a handshake at
    `_HANDSHAKE_S`. kazoo (as ZooKeeper's Java client) waits for the answer to its
    ConnectRequest a session timeout divided by `len(hosts)`, and a ZooKeeper still
    starting accepts connections it does not answer: a broker that connected then waited
    a whole session timeout after ZooKeeper was back, its session unused (and a dead
    controller's voters, cluster/zookeeper/controller_votes.py, one short). Requests'
    socket writes share the bound (one blocked that long drops the connection; the
    session carries on on the next). Iterating it gives the hosts as they are, so that
    kazoo's reconnections (a backoff after trying each host once) do not change; listing
    each host several times instead made kazoo reconnect at once after every drop."""

    def __init__(self, hosts: list[Any], session_timeout_ms: int) -> None:
        super().__init__(hosts)
        self.divisor = max(len(hosts), math.ceil(session_timeout_ms / 1000 / _HANDSHAKE_S))

    def __len__(self) -> int:
        return self.divisor


@attrs.define
class _Call:
    """One kazoo async result, awaited from Trio."""

    token: trio.lowlevel.TrioToken
    done: trio.Event = attrs.Factory(trio.Event)

    def on_done(self, _result: Any) -> None:  # on kazoo's callback thread
        try:
            self.token.run_sync_soon(self.done.set)
        except trio.RunFinishedError:
            pass


@attrs.define
class _Calls:
    """Many kazoo async results, awaited from Trio together: the event is set (on the
    event loop) once the last of `count` has completed."""

    token: trio.lowlevel.TrioToken
    count: int
    done: trio.Event = attrs.Factory(trio.Event)
    lock: threading.Lock = attrs.Factory(threading.Lock)

    def on_done(self, _result: Any) -> None:  # on kazoo's callback thread
        with self.lock:
            self.count -= 1
            last = self.count == 0
        if last:
            try:
                self.token.run_sync_soon(self.done.set)
            except trio.RunFinishedError:
                pass


class ZooKeeperSession:
    """One kazoo client; every path is relative to the chroot of `zookeeper.connect`.

    `await open()` connects (within `connection_timeout_ms`) and creates the chroot if it
    is missing, as Kafka does; `await close()` ends the session, so its ephemeral znodes
    go at once rather than after the session timeout.
    """

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = 18000,
        connection_timeout_ms: int | None = None,
    ) -> None:
        self.connect = ZkConnect.parse(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self.session_id: int | None = None  # of the live session, None between sessions
        self.connected = False
        # trio.current_time() when the connection was lost (None while connected): a broker
        # cut off long enough presumes its session expired (cluster/replication/).
        self.disconnected_since: float | None = None
        # time.perf_counter() when the latest request that ZooKeeper answered was sent
        # (None before the first): ZooKeeper heard from this session no earlier, so it
        # cannot expire it before last_heard + the session timeout. kazoo's own pings are
        # not seen here; `keep_heard` sends a request of its own while nothing else does.
        # perf_counter, not Trio's clock: `keep_heard`'s thread sets it too.
        self.last_heard: float | None = None
        self._heard_lock = threading.Lock()
        self._state_changed = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._client: Any = None
        self._closing = False

    # --- life -------------------------------------------------------------------------------

    async def open(self) -> None:
        from kazoo.client import KazooClient
        from kazoo.retry import KazooRetry

        self._token = trio.lowlevel.current_trio_token()
        self._client = KazooClient(
            hosts=self.connect.hosts,
            timeout=self.session_timeout_ms / 1000,  # kazoo's "timeout" is the session's
            # Reconnect quickly and forever: a broker waits for ZooKeeper to come back.
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1),
            logger=logging.getLogger("kazoo.client"),
        )
        self._client.hosts = _HostsForHandshake(self._client.hosts, self.session_timeout_ms)
        self._client.add_listener(self._on_state)
        self._client.start_async()
        with trio.move_on_after(self.connection_timeout_ms / 1000):
            await self.wait_connected()
        if not self.connected:
            await self.close()
            raise ZooKeeperTimeout(
                f"timed out waiting for a connection to ZooKeeper at {self.connect.hosts} "
                f"(zookeeper.connection.timeout.ms={self.connection_timeout_ms})"
            )
        if self.connect.chroot:
            await self._call(self._client.ensure_path_async, self.connect.chroot)
        logger.info(
            "connected to ZooKeeper %s%s, session 0x%x",
            self.connect.hosts,
            self.connect.chroot,
            self.session_id or 0,
        )

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        self._closing = True
        with trio.CancelScope(shield=True):
            # stop() sends the close-session request and joins kazoo's threads.
            with trio.move_on_after(max(self.session_timeout_ms / 1000, 5)):
                await trio.to_thread.run_sync(client.stop, abandon_on_cancel=True)
            client.close()
        self.connected = False
        self.session_id = None

    # --- session state ----------------------------------------------------------------------

    def _on_state(self, state: Any) -> None:  # on kazoo's connection thread
        client_id = self._client.client_id if state == "CONNECTED" and self._client else None
        session_id = client_id[0] if client_id else None
        token = self._token
        if token is None:
            return
        try:
            token.run_sync_soon(self._set_state, str(state), session_id, time.perf_counter())
        except trio.RunFinishedError:
            pass

    def _set_state(self, state: str, session_id: int | None, at: float | None = None) -> None:
        # When kazoo saw the change (`at`, perf_counter on its thread), in Trio's clock: a
        # busy event loop runs this later, and a leader cut off from ZooKeeper times its
        # resignation from the moment the connection was found lost.
        now = trio.current_time()
        seen = now if at is None else now - max(0.0, time.perf_counter() - at)
        if state == "CONNECTED":
            if session_id != self.session_id and self.session_id is not None:
                logger.warning(
                    "ZooKeeper session 0x%x replaced by 0x%x", self.session_id, session_id
                )
            self.connected, self.session_id = True, session_id
            self.disconnected_since = None
            self._heard(time.perf_counter() if at is None else at)
        elif state == "SUSPENDED":
            logger.warning(
                "ZooKeeper connection lost; session 0x%x may live on", self.session_id or 0
            )
            self.connected = False
            if self.disconnected_since is None:
                self.disconnected_since = seen
        else:  # LOST: the session expired or was closed; its ephemeral znodes are gone
            if self.session_id is not None:
                level = logging.INFO if self._closing else logging.WARNING
                logger.log(level, "ZooKeeper session 0x%x ended", self.session_id)
            self.connected, self.session_id = False, None
            if self.disconnected_since is None:
                self.disconnected_since = seen
        changed, self._state_changed = self._state_changed, trio.Event()
        changed.set()

    def _heard(self, sent: float) -> None:
        with self._heard_lock:  # the event loop's calls and keep_heard's thread
            if self.last_heard is None or sent > self.last_heard:
                self.last_heard = sent

    def silent_for(self) -> float:
        """Seconds since the latest request ZooKeeper answered was sent (0 before the
        first): a lower bound on how long ZooKeeper has not heard from this session,
        whatever kazoo's state says. kazoo finds a connection lost only when its select
        times out with a ping unanswered, and every request it sends restarts that
        timeout: under a one-way loss (its packets dropped, ZooKeeper's arriving) a broker
        that keeps asking ZooKeeper things can stay "connected" past its expiry."""
        if self.last_heard is None:
            return 0.0
        return max(0.0, time.perf_counter() - self.last_heard)

    async def keep_heard(self) -> None:
        """Until cancelled: one small read (an `exists` of the chroot) a sixth of a
        session timeout after the last one was answered, so that `last_heard` is never
        older than that while ZooKeeper answers. One at a time: an unanswered read is
        left to kazoo, which then finds the connection lost as it would have (a request
        every period would restart its ping timeout for ever).

        From a thread of its own, as kazoo's pings are: a busy event loop (a LeaderAndIsr
        of thousands of partitions, a loaded machine) neither sends these reads nor
        takes their answers while it is busy, and a loop-driven count made every stall
        of half a session look like ZooKeeper's silence; with the followers' fetches
        unanswered too (the same stall), the broker presumed itself deposed and ended a
        live session, and the controller's failover of its partitions stalled the next
        broker (10,000 partitions at load 15-25: 2-9 session restarts per broker a run)."""
        stop = threading.Event()
        try:
            await trio.to_thread.run_sync(
                self._keep_heard_in_thread,
                stop,
                abandon_on_cancel=True,
                limiter=trio.CapacityLimiter(1),  # not one of the loop's worker tokens
            )
        finally:
            stop.set()

    def _keep_heard_in_thread(self, stop: threading.Event) -> None:
        period = self.session_timeout_ms / 6000
        while not stop.is_set():
            client = self._client
            if client is None or not self.connected:
                stop.wait(0.1)
                continue
            sent = time.perf_counter()
            try:
                client.exists_async(self._path("/")).get(timeout=self.session_timeout_ms / 1000)
            except Exception:  # noqa: BLE001 - unanswered, connection lost or session ended
                pass
            else:
                self._heard(sent)
            stop.wait(period)

    async def renew(self) -> None:
        """End this session and open a new one (its ephemeral znodes go at once): what a
        broker does when it acted as if its session had expired and then finds it alive,
        so that the controller treats it as the bounced broker it behaved as."""
        client = self._client
        if client is None:
            return
        logger.warning("ending ZooKeeper session 0x%x to start a new one", self.session_id or 0)
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(client.stop, abandon_on_cancel=True)
            client.start_async()

    async def wait_connected(self) -> int:
        """Wait for a live session; returns its id."""
        while not self.connected or self.session_id is None:
            await self._state_changed.wait()
        return self.session_id

    async def each_session(self, fn: Callable[[int], Awaitable[None]]) -> None:
        """Run `fn(session_id)` for every session, the current one first, each in a scope
        cancelled when that session ends; `fn` may also return early. Runs until cancelled."""
        while True:
            session_id = await self.wait_connected()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(fn, session_id)
                while self.session_id == session_id:
                    await self._state_changed.wait()
                nursery.cancel_scope.cancel()

    # --- calls ------------------------------------------------------------------------------

    def _waker(self, fired: trio.Event) -> Callable[[Any], None]:
        """A kazoo watch function that sets `fired` on the event loop."""
        token = self._token
        assert token is not None

        def watch(_event: Any) -> None:  # on kazoo's callback thread
            try:
                token.run_sync_soon(fired.set)
            except trio.RunFinishedError:
                pass

        return watch

    async def _call(self, start: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Start a kazoo async call and wait for its result on the event loop.

        A lost connection or an expired session is retried once a session is live again
        (kazoo opens a new one after an expiry): a watch loop simply carries on in the new
        session. Work that belongs to one session runs under `each_session`, which cancels
        it when its session ends; whatever a retry there did in the next session (an
        ephemeral create) is found again by that session's run, which checks the znode's
        owner. Other errors (NoNodeError, NodeExistsError, BadVersionError, ...) are the
        caller's."""
        from kazoo.exceptions import ConnectionLoss, SessionExpiredError

        assert self._token is not None
        while True:
            call = _Call(self._token)
            sent = time.perf_counter()
            result = start(*args, **kwargs)
            result.rawlink(call.on_done)
            await call.done.wait()
            try:
                value = result.get_nowait()
            except (ConnectionLoss, SessionExpiredError):
                if self.connected:
                    # kazoo knew first; the state change is on its way to the loop.
                    await trio.sleep(0.01)
                await self.wait_connected()
                continue
            except Exception:
                self._heard(sent)  # an answer all the same (NoNodeError, ...)
                raise
            self._heard(sent)
            return value

    def _path(self, path: str) -> str:
        return (self.connect.chroot + path) if path != "/" else (self.connect.chroot or "/")

    async def get(self, path: str, *, watch: trio.Event | None = None) -> tuple[bytes, Any]:
        """(data, ZnodeStat); raises kazoo's NoNodeError. `watch` is set on the next change."""
        w = self._waker(watch) if watch is not None else None
        return await self._call(self._client.get_async, self._path(path), w)

    async def get_children(self, path: str, *, watch: trio.Event | None = None) -> list[str]:
        w = self._waker(watch) if watch is not None else None
        return await self._call(self._client.get_children_async, self._path(path), w)

    async def exists(self, path: str, *, watch: trio.Event | None = None) -> Any:
        """The ZnodeStat, or None; `watch` is set when the znode is created, changed or deleted."""
        w = self._waker(watch) if watch is not None else None
        return await self._call(self._client.exists_async, self._path(path), w)

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        makepath: bool = False,
        sequence: bool = False,
    ) -> str:
        """Create `path`; with `sequence`, ZooKeeper appends a 10-digit counter to the
        name (the returned path is the one made)."""
        return await self._call(
            self._client.create_async,
            self._path(path),
            data,
            ephemeral=ephemeral,
            sequence=sequence,
            makepath=makepath,
        )

    async def set(self, path: str, data: bytes, *, version: int = -1) -> Any:
        """Write `data`, only if the znode is at `version` (-1: any); raises BadVersionError."""
        return await self._call(self._client.set_async, self._path(path), data, version)

    async def delete(self, path: str, *, version: int = -1) -> None:
        await self._call(self._client.delete_async, self._path(path), version)

    async def ensure_path(self, path: str) -> None:
        await self._call(self._client.ensure_path_async, self._path(path))

    async def create_if_missing(self, path: str, data: bytes = b"") -> bool:
        """Kafka's createRecursive-if-absent: True when this call created it."""
        from kazoo.exceptions import NodeExistsError

        try:
            await self.create(path, data, makepath=True)
        except NodeExistsError:
            return False
        return True

    async def transaction(
        self, ops: list[tuple[str, tuple[Any, ...], dict[str, Any]]]
    ) -> list[Any]:
        """A ZooKeeper multi: ("create"|"set_data"|"delete"|"check", (path, ...), kwargs) each,
        all or nothing. Returns one result per op: a value, or an exception instance (the
        failing op's error; RolledBackError for the others)."""
        tx = self._client.transaction()
        for name, args, kwargs in ops:
            getattr(tx, name)(self._path(args[0]), *args[1:], **kwargs)
        return await self._call(tx.commit_async)

    async def get_many(self, paths: Sequence[str]) -> list[Any]:
        """Read many znodes with their requests pipelined on the one connection (as Kafka's
        ZooKeeperClient sends a batch of requests before awaiting the answers): N reads
        cost a few round trips, not N. One result per path, in order: (data, stat), or
        kazoo's exception instance (NoNodeError, ...)."""
        get = self._client.get_async
        return await self._pipelined([(get, (self._path(p),)) for p in paths])

    async def delete_many(self, paths: Sequence[str]) -> list[Any]:
        """Delete many znodes, pipelined; one result per path: True, or the exception."""
        delete = self._client.delete_async
        return await self._pipelined([(delete, (self._path(p),)) for p in paths])

    async def transactions(
        self, batches: Sequence[list[tuple[str, tuple[Any, ...], dict[str, Any]]]]
    ) -> list[list[Any]]:
        """Many ZooKeeper multis (each as `transaction` takes it), pipelined and applied
        in order; one result list per multi, as `transaction` returns it."""
        calls = []
        for ops in batches:
            tx = self._client.transaction()
            for name, args, kwargs in ops:
                getattr(tx, name)(self._path(args[0]), *args[1:], **kwargs)
            calls.append((tx.commit_async, ()))
        results = await self._pipelined(calls)
        for result in results:
            if isinstance(result, Exception):
                raise result  # the multi itself failed (not one of its ops)
        return results

    async def _pipelined(self, calls: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]]) -> list:
        """Start kazoo async calls `_PIPELINE` at a time and await each wave's answers;
        calls lost with the connection (or session) are sent again once a session is
        live, as `_call` does. One result per call: its value or its exception."""
        from kazoo.exceptions import ConnectionLoss, SessionExpiredError

        assert self._token is not None
        results: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        while todo:
            lost: list[int] = []
            for first in range(0, len(todo), _PIPELINE):
                wave = todo[first : first + _PIPELINE]
                waiter = _Calls(self._token, len(wave))
                started = []
                for i in wave:
                    start, args = calls[i]
                    result = start(*args)
                    result.rawlink(waiter.on_done)
                    started.append((i, result))
                await waiter.done.wait()
                for i, result in started:
                    try:
                        results[i] = result.get_nowait()
                    except (ConnectionLoss, SessionExpiredError):
                        lost.append(i)
                    except Exception as exc:
                        results[i] = exc
            if lost:
                if self.connected:
                    await trio.sleep(0.01)
                await self.wait_connected()
            todo = lost
        return results

    # --- watches into channels --------------------------------------------------------------

    async def watch_children(self, path: str, send: trio.MemorySendChannel[list[str]]) -> None:
        """Send `path`'s children (sorted) now and after every change, until cancelled.
        `path` must exist (Kafka's parents are made at start)."""
        async with send:
            while True:
                fired = trio.Event()
                children = await self.get_children(path, watch=fired)
                await send.send(sorted(children))
                await fired.wait()
                await self.wait_connected()

    async def watch_data(
        self, path: str, send: trio.MemorySendChannel[tuple[bytes, Any] | None]
    ) -> None:
        """Send `path`'s (data, stat), or None while it does not exist, now and after every
        change (creation, write, deletion), until cancelled."""
        from kazoo.exceptions import NoNodeError

        async with send:
            while True:
                fired = trio.Event()
                value: tuple[bytes, Any] | None = None
                # exists() arms a watch that fires on creation as well as change and deletion.
                if await self.exists(path, watch=fired) is not None:
                    try:
                        value = await self.get(path)
                    except NoNodeError:
                        pass  # deleted between the two reads; the watch has fired
                await send.send(value)
                await fired.wait()
                await self.wait_connected()
