"""Timer: a restartable deadline on trio's clock, for the group coordinator's timeouts.

Session timeouts, rebalance timeouts and the initial rebalance delay are each one `Timer`:
a task in the coordinator's nursery sleeping in a cancel scope whose deadline a heartbeat
or a joining member moves. Firing calls a plain function on the Trio thread, so the
coordinator's state changes stay synchronous.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

__all__ = ["Timer"]


class Timer:
    """A restartable deadline that calls `callback()` once when it passes, unless cancelled.

    `reset` only records the new deadline when it is later than the armed one: every
    heartbeat and offset commit pushes a session deadline back, and moving a trio cancel
    scope's deadline costs a heap push each time. When the armed deadline passes early, the
    task sleeps again until the recorded one, so the callback still runs exactly then.
    """

    def __init__(self, nursery: trio.Nursery, delay_ms: float, callback: Callable[[], None]):
        self.deadline = trio.current_time() + delay_ms / 1000
        self.scope = trio.CancelScope(deadline=self.deadline)
        self._cancelled = False
        nursery.start_soon(self._run, callback)

    async def _run(self, callback: Callable[[], None]) -> None:
        while True:
            with self.scope:
                await trio.sleep_forever()
            if self._cancelled:
                return
            if trio.current_time() >= self.deadline:
                break
            self.scope = trio.CancelScope(deadline=self.deadline)
        callback()

    def reset(self, delay_ms: float) -> None:
        self.deadline = deadline = trio.current_time() + delay_ms / 1000
        if deadline < self.scope.deadline:
            self.scope.deadline = deadline

    def cancel(self) -> None:
        self._cancelled = True
        self.scope.cancel()
