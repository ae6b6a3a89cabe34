"""Helpers shared by the log tests (imported by name: tests have no packages)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

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


@contextlib.contextmanager
def small_tmpfs(path, size: str = "4m"):
    """A tmpfs of `size` mounted at `path` (made if missing) for the block; skips the test
    with the reason when mounting is not permitted (not root, or in a container that
    forbids it). Always unmounted afterwards, lazily if a file is still open."""
    import pytest

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill_disk(mount, leave: int) -> Path:
    """A filler file that leaves about `leave` bytes free on `mount`; delete it to free."""
    filler = Path(mount) / "filler"
    st = os.statvfs(mount)
    free = st.f_bavail * st.f_frsize
    with open(filler, "ab") as f:
        f.write(b"\0" * max(free - leave, 0))
    return filler


def free_bytes(mount) -> int:
    st = os.statvfs(mount)
    return st.f_bavail * st.f_frsize
