"""benchmarks/bench_nemesis.py in smoke mode (one fault injected once) completes, its
checker passes and it prints its table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from netlab import skip_reason

from trio_broker.testing import ZOOKEEPER_MISSING, zookeeper_classpath

ROOT = Path(__file__).resolve().parents[2]


def test_bench_nemesis_smoke():
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    if zookeeper_classpath() is None:
        pytest.skip(ZOOKEEPER_MISSING)
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_nemesis.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    rows = [x for x in out.stdout.splitlines() if x.startswith("| isolate-leader |")]
    assert len(rows) == 1, out.stdout
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[1] == "1" and cells[2] == "0"  # one injection, no failed check
    assert int(cells[3]) > 0 and cells[5] == "0"  # acknowledged; none lost after expiry
