"""The group benchmark's smoke mode completes and prints its table (no assertion on speed).

Against trio-broker alone: Tansu is exercised by the full run, and its rows stay "-" here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "bench_groups.py"


def test_smoke_prints_every_figure_for_trio_broker() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--brokers", "trio-broker"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "[bench" in out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["figure", "trio-broker", "tansu", "ratio"]
    rows = {}
    for line in lines[2:]:
        if not line.startswith("note:"):
            figure, trio, tansu, _ratio = line.rsplit(None, 3)
            rows[figure] = (trio, tansu)
    expected = ["commits/s, synchronous, 1 consumer", "commits/s, asynchronous (<= 64 in flight)"]
    for strategy in ("range (eager)", "cooperative-sticky"):
        for delay in ("delay 500", "delay 0"):  # the smoke's shorter default delay
            expected.append(f"{strategy}, {delay}: 3 join 6 partitions, s")
            expected.append(f"{strategy}, {delay}: settled after 1 leaves, s")
    assert list(rows) == expected
    for figure, (trio, tansu) in rows.items():
        # Every run settled and every commit succeeded: a "-" is a group that never formed.
        assert trio != "-", figure
        assert float(trio.replace(",", "")) > 0, figure
        assert tansu == "-"
    assert "failed commits" not in out.stdout
