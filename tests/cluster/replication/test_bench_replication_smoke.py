"""benchmarks/bench_replication.py in smoke mode completes and prints its table (no
assertion on speed: the machine is shared)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from trio_broker.testing import ZOOKEEPER_MISSING, zookeeper_classpath

ROOT = Path(__file__).resolve().parents[3]


def test_replication_benchmark_smoke():
    if zookeeper_classpath() is None:
        pytest.skip(ZOOKEEPER_MISSING)
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_replication.py"),
            "--smoke",
            "--partitions",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    # Two layouts, each a pair of columns: 1 partition led by broker 1, then 3 partitions
    # whose leaders go round the brokers.
    assert lines[0].split() == ["1", "partition(s)", "3", "partition(s)"]
    assert lines[1].split() == ["acks=1", "RF1", "acks=all", "RF3"] * 2
    rows = {line[:28].strip(): line[28:].split() for line in lines[2:]}
    assert len(rows["MB/s"]) == 4 and all(float(v) > 0 for v in rows["MB/s"])
    # The producer's own CPU is counted in every phase.
    assert all(float(v) > 0 for v in rows["producer CPU s/GB"])
    # Each broker's CPU per GB with the kernel's share; in the 3-partition layout every
    # broker leads one partition and follows two, so all three worked.
    assert float(rows["broker 3 CPU s/GB"][3]) > 0
    # One round in smoke mode (the full run alternates five), each phase on recycled page
    # cache; the ratio row and each layout's round spread.
    assert (
        "rounds: 1 of 5000 records of 1024 bytes per phase; page cache before each phase: warmed"
        in lines
    )
    assert len(rows["acks=all RF3 / acks=1 RF1"]) == 2
    assert all(v.endswith("%") for v in rows["acks=all RF3 / acks=1 RF1"])
    assert len(rows["rounds: low / median / high"]) == 10  # "a% / b% / c%" twice
    sendfile = [line for line in lines if line.startswith("sendfile to followers")]
    m = re.search(r"(\d+) calls, ([\d.]+) MB", sendfile[0]) if sendfile else None
    # Two followers copied each layout's 5 MB: 20 MB and more, by sendfile.
    assert m and int(m.group(1)) > 0 and float(m.group(2)) >= 20.0
