"""What CPython's allocator costs against the C allocator (PYTHONMALLOC=malloc), per broker.

    .venv/bin/python benchmarks/bench_allocator.py [--runs 3] [--small 20000] [--bulk-mb 300]

Each run starts a fresh broker process under each allocator in turn (alternating, so the
machine's noise falls on both), produces --small requests of one 100-byte record each
(linger 0), then --bulk-mb of 1 KiB records in 1 MiB batches, and reads the broker's CPU
time from /proc/<pid>/stat around each. `bench_connections.py idle --rounds 3`, run with and
without PYTHONMALLOC=malloc, gives the other side: what closing connections leaves.
No assertion on figures; the table goes to stdout.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence

from trio_broker.testing import BrokerProcess

ALLOCATORS = ("pymalloc", "malloc")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def perf(bootstrap: str, *args: str) -> None:
    cmd = [sys.executable, "-m", "trio_broker", "perf", "produce", "--bootstrap", bootstrap]
    subprocess.run([*cmd, "--topic", "t", *args], capture_output=True, check=True)


def one_run(allocator: str, small: int, bulk_mb: int) -> tuple[float, float]:
    """Broker CPU: us per small request, seconds for the bulk produce."""
    saved = os.environ.get("PYTHONMALLOC")
    if allocator == "malloc":
        os.environ["PYTHONMALLOC"] = "malloc"
    else:
        os.environ.pop("PYTHONMALLOC", None)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-alloc-") as tmp:
            broker = BrokerProcess({"log.dirs": tmp})
            try:
                bs, pid = broker.bootstrap, broker.proc.pid
                perf(bs, "--num-records", "200", "--record-size", "100", "--partitions", "1")
                before = cpu_s(pid)
                perf(
                    bs,
                    *("--num-records", str(small), "--record-size", "100"),
                    *("--batch-num-messages", "1", "--linger-ms", "0"),
                )
                small_s = cpu_s(pid) - before
                before = cpu_s(pid)
                perf(
                    bs,
                    *("--num-records", str(bulk_mb * 1024), "--record-size", "1024"),
                    *("--batch-size", str(1 << 20), "--linger-ms", "20"),
                )
                bulk_s = cpu_s(pid) - before
            finally:
                broker.stop()
    finally:
        if saved is None:
            os.environ.pop("PYTHONMALLOC", None)
        else:
            os.environ["PYTHONMALLOC"] = saved
    return small_s / small * 1e6, bulk_s


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument("--bulk-mb", type=int, default=300)
    args = parser.parse_args(argv)
    got: dict[str, list[tuple[float, float]]] = {a: [] for a in ALLOCATORS}
    for run in range(args.runs):
        for allocator in ALLOCATORS:
            got[allocator].append(one_run(allocator, args.small, args.bulk_mb))
            print(f"run {run + 1} {allocator}: {got[allocator][-1]}", file=sys.stderr, flush=True)
    print("| allocator | small produce, broker CPU us/request | bulk produce, broker CPU s |")
    print("|---|---|---|")
    for allocator, rows in got.items():
        small = ", ".join(f"{r[0]:.1f}" for r in rows)
        bulk = ", ".join(f"{r[1]:.2f}" for r in rows)
        print(
            f"| {allocator} | {small} (median {statistics.median(r[0] for r in rows):.1f})"
            f" | {bulk} (median {statistics.median(r[1] for r in rows):.2f}) |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
