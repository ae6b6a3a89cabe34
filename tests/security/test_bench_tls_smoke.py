"""benchmarks/bench_tls.py in smoke mode completes and prints its table (no speed asserted:
the machine is shared)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_tls_smoke():
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_tls.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {line[:34].strip(): line[34:].strip() for line in out.stdout.splitlines()}
    for figure in (
        "produce plaintext (MB/s)",
        "produce TLS (MB/s)",
        "consume plaintext (MB/s)",
        "consume TLS (MB/s)",
        "SCRAM-SHA-256 handshakes/s",
        "SCRAM-SHA-512 handshakes/s",
    ):
        assert float(rows[figure]) > 0, figure
