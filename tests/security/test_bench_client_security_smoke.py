"""benchmarks/bench_client_security.py in smoke mode completes and prints every figure for
every protocol (no speed asserted: the machine is shared)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_client_security_smoke():
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_client_security.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {line[:40].strip(): float(line[40:]) for line in out.stdout.splitlines()}
    for protocol in ("PLAINTEXT", "SSL", "SASL_SSL"):
        for figure in ("produce {} (MB/s)", "consume {} (MB/s)", "connects {} (/s)"):
            assert rows[figure.format(protocol)] > 0
