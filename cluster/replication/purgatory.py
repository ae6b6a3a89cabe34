"""The purgatory: requests that wait (a fetch for min_bytes, a produce for the ISR) without
holding a handler task.

A handler that cannot answer yet parks a `DelayedOperation` here, watched under the keys
that can complete it (topic-partitions), and returns at once. Appends call `wake(key)`;
each woken operation re-checks `try_complete()` and either answers or waits again. When
its deadline passes it answers anyway. Answers go to the request's processor through
`Request.respond`, like any other response.

As in Kafka's DelayedOperationPurgatory, a parked operation costs no task of its own: two
long-lived tasks serve them all. The completer takes woken operations from a channel and
answers those that can complete; the reaper answers what has expired. It sleeps until
the earliest deadline in a heap, where answered operations stay until they reach its
head: a park moves its wake sooner, nothing moves it later (a trio deadline change costs
about as much as a small fetch's encoding, and a tailing consumer's fetch would make
two). When it wakes at an answered operation's deadline it drops the answered ones at
the head and sleeps until the first still waiting: about once per max wait, not once per
answer. What a Produce or Fetch handler wakes (its append, its follower's progress) does
not go through the completer: that handler task answers it once it has answered its own
request, as Kafka's request handlers run their action queue (`server/requests.py`). A
tailing consumer parks a fetch for every record produced, so a task, a cancel scope and
an event per fetch would be a large part of what a small fetch costs.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any

import attrs
import trio

from trio_broker.server.requests import action_queue

logger = logging.getLogger(__name__)

__all__ = ["DelayedOperation", "Purgatory"]


@attrs.define(eq=False)
class DelayedOperation:
    keys: tuple[Hashable, ...]
    deadline: float  # trio clock
    # Called on every wake; True when it can answer now.
    try_complete: Callable[[], bool]
    # Answers the request (whether completed or expired).
    complete: Callable[[], Awaitable[None]]
    done: bool = False


@attrs.define
class Purgatory:
    name: str
    _watchers: dict[Hashable, set[DelayedOperation]] = attrs.Factory(dict)
    _expiry: list[tuple[float, int, DelayedOperation]] = attrs.Factory(list)
    _seq: itertools.count = attrs.Factory(itertools.count)
    _waiting: int = 0  # parked and not yet answered
    _running: bool = False
    _reaper_scope: trio.CancelScope | None = None
    _reaper_deadline: float = math.inf  # the reaper scope's deadline, as last set
    _woken_send: trio.MemorySendChannel | None = None
    _expiring_all: bool = False  # shutting down: every operation is due now

    @property
    def delayed(self) -> int:
        return self._waiting

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # Unbounded: wake() is called from appends, which must never block on it; what is
        # queued is bounded by the operations parked.
        send, receive = trio.open_memory_channel[DelayedOperation](math.inf)
        self._woken_send = send
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._complete_woken, receive)
            nursery.start_soon(self._reap)
            self._running = True
            task_status.started()

    def park(self, op: DelayedOperation) -> None:
        if not self._running:
            raise RuntimeError(f"purgatory {self.name} is not running")
        self._waiting += 1
        self._watch(op)
        deadline = op.deadline
        if self._expiring_all:
            deadline = min(deadline, trio.current_time())
        heapq.heappush(self._expiry, (deadline, next(self._seq), op))
        if deadline < self._reaper_deadline and self._reaper_scope is not None:
            # The reaper must wake sooner. A later deadline is left to it: when it wakes
            # at an answered operation's, it sleeps on until the first one still waiting.
            self._reaper_scope.deadline = self._reaper_deadline = deadline
        if len(self._expiry) > 2 * self._waiting + 1024:
            # Answered operations linger in the heap until their deadline; with long
            # waits and many answers, drop them now.
            self._expiry = [entry for entry in self._expiry if not entry[2].done]
            heapq.heapify(self._expiry)

    def expire_all(self) -> None:
        """The broker is shutting down: answer every parked operation now, and any parked
        from here on at once, as their deadlines would (a consumer's fetch with what it
        has), rather than hold the shutdown for up to their max_wait_ms. Kafka closes
        such requests' connections unanswered."""
        self._expiring_all = True
        now = trio.current_time()
        self._expiry = [(min(d, now), seq, op) for d, seq, op in self._expiry if not op.done]
        heapq.heapify(self._expiry)
        if self._reaper_scope is not None:
            self._reaper_scope.deadline = self._reaper_deadline = now

    def wake(self, keys: Iterable[Hashable]) -> None:
        # In a Produce or Fetch handler, its task answers them once it has answered its own
        # request (server/requests.py: Kafka's action queue); elsewhere, the completer.
        watchers = self._watchers
        if not watchers:
            return  # nothing parked (an append with no fetch waiting on it)
        actions = action_queue()
        for key in keys:
            ops = watchers.pop(key, None)
            if ops:
                if actions is not None:
                    complete = self._complete_one
                    actions.extend((complete, op) for op in ops)
                else:
                    for op in ops:
                        self._woken_send.send_nowait(op)

    def _watch(self, op: DelayedOperation) -> None:
        for key in op.keys:
            self._watchers.setdefault(key, set()).add(op)

    def _unwatch(self, op: DelayedOperation) -> None:
        for key in op.keys:
            ops = self._watchers.get(key)
            if ops is not None:
                ops.discard(op)
                if not ops:
                    del self._watchers[key]

    async def _complete_woken(self, woken: trio.MemoryReceiveChannel[DelayedOperation]) -> None:
        async for op in woken:
            await self._complete_one(op)

    async def _complete_one(self, op: DelayedOperation) -> None:
        """A woken operation: answer it if it can complete now, else watch it again."""
        if op.done:
            return  # woken under two keys, or expired meanwhile
        try:
            ready = op.try_complete()
        except Exception:
            logger.exception("delayed operation in %s failed its check", self.name)
            ready = True  # answer it (as expired) rather than leave it waiting
        if ready:
            await self._answer(op)
        else:
            self._watch(op)

    async def _reap(self) -> None:
        while True:
            now = trio.current_time()
            # Answered operations off the head too, so that the sleep below lasts until
            # an operation still waiting is due.
            while self._expiry and (self._expiry[0][0] <= now or self._expiry[0][2].done):
                _, _, op = heapq.heappop(self._expiry)
                if not op.done:
                    await self._answer(op)
            expiry = self._expiry
            deadline = expiry[0][0] if expiry else math.inf
            with trio.CancelScope(deadline=deadline) as scope:
                self._reaper_scope = scope
                self._reaper_deadline = deadline
                await trio.sleep_forever()
            self._reaper_scope = None

    async def _answer(self, op: DelayedOperation) -> None:
        op.done = True
        self._waiting -= 1
        self._unwatch(op)
        complete = op.complete
        # An answered operation may stay in the expiry heap until its deadline: it must
        # not keep its request (a produce's frame is a megabyte) alive that long.
        op.try_complete = op.complete = _answered
        try:
            await complete()
        except Exception:
            logger.exception("delayed operation in %s failed to complete", self.name)


def _answered() -> Any:
    raise AssertionError("an answered delayed operation was run again")
