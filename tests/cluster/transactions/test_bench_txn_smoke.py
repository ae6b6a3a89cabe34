"""The transactions benchmark's smoke mode completes and prints its table (no assertion on
speed), and read_committed sees exactly the committed transactions' records."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "bench_txn.py"


def test_smoke_prints_every_figure() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    rows = dict(line.rsplit(None, 1) for line in out.stdout.splitlines()[2:])
    rows = {name.strip(): value for name, value in rows.items()}
    assert float(rows["produce MB/s, idempotent (acks=all)"]) > 0
    assert float(rows["produce MB/s, transactional (1000/txn)"]) > 0
    # 5 transactions of 1,000 records, every second one aborted.
    assert rows["records seen, read_uncommitted"] == "5,000"
    assert rows["records seen, read_committed"] == "3,000"
