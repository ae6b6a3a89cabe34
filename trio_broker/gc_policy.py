"""Keeping a large broker's long-lived state out of the cyclic collector's walks.

A broker of thousands of partitions holds millions of objects that live as long as the
process (each partition's log, segments, indexes, replica and metadata state). CPython's
full collection walks every one of them, and a burst of allocation (a failover's
LeaderAndIsr of thousands of partitions, a Metadata of all of them) triggers one: at
3,000 partitions each took 90-270 ms, several per failover, on the path between a
broker's death and its partitions' new leaders.

So after a full collection that took long, what it kept is frozen (`gc.freeze()`): every
object it kept was reachable a moment ago, and reference counting still frees a frozen
object once dropped; later full collections walk only what is newer. What this gives up:
a reference cycle that includes a frozen object and becomes garbage later is never
collected (the broker drops partitions by reference counting: log/manager.py). Only where
the process is the broker's own (`trio-broker serve`, as the start-up freeze in cli.py);
an embedding program decides its own collector policy.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

import trio

logger = logging.getLogger(__name__)

__all__ = ["FreezeAfterLongCollections"]

# A full collection at least this long freezes what it kept. A broker of a few hundred
# partitions never takes this long (a few ms); one of thousands does.
LONG_COLLECTION_S = 0.05


class FreezeAfterLongCollections:
    """A `gc.callbacks` entry: after a long full collection, freeze its survivors on the
    event loop (collections also run in other threads; the freeze is never done inside
    the collector)."""

    def __init__(self, token: trio.lowlevel.TrioToken, long_s: float = LONG_COLLECTION_S):
        self._token = token
        self._long_s = long_s
        self._started = 0.0
        self._pending = False
        self.freezes = 0

    def install(self) -> None:
        gc.callbacks.append(self)

    def uninstall(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        if took < self._long_s or self._pending:
            return
        self._pending = True
        try:
            self._token.run_sync_soon(self._freeze, took)
        except trio.RunFinishedError:
            self._pending = False

    def _freeze(self, took: float) -> None:
        self._pending = False
        before = gc.get_freeze_count()
        gc.freeze()
        self.freezes += 1
        logger.info(
            "a full garbage collection took %.0f ms: the %d objects it kept are frozen"
            " (%d in all), out of later collections' walks",
            took * 1000,
            gc.get_freeze_count() - before,
            gc.get_freeze_count(),
        )
