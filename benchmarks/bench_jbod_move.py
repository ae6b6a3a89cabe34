"""Moving a partition between log dirs (AlterReplicaLogDirs) while it is written: how
long the move takes, and what it does to the produce latency of that partition.

    .venv/bin/python benchmarks/bench_jbod_move.py [--smoke] [--mb 512]

One broker process with two log dirs; confluent-kafka fills the partition with `--mb` MiB
of 1 KiB records, then a paced producer (2,000 records/s, acks=1) writes to it while the
partition moves, and before that for as long, for comparison. Both dirs are on the same
disk here, so the copy competes with the producer for it, as the worst case of a move.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, TopicPartitionReplica

from trio_broker.testing import BrokerProcess

TOPIC = "moving"


def fill(bootstrap: str, mib: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20, "acks": 1}
    )
    value = b"x" * 1024
    for _ in range(mib * 1024):
        while True:
            try:
                producer.produce(TOPIC, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0


def paced(bootstrap: str, stop: threading.Event, latencies: list[float]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
    value = b"y" * 1024
    interval = 1 / 2000
    next_at = time.perf_counter()
    while not stop.is_set():
        sent = time.perf_counter()
        producer.produce(
            TOPIC,
            value,
            partition=0,
            on_delivery=lambda err, msg, sent=sent: latencies.append(time.perf_counter() - sent),
        )
        producer.poll(0)
        next_at += interval
        time.sleep(max(next_at - time.perf_counter(), 0))
    producer.flush(60)


def where(admin: KafkaAdminClient) -> dict[str, bool]:
    (described,) = admin.describe_log_dirs()
    return {
        d["log_dir"]: p["is_future_key"]
        for d in described["log_dirs"]
        for t in d["topics"]
        for p in t["partitions"]
        if t["name"] == TOPIC
    }


def summary(name: str, latencies: list[float]) -> str:
    ms = sorted(x * 1000 for x in latencies)
    p99 = ms[int(len(ms) * 0.99)]
    return (
        f"{name:>14}: {len(ms)} records, p50 {statistics.median(ms):.2f} ms, "
        f"p99 {p99:.2f} ms, max {ms[-1]:.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=512)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    mib = 16 if args.smoke else args.mb
    with tempfile.TemporaryDirectory() as tmp:
        dirs = [Path(tmp) / "disk0", Path(tmp) / "disk1"]
        broker = BrokerProcess(
            {"log.dirs": ",".join(map(str, dirs)), "log.segment.bytes": str(64 << 20)}
        )
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
            started = time.perf_counter()
            fill(broker.bootstrap, mib)
            fill_s = time.perf_counter() - started
            print(f"filled {mib} MiB in {fill_s:.1f} s", file=sys.stderr)
            kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
            (source,) = where(kadmin)
            target = next(str(d) for d in dirs if str(d) != source)
            before: list[float] = []
            during: list[float] = []
            stop = threading.Event()
            thread = threading.Thread(target=paced, args=(broker.bootstrap, stop, before))
            thread.start()
            time.sleep(3 if args.smoke else 10)
            started = time.perf_counter()
            marker = len(before)
            kadmin.alter_replica_log_dirs({TopicPartitionReplica(TOPIC, 0, 1): target})
            while where(kadmin) != {target: False}:
                time.sleep(0.02)
            move_s = time.perf_counter() - started
            stop.set()
            thread.join()
            during = before[marker:]
            before = before[:marker]
            kadmin.close()
        finally:
            broker.stop()
    print(f"move of {mib} MiB: {move_s:.2f} s ({mib / move_s:.0f} MiB/s), same disk")
    print(summary("before move", before))
    print(summary("during move", during))


if __name__ == "__main__":
    main()
