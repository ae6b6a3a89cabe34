"""At most one log line per client address per interval, with a count of those skipped.

A client that loops on a bad frame, or reconnects as fast as it is refused, would
otherwise write a warning per attempt (104k bad frames once wrote 73k lines).
"""

from __future__ import annotations

__all__ = ["LogLimiter"]

_MAX_KEYS = 10_000  # beyond this many addresses, forget the quiet ones


class LogLimiter:
    def __init__(self, interval_s: float = 60.0) -> None:
        self.interval_s = interval_s
        self._last: dict[str, float] = {}  # address -> when its last line was written
        self._skipped: dict[str, int] = {}

    def hit(self, key: str, now: float) -> int | None:
        """An event for `key` at `now`: None to skip its line, else how many were skipped
        since the last line written for it."""
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._skipped[key] = self._skipped.get(key, 0) + 1
            return None
        if len(self._last) >= _MAX_KEYS:
            self._forget(now)
        self._last[key] = now
        return self._skipped.pop(key, 0)

    def _forget(self, now: float) -> None:
        for key, last in list(self._last.items()):
            if now - last >= self.interval_s:
                del self._last[key]
                self._skipped.pop(key, None)
        if len(self._last) >= _MAX_KEYS:
            # All recent: a flood from many addresses; start over rather than grow.
            self._last.clear()
            self._skipped.clear()
