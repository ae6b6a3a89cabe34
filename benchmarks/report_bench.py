"""Wall time of `trio-broker report` over ~1 GiB of segments (~200), split by phase.

    .venv/bin/python benchmarks/report_bench.py [--gib 1.0] [--segments 200] [--keep DIR]

Writes synthetic Kafka-format segments (20 partitions, 16 KiB batches of 100 records,
CRCs valid) plus a commit history, then times: Spark start-up (session and a first
job), the header scan alone (count of batches), and the whole report (tables + HTML).
Not a test: numbers depend on the machine and its page cache.
"""

from __future__ import annotations

import argparse
import struct
import tempfile
import time
from pathlib import Path

import crc32c

from trio_broker.protocol.record_codec import build_batch
from trio_broker.protocol.records import (
    BASE_OFFSET_OFFSET,
    CRC_OFFSET,
    CRC_START,
    MAX_TIMESTAMP_OFFSET,
)

T0 = 1_714_521_600_000
_BASE_TS_OFFSET = 27
PARTITIONS = 20


def write_segments(root: Path, total_bytes: int, segments: int) -> int:
    per_partition = segments // PARTITIONS
    segment_bytes = total_bytes // segments
    template = bytearray(build_batch([(b"key-%03d" % i, b"x" * 140, [], T0) for i in range(100)]))
    size = len(template)
    batches_per_segment = max(segment_bytes // size, 1)
    ms_per_batch = 86_400_000 // (batches_per_segment * per_partition)
    written = 0
    for p in range(PARTITIONS):
        topic, partition = f"bench{p % 4}", p // 4
        d = root / f"{topic}-{partition}"
        d.mkdir(parents=True)
        offset = 0
        n = 0
        for _ in range(per_partition):
            out = bytearray()
            base = offset
            for _ in range(batches_per_segment):
                ts = T0 + n * ms_per_batch
                struct.pack_into(">q", template, BASE_OFFSET_OFFSET, offset)
                struct.pack_into(">qq", template, _BASE_TS_OFFSET, ts, ts)
                struct.pack_into(">I", template, CRC_OFFSET, crc32c.crc32c(template[CRC_START:]))
                out += template
                offset += 100
                n += 1
            (d / f"{base:020d}.log").write_bytes(out)
            written += len(out)
    assert MAX_TIMESTAMP_OFFSET == _BASE_TS_OFFSET + 8
    return written


def write_commits(root: Path) -> None:
    from trio_broker.log import LogManager
    from trio_broker.protocol._generated.offset_commit_key import OffsetCommitKey
    from trio_broker.protocol._generated.offset_commit_value import OffsetCommitValue
    from trio_broker.protocol.records import validate_batches

    manager = LogManager([root], node_id=1, cluster_id="bench")
    manager.open()
    log = manager.create_log("__consumer_offsets", 0)
    for minute in range(0, 1440, 5):
        ts = T0 + minute * 60_000
        records = []
        for p in range(PARTITIONS):
            key = struct.pack(">h", 1) + bytes(
                OffsetCommitKey(group="g", topic=f"bench{p % 4}", partition=p // 4).encode(1)
            )
            value = struct.pack(">h", 3) + bytes(
                OffsetCommitValue(offset=minute * 100, commit_timestamp=ts).encode(3)
            )
            records.append((key, value, [], ts))
        buf = bytearray(build_batch(records))
        log.append_as_leader(buf, validate_batches(buf), leader_epoch=0)
    manager.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--segments", type=int, default=200)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--keep", help="use (or fill) this directory instead of a temp one")
    args = parser.parse_args()

    root = Path(args.keep or tempfile.mkdtemp(prefix="report-bench-"))
    logs = root / "logs"
    if not logs.exists():
        t = time.monotonic()
        written = write_segments(logs, int(args.gib * 1024**3), args.segments)
        write_commits(logs)
        print(f"wrote {written / 1024**3:.2f} GiB in {time.monotonic() - t:.1f} s to {logs}")

    from trio_broker.analytics import datasource
    from trio_broker.analytics.job import ReportOptions, build_session, run_report

    t = time.monotonic()
    spark = build_session(args.master, "report-bench")
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(1).count()
    startup = time.monotonic() - t

    datasource.register(spark)
    t = time.monotonic()
    df = (
        spark.read.format("trio_batches")
        .option("paths", str(logs))
        .option("parallelism", str(spark.sparkContext.defaultParallelism))
        .load()
    )
    batches = df.count()
    scan = time.monotonic() - t

    options = ReportOptions(
        log_dirs=(str(logs),), out=str(root / "out"), since_ms=T0, until_ms=T0 + 86_400_000
    )
    t = time.monotonic()
    result = run_report(spark, options)
    report = time.monotonic() - t
    spark.stop()
    print(
        f"segments: {result.segments}, bytes: {result.segment_bytes / 1024**3:.2f} GiB, "
        f"batches: {batches}"
    )
    print(f"spark start-up: {startup:.1f} s")
    print(f"header scan (count): {scan:.1f} s ({result.segment_bytes / 1024**2 / scan:.0f} MiB/s)")
    print(f"full report (scan + tables + parquet + html): {report:.1f} s")
    print(f"total wall: {startup + report:.1f} s")


if __name__ == "__main__":
    main()
