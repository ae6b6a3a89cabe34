"""The request handler tasks (Kafka's KafkaRequestHandlerPool), resizable while serving.

`num.io.threads` is one of Kafka's dynamic broker configs: `resize(n)` starts more handler
tasks in the pool's nursery, or stops the highest-numbered ones. A task told to stop
while it waits for a request stops at once (its receive is cancelled, so no request is
taken and lost); one handling a request finishes it first. Each task receives from its
own clone of the request channel.
"""

from __future__ import annotations

import logging

import trio

from trio_broker.server.requests import Dispatch, Request, handle_one

logger = logging.getLogger(__name__)

__all__ = ["HandlerPool"]


class HandlerPool:
    def __init__(self, requests: trio.MemoryReceiveChannel[Request], dispatch: Dispatch) -> None:
        self._requests = requests
        self._dispatch = dispatch
        self._nursery: trio.Nursery | None = None
        # index -> the cancel scope of its wait for a request (None while handling one)
        self._waiting: dict[int, trio.CancelScope | None] = {}
        self._running: set[int] = set()
        self.size = 0

    async def run(
        self, size: int, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve with `size` tasks until the request channel closes."""
        async with self._requests, trio.open_nursery() as nursery:
            self._nursery = nursery
            self.resize(size)
            task_status.started()
        self._nursery = None

    def resize(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"at least one handler task is needed, not {size}")
        assert self._nursery is not None, "the pool is not running"
        old = self.size
        self.size = size
        for index in range(size):
            if index not in self._running:
                self._running.add(index)
                self._nursery.start_soon(self._handler, index, self._requests.clone())
        for index, scope in list(self._waiting.items()):
            if index >= size and scope is not None:
                scope.cancel()
        if old != size:
            logger.info("request handler tasks: %d -> %d", old, size)

    async def _handler(self, index: int, requests: trio.MemoryReceiveChannel[Request]) -> None:
        try:
            async with requests:
                while index < self.size:
                    with trio.CancelScope() as scope:
                        self._waiting[index] = scope
                        try:
                            request = await requests.receive()
                        except trio.EndOfChannel:
                            return
                        finally:
                            self._waiting[index] = None
                    if scope.cancelled_caught:
                        continue  # told to stop while idle: the loop test ends it
                    await handle_one(index, request, self._dispatch)
        finally:
            self._waiting.pop(index, None)
            self._running.discard(index)
