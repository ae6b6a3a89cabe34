"""benchmarks/bench_replication.py in smoke mode completes and prints its table (no
assertion on speed: the machine is shared)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trio_broker.testing import ZOOKEEPER_MISSING, zookeeper_classpath

ROOT = Path(__file__).resolve().parents[2]


def test_replication_benchmark_smoke():
    if zookeeper_classpath() is None:
        pytest.skip(ZOOKEEPER_MISSING)
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_replication.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["acks=1", "RF1", "acks=all", "RF3"]
    assert lines[1].startswith("MB/s")
    # Each broker's CPU per GB with the kernel's share; both phases on recycled page cache.
    assert any(line.startswith("broker 3 system s/GB") for line in lines)
    assert "page cache before each phase: warmed" in lines
    sendfile = [line for line in lines if line.startswith("broker 1 sendfile to followers")]
    # Two followers copied the leader's 5 MB.
    assert sendfile and float(sendfile[0].split()[7]) >= 10.0
