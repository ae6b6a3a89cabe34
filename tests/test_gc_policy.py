"""The broker process's collector policy (trio_broker/gc_policy.py): after a long full
collection its survivors are frozen, and what is made later is still collected."""

from __future__ import annotations

import gc
import weakref

import trio

from trio_broker.gc_policy import FreezeAfterLongCollections


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> _Node:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return a


async def test_a_long_full_collection_freezes_what_it_kept_and_later_garbage_is_collected():
    gc.collect()
    frozen_before = gc.get_freeze_count()
    # Any full collection counts as long here (0 s).
    freezer = FreezeAfterLongCollections(trio.lowlevel.current_trio_token(), long_s=0.0)
    freezer.install()
    try:
        kept = [_cycle() for _ in range(10_000)]  # long-lived state: 20,000 tracked objects
        gc.collect()
        await trio.sleep(0)  # the freeze runs on the event loop, after the collection
        await trio.sleep(0)
        assert freezer.freezes == 1
        assert gc.get_freeze_count() - frozen_before >= 20_000

        # A cycle made after the freeze and dropped is still found by the collector.
        later = _cycle()
        gone = weakref.ref(later)
        del later
        gc.collect(0)
        assert gone() is None
        # Frozen objects are still freed by reference counting once dropped.
        first = weakref.ref(kept[0].other)
        kept[0].other.other = None
        kept[0].other = None
        assert first() is None
    finally:
        freezer.uninstall()
        gc.unfreeze()
        del kept
        gc.collect()
    assert freezer not in gc.callbacks
