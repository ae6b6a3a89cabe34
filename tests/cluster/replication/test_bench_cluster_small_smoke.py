"""benchmarks/bench_cluster_small.py in smoke mode completes and prints its table (no
assertion on speed: the machine is shared)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trio_broker.testing import ZOOKEEPER_MISSING, zookeeper_classpath

ROOT = Path(__file__).resolve().parents[3]


def test_cluster_small_requests_benchmark_smoke():
    if zookeeper_classpath() is None:
        pytest.skip(ZOOKEEPER_MISSING)
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_cluster_small.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "500 single-record requests per phase, 1 round(s), one connection"
    rows = {line[:16].strip(): line[16:].split() for line in lines[2:]}
    assert list(rows) == ["acks=1", "acks=all", "acks=all idem."]
    for name, cells in rows.items():
        rate, _spread, leader, first, second = cells
        assert float(rate.replace(",", "")) > 0, name
        # The leader appended and answered; both followers fetched and appended.
        assert float(leader) > 0 and float(first) > 0 and float(second) > 0, name
