"""The request handler tasks (Kafka's KafkaRequestHandlerPool), resizable while serving.

`num.io.threads` is one of Kafka's dynamic broker configs: `resize(n)` starts more handler
tasks in the pool's nursery, or stops some. A stop is a sentinel sent through the request
channel itself: the task that receives it ends if the pool is still above its size (and
ignores it otherwise), so no request is ever taken and dropped, a task handling a request
finishes it first, and the per-request path costs one identity test (a cancel scope
around each receive would cost microseconds per request). Stops queue behind the requests
already waiting. Each task receives from its own clone of the request channel.

With `detach` (a cluster's brokers), the requests it picks are answered in tasks of their
own instead (`_detached`): they may wait on ZooKeeper, and a ZooKeeper outage must not
take every handler task away from produce and fetch.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any

import trio

from trio_broker.server.requests import AnswerBatch, AnswerNow, Dispatch, Request, handle_one

logger = logging.getLogger(__name__)

__all__ = ["HandlerPool"]

# What resize() sends a handler task to stop it (never a Request).
_STOP: Any = object()
# Requests a handler task takes from the channel in a row before it passes the scheduler.
_DRAIN = 8


class HandlerPool:
    def __init__(
        self,
        requests: trio.MemoryReceiveChannel[Request],
        dispatch: Dispatch,
        new_sender: Callable[[], trio.MemorySendChannel[Request]] | None = None,
        detach: Callable[[Request], bool] | None = None,
        answer_now: AnswerNow | None = None,
        answer_batch: AnswerBatch | None = None,
    ) -> None:
        self._requests = requests
        self._dispatch = dispatch
        # The answers made without a wait (server/requests.py NOT_NOW), or None.
        self._answer_now = answer_now
        # The answers to a whole batch of produces made without a wait, or None.
        self._answer_batch = answer_batch
        # Which requests are answered in a task of their own (see _detached), or None.
        self._detach = detach
        self._side: trio.Nursery | None = None
        # A fresh clone of the request channel's send side (to send stops), or None.
        self._new_sender = new_sender
        self._nursery: trio.Nursery | None = None
        self._running: set[int] = set()
        self._indexes = itertools.count()
        self.size = 0

    @property
    def running(self) -> int:
        return len(self._running)

    async def run(
        self, size: int, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve with `size` tasks until the request channel closes."""
        async with self._requests, trio.open_nursery() as side:
            self._side = side
            try:
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    self.resize(size)
                    task_status.started()
            finally:
                # Every handler has ended (the request channel closed): requests still
                # waiting in their own tasks get no answer, as at any stop.
                side.cancel_scope.cancel()
        self._nursery = self._side = None

    def resize(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"at least one handler task is needed, not {size}")
        old = self.size
        self.size = size
        if self._nursery is None:  # not started yet, or stopped
            return
        while len(self._running) < size:
            index = next(self._indexes)
            self._running.add(index)
            self._nursery.start_soon(self._handler, index, self._requests.clone())
        excess = len(self._running) - size
        if excess > 0 and self._new_sender is not None:
            self._nursery.start_soon(self._send_stops, excess)
        if old != size:
            logger.info("request handler tasks: %d -> %d", old, size)

    async def _send_stops(self, count: int) -> None:
        try:
            send = self._new_sender()  # type: ignore[misc]
        except trio.ClosedResourceError:
            return  # the broker is stopping: the tasks end with the channel
        async with send:
            for _ in range(count):
                try:
                    await send.send(_STOP)
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    return

    async def _handler(self, index: int, requests: trio.MemoryReceiveChannel[Request]) -> None:
        dispatch, answer_now, answer_batch = self._dispatch, self._answer_now, self._answer_batch
        try:
            async with requests:
                async for request in requests:
                    # A request waiting already is taken without the receive()'s scheduler
                    # pass, up to _DRAIN in a row (a handler that never passed the
                    # scheduler would hold the processors' tasks back).
                    for i in range(_DRAIN + 1):
                        if i:
                            try:
                                request = requests.receive_nowait()
                            except (trio.WouldBlock, trio.EndOfChannel):
                                break
                        if request is _STOP:
                            if len(self._running) > self.size:
                                self._running.discard(index)
                                return
                        elif (
                            self._detach is not None
                            and self._side is not None
                            and self._detach(request)
                        ):
                            self._side.start_soon(self._detached, index, request)
                        else:
                            await handle_one(index, request, dispatch, answer_now, answer_batch)
                    del request  # not held while waiting: its frame's buffer is reused
        finally:
            self._running.discard(index)

    async def _detached(self, index: int, request: Request) -> None:
        """A request that may wait a long time for something outside the broker (in a
        cluster, ZooKeeper: topic and config changes, ACLs, the controller's requests,
        auto-creation) runs in its own task, so that it never holds a handler task that
        produces and fetches need. Its connection still waits for its answer before
        reading on, and closing the connection cancels it."""
        connection = request.connection
        with trio.CancelScope() as scope:
            connection.side_scopes.append(scope)
            try:
                await handle_one(
                    index, request, self._dispatch, self._answer_now, self._answer_batch
                )
            finally:
                connection.side_scopes.remove(scope)
