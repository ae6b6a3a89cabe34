from __future__ import annotations

import pytest
from logtest_helpers import FakeClock

from trio_broker.log.config import LogConfig
from trio_broker.log.loader import load_log


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def open_log(tmp_path, clock):
    """open_log(config=..., **load kwargs) -> a PartitionLog in tmp_path/topic-0."""
    opened = []

    def _open(config: LogConfig | None = None, **kwargs):
        kwargs.setdefault("now_ms", clock)
        log = load_log(tmp_path / "topic-0", "topic", 0, config or LogConfig(), **kwargs)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        if not log.closed:
            log.close_handlers()
