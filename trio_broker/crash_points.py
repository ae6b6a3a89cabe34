"""Crash points: the broker process dies at a named step, for crash tests of real brokers.

`TRIO_BROKER_CRASH_AT=name[,name...]` in a broker's environment makes `crash_point(name)`
end the process at once with `os._exit(137)`, as kill -9 would: what was written is in the
page cache, nothing is flushed, checkpointed or closed, and no `finally` runs. The variable
is read once, at import; unset, a crash point costs one test of an empty set.

The points (each named where it is called):

- `txn.after_prepare`: EndTxn wrote PrepareCommit/PrepareAbort, no marker went out;
- `txn.after_first_marker`: one partition has its marker, the others not (one broker);
- `txn.before_complete`: every marker is written, CompleteCommit/CompleteAbort is not.
"""

from __future__ import annotations

import logging
import os

__all__ = ["CRASH_AT", "crash_point"]

logger = logging.getLogger(__name__)

CRASH_AT = frozenset(n for n in os.environ.get("TRIO_BROKER_CRASH_AT", "").split(",") if n)


def crash_point(name: str) -> None:
    if CRASH_AT and name in CRASH_AT:
        logger.critical("crash point %s: the process exits now (TRIO_BROKER_CRASH_AT)", name)
        os._exit(137)
