"""The purgatory: requests that wait (a fetch for min_bytes, a produce for the ISR) without
holding a handler task.

A handler that cannot answer yet parks a `DelayedOperation` here, watched under the keys
that can complete it (topic-partitions), and returns at once. Appends call `wake(key)`;
each woken operation re-checks `try_complete()` and either answers or waits again. When
its deadline passes it answers anyway (`on_expire`). Answers go to the request's
processor through `Request.respond`, like any other response.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable

import attrs
import trio

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
    _event: trio.Event = attrs.Factory(trio.Event)


@attrs.define
class Purgatory:
    name: str
    _watchers: dict[Hashable, set[DelayedOperation]] = attrs.Factory(dict)
    _nursery: trio.Nursery | None = None

    @property
    def delayed(self) -> int:
        return len({op for ops in self._watchers.values() for op in ops})

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def park(self, op: DelayedOperation) -> None:
        if self._nursery is None:
            raise RuntimeError(f"purgatory {self.name} is not running")
        self._watch(op)
        self._nursery.start_soon(self._wait, op)

    def wake(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            ops = self._watchers.pop(key, None)
            if ops:
                for op in ops:
                    op._event.set()

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

    async def _wait(self, op: DelayedOperation) -> None:
        try:
            with trio.move_on_at(op.deadline):
                while True:
                    await op._event.wait()
                    if op.try_complete():
                        break
                    op._event = trio.Event()
                    self._watch(op)
        finally:
            self._unwatch(op)
        try:
            await op.complete()
        except Exception:
            logger.exception("delayed operation in %s failed to complete", self.name)
