"""Wall time of `trio-broker report` over a day of logs (~10 GB), on local[2] and standalone.

    .venv/bin/python benchmarks/report_bench.py [--gb 10] [--masters local,standalone]
        [--dir DIR] [--keep] [--segment-mib 256]

Writes one day of traffic with the broker's own log writer (`LogManager`, `append_as_leader`:
real segments, offset and time indexes, checkpoints) into DIR/logs:

- `events`: 16 partitions, 200-record zstd batches of ~14 KB (60% of the bytes);
- `clicks`: 8 partitions, 20-record lz4 batches of ~2.6 KB (30%);
- `audit`: 4 partitions, 4-record uncompressed batches of ~650 B (10%);
- `__consumer_offsets`: 8 partitions; 16 groups (6 on events, 6 on clicks, 4 on audit)
  each committing all its partitions once a minute in one batch, as a consumer's
  OffsetCommit is appended: some keep up, some fall behind, one stops at noon.

Batches are spread evenly over the day (2024-05-01 UTC). Then, for each master, it times
Spark start-up, the header scan alone (a count of `trio_batches`) and the whole report
(tables, Parquet, HTML) for that day, and prints seconds per GB and per million batches.
`standalone` starts a master and a worker (`spark-class ...`, 127.0.0.1, 2 cores) with
`trio_broker.analytics.standalone`. The data is deleted at the end unless --keep (pass
--dir to reuse kept data). Not a test: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import struct
import tempfile
import time
import zlib
from pathlib import Path

import crc32c

from trio_broker.protocol.record_codec import build_batch
from trio_broker.protocol.records import (
    CRC_OFFSET,
    CRC_START,
    MAX_TIMESTAMP_OFFSET,
    Compression,
    validate_batches,
)

T0 = 1_714_521_600_000  # 2024-05-01T00:00:00Z
DAY_MS = 86_400_000
_BASE_TS_OFFSET = 27
_CHUNK_BYTES = 1024 * 1024  # what one append carries (a produce request's worth)
OFFSETS_PARTITIONS = 8

# topic: (partitions, share of the bytes, records per batch, value bytes, codec)
TOPICS = {
    "events": (16, 0.6, 200, 300, Compression.ZSTD),
    "clicks": (8, 0.3, 20, 180, Compression.LZ4),
    "audit": (4, 0.1, 4, 130, Compression.NONE),
}
# group: (topic, lag profile): "live" keeps up (commits the log end), "behind-N" stays N
# minutes behind, "slowing" falls behind by 1 s a minute, "stopped" stops at noon.
GROUPS = {
    **{
        f"events-{name}": ("events", name)
        for name in ("live", "live-2", "behind-5", "behind-60", "slowing", "stopped")
    },
    **{
        f"clicks-{name}": ("clicks", name)
        for name in ("live", "live-2", "behind-1", "behind-30", "slowing", "stopped")
    },
    **{f"audit-{name}": ("audit", name) for name in ("live", "behind-10", "slowing", "stopped")},
}


def _template(records: int, value_bytes: int, codec: Compression) -> bytearray:
    """One batch whose values look like JSON events with random ids (so compressed sizes
    are realistic: about half)."""
    items = []
    for i in range(records):
        digest = hashlib.sha256(b"%d" % i).hexdigest().encode()
        body = b'{"user":%d,"page":"/p/%d","ms":%d,"id":"' % (i * 7919 % 100_000, i % 997, i)
        pad = (digest * (value_bytes // len(digest) + 1))[: max(value_bytes - len(body) - 2, 0)]
        # Every 64 hex digits repeat: shuffle them per 8 so a codec finds little to share.
        pad = b"".join(
            hashlib.sha256(pad[k : k + 32]).hexdigest().encode()[:8] for k in range(0, len(pad), 8)
        )[: len(pad)]
        items.append((b"user-%d" % (i * 7919 % 100_000), body + pad + b'"}', [], T0 + i))
    return bytearray(build_batch(items, compression=codec))


def _partition_plan(total_bytes: int) -> list[tuple[str, int, bytearray, int, int]]:
    """(topic, partition, template, records per batch, batches) for every partition."""
    plan = []
    for topic, (partitions, share, records, value_bytes, codec) in TOPICS.items():
        template = _template(records, value_bytes, codec)
        per_partition = int(total_bytes * share / partitions)
        batches = max(per_partition // len(template), 1)
        for p in range(partitions):
            plan.append((topic, p, template, records, batches))
    return plan


def write_logs(root: Path, total_bytes: int, segment_bytes: int) -> dict:
    """The day of traffic (see the module docstring) through the broker's log writer."""
    from trio_broker.log import LogManager
    from trio_broker.log.config import LogConfig

    config = LogConfig(segment_bytes=segment_bytes, retention_ms=-1)
    manager = LogManager([root], node_id=1, cluster_id="report-bench", default_config=config)
    manager.open()
    plan = _partition_plan(total_bytes)
    shape = {"batches": 0, "records": 0, "bytes": 0, "partitions": len(plan)}
    for topic, partition, template, records, batches in plan:
        log = manager.create_log(topic, partition, config=config)
        step = DAY_MS / batches
        per_chunk = max(_CHUNK_BYTES // len(template), 1)
        size = len(template)
        i = 0
        while i < batches:
            n = min(per_chunk, batches - i)
            chunk = template * n
            for k in range(n):
                base_ts = T0 + int((i + k) * step)
                at = k * size
                struct.pack_into(
                    ">qq", chunk, at + _BASE_TS_OFFSET, base_ts, base_ts + 10 * (records - 1)
                )
                struct.pack_into(
                    ">I",
                    chunk,
                    at + CRC_OFFSET,
                    crc32c.crc32c(memoryview(chunk)[at + CRC_START : at + size]),
                )
            log.append_as_leader(chunk, validate_batches(chunk), leader_epoch=0)
            i += n
        shape["batches"] += batches
        shape["records"] += batches * records
        shape["bytes"] += batches * size
    assert MAX_TIMESTAMP_OFFSET == _BASE_TS_OFFSET + 8
    shape["commits"] = _write_commits(manager, plan)
    manager.checkpoint()
    manager.close()
    shape["groups"] = len(GROUPS)
    shape["segments"] = sum(1 for _ in root.glob("*/*.log"))
    shape["disk_bytes"] = sum(f.stat().st_size for f in root.glob("*/*.log"))
    return shape


def _committed(profile: str, minute: int, records: int, batches: int) -> int:
    """The offset a group with `profile` commits at `minute` on a partition."""
    if profile == "stopped" and minute >= 720:
        minute = 720
    lag_minutes = 0.0
    if profile.startswith("behind-"):
        lag_minutes = int(profile.split("-")[1])
    elif profile == "slowing":
        lag_minutes = minute / 60  # one second more behind every minute
    ts = minute * 60_000 - lag_minutes * 60_000
    whole = max(min(int(ts / (DAY_MS / batches)) + 1, batches), 0) if ts >= 0 else 0
    return whole * records


def _write_commits(manager, plan) -> int:
    from trio_broker.protocol._generated.offset_commit_key import OffsetCommitKey
    from trio_broker.protocol._generated.offset_commit_value import OffsetCommitValue

    logs = [manager.create_log("__consumer_offsets", p) for p in range(OFFSETS_PARTITIONS)]
    by_topic: dict[str, list] = {}
    for topic, partition, _, records, batches in plan:
        by_topic.setdefault(topic, []).append((partition, records, batches))
    count = 0
    for minute in range(1, 1440):
        ts = T0 + minute * 60_000 + 7_000
        for group, (topic, profile) in GROUPS.items():
            if profile == "stopped" and minute > 720:
                continue
            items = []
            for partition, records, batches in by_topic[topic]:
                key = struct.pack(">h", 1) + bytes(
                    OffsetCommitKey(group=group, topic=topic, partition=partition).encode(1)
                )
                offset = _committed(profile, minute, records, batches)
                value = struct.pack(">h", 3) + bytes(
                    OffsetCommitValue(offset=offset, commit_timestamp=ts).encode(3)
                )
                items.append((key, value, [], ts))
            buf = bytearray(build_batch(items))
            log = logs[zlib.crc32(group.encode()) % OFFSETS_PARTITIONS]
            log.append_as_leader(buf, validate_batches(buf), leader_epoch=0)
            count += len(items)
    return count


def _tree_cpu_seconds() -> float:
    """CPU seconds used so far by this process and every process under it (the Spark JVMs,
    Python workers, a standalone master, worker and executors): unlike wall time, it does
    not grow with other people's load on the machine."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(stat.parent.name)
        parents[pid] = int(fields[1])
        # utime, stime, and the children's that were waited for
        cpu[pid] = sum(int(f) for f in fields[11:15]) / ticks
    me = os.getpid()

    def mine(pid: int) -> bool:
        while pid > 1:
            if pid == me:
                return True
            pid = parents.get(pid, 0)
        return False

    return sum(seconds for pid, seconds in cpu.items() if mine(pid))


def time_report(master: str, logs: Path, out: Path, conf: dict[str, str] | None = None) -> dict:
    from trio_broker.analytics import datasource
    from trio_broker.analytics.job import ReportOptions, build_session, run_report

    t = time.monotonic()
    spark = build_session(master, "report-bench", conf)
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(1).count()
    startup = time.monotonic() - t
    try:
        datasource.register(spark)
        t = time.monotonic()
        batches = (
            spark.read.format("trio_batches")
            .option("paths", str(logs))
            .option("parallelism", str(spark.sparkContext.defaultParallelism))
            .load()
            .count()
        )
        scan = time.monotonic() - t
        options = ReportOptions(
            log_dirs=(str(logs),), out=str(out), since_ms=T0, until_ms=T0 + DAY_MS
        )
        t = time.monotonic()
        cpu = _tree_cpu_seconds()
        result = run_report(spark, options)
        report = time.monotonic() - t
        cpu = _tree_cpu_seconds() - cpu
        stages = _slowest_stages(spark)
    finally:
        spark.stop()
    return {
        "startup": startup,
        "scan": scan,
        "report": report,
        "cpu": cpu,
        "batches": batches,
        "bytes": result.segment_bytes,
        "segments": result.segments,
        "groups": len(result.summary),
        "stages": stages,
    }


def _slowest_stages(spark, top: int = 6) -> list[str]:
    """The profile: the stages that took the most task time, from the Spark UI's REST API."""
    import json
    import urllib.request

    url = spark.sparkContext.uiWebUrl
    if not url:
        return []
    app = spark.sparkContext.applicationId
    try:
        with urllib.request.urlopen(f"{url}/api/v1/applications/{app}/stages", timeout=60) as r:
            stages = json.load(r)
    except OSError as exc:
        return [f"(no stage list: {exc})"]
    stages.sort(key=lambda s: s.get("executorRunTime", 0), reverse=True)
    return [
        f"stage {s['stageId']}: {s.get('executorRunTime', 0) / 1000:.0f} s of tasks, "
        f"{s.get('numTasks')} tasks, {s.get('inputRecords', 0):,} rows in, "
        f"{s.get('shuffleReadRecords', 0):,} shuffled in: {s.get('description') or s['name']}"
        for s in stages[:top]
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gb", type=float, default=10.0, help="decimal GB of segments")
    parser.add_argument("--segment-mib", type=int, default=256, help="segment.bytes in MiB")
    parser.add_argument("--masters", default="local,standalone")
    parser.add_argument("--dir", help="use (or fill) this directory instead of a temp one")
    parser.add_argument("--keep", action="store_true", help="do not delete the data")
    args = parser.parse_args()

    root = Path(args.dir or tempfile.mkdtemp(prefix="report-bench-"))
    logs = root / "logs"
    try:
        if not logs.exists():
            t = time.monotonic()
            shape = write_logs(logs, int(args.gb * 1e9), args.segment_mib * 1024 * 1024)
            print(
                f"wrote {shape['disk_bytes'] / 1e9:.2f} GB in {time.monotonic() - t:.0f} s: "
                f"{shape['batches']:,} batches, {shape['records']:,} records, "
                f"{shape['partitions']} partitions, {shape['segments']} segments, "
                f"{shape['groups']} groups, {shape['commits']:,} commits",
                flush=True,
            )
        for master in args.masters.split(","):
            print(f"load average before {master}: {os.getloadavg()}", flush=True)
            if master == "standalone":
                from trio_broker.analytics.standalone import StandaloneCluster

                with StandaloneCluster(root / "spark", cores=2, memory="3g") as cluster:
                    # The driver (this process) on loopback too; its JVM may already run.
                    conf = {"spark.driver.host": "127.0.0.1", "spark.executor.memory": "3g"}
                    r = time_report(cluster.master_url, logs, root / "out-standalone", conf)
            else:
                r = time_report("local[2]" if master == "local" else master, logs, root / "o")
            gb, mbatches = r["bytes"] / 1e9, r["batches"] / 1e6
            print(
                f"{master}: {gb:.2f} GB, {r['batches']:,} batches, {r['segments']} segments, "
                f"{r['groups']} groups; start-up {r['startup']:.1f} s; scan (count) "
                f"{r['scan']:.1f} s = {r['scan'] / gb:.1f} s/GB; report {r['report']:.1f} s = "
                f"{r['report'] / gb:.1f} s/GB = {r['report'] / mbatches:.1f} s per M batches; "
                f"CPU {r['cpu']:.0f} s = {r['cpu'] / gb:.1f} s/GB; "
                f"load average after: {os.getloadavg()}",
                flush=True,
            )
            for line in r["stages"]:
                print("  " + line, flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
