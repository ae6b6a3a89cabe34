"""benchmarks/bench_scale.py at a tiny level: it grows a broker, restarts it twice and prints
its table (no assertion on figures: the machine is shared)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_scale_prints_its_table(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_scale.py")]
        + ["--levels", "20", "--per-topic", "10", "--connections", "5"]
        + ["--log-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    [row] = [line for line in out.stdout.splitlines() if line.startswith("| 20 |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4] != "-" and int(cells[4].replace(",", "")) > 0  # open fds
    assert cells[5].endswith("(5)")  # measured with the connections open
