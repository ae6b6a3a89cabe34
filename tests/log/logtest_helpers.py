"""Helpers shared by the log tests (imported by name: tests have no packages). The disk
helpers (a small tmpfs, filling it) are in tests/disk.py, shared with the cluster tests."""

from __future__ import annotations

from trio_broker.protocol.record_codec import build_batch
from trio_broker.protocol.records import iter_batches


class FakeClock:
    """Wall-clock milliseconds that move only when a test says so."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms


def make_batch(
    count: int = 1,
    *,
    timestamp: int = 1_700_000_000_000,
    value_size: int = 10,
    tag: bytes = b"v",
    **kwargs,
) -> bytes:
    records = [
        (b"k%d" % i, (tag + b"%d-" % i).ljust(value_size, b"x"), [], timestamp + i)
        for i in range(count)
    ]
    return build_batch(records, **kwargs)


def append(log, *batches: bytes, leader_epoch: int = 0, **kwargs):
    buf = bytearray(b"".join(batches))
    headers = [h for _, h in iter_batches(buf)]
    result = log.append_as_leader(buf, headers, leader_epoch=leader_epoch, **kwargs)
    log.high_watermark = log.log_end_offset
    return result
