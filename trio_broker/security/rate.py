"""The sampled rate behind client quotas (security/client_quotas.py) and replication
quotas (cluster/replication/replication_quota.py): its own module, so that a broker that never
throttles imports nothing more."""

from __future__ import annotations

from collections import deque

__all__ = ["Rate"]


class Rate:
    """Kafka's SampledStat Rate: a sum over fixed windows, divided by the time spanned."""

    __slots__ = ("samples", "window_s", "windows")

    def __init__(self, samples: int, window_s: float) -> None:
        self.samples = samples
        self.window_s = window_s
        self.windows: deque[list[float]] = deque()  # [start, bytes]

    def record(self, value: float, now: float) -> None:
        windows = self.windows
        if not windows or now - windows[-1][0] >= self.window_s:
            windows.append([now, 0.0])
        windows[-1][1] += value
        while windows and now - windows[0][0] >= self.samples * self.window_s:
            windows.popleft()

    def measure(self, now: float) -> tuple[float, float]:
        """(rate per second, seconds it spans)."""
        windows = self.windows
        while windows and now - windows[0][0] >= self.samples * self.window_s:
            windows.popleft()  # obsolete: nothing was recorded for a whole span
        if not windows:
            return 0.0, self.window_s
        elapsed = now - self.windows[0][0]
        elapsed = max(elapsed, self.window_s)
        return sum(w[1] for w in self.windows) / elapsed, elapsed
