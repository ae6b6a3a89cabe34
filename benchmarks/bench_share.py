"""Share group benchmark (KIP-932): records per second through a share group beside a
classic consumer group reading the same topic, on trio-broker.

    .venv/bin/python benchmarks/bench_share.py [--smoke] [--records 100000] [--partitions 4]
        [--consumers 4] [--size 100] [--release-pct 10] [--reject-pct 1]

One broker process on loopback (as in `benchmarks/run.py`); the topic is filled once with
--records records of --size bytes. Then, each with --consumers consumer processes
(confluent-kafka, librdkafka 2.16):

    classic   a classic consumer group (range assignor, auto.offset.reset=earliest):
              time from subscribe until the members together have read every record
    share     a share group (share.auto.offset.reset=earliest, implicit acknowledgement):
              time until every record is accepted; duplicates are counted (none expected)
    mixed     a share group in explicit mode releasing --release-pct of the records on
              their first delivery and rejecting --reject-pct: time until every record not
              rejected is accepted; the redeliveries are counted

Members are processes, not threads, so that what is measured is the broker, not one GIL.
Progress goes to stderr, one table to stdout. The issue's goal: share at least half of
classic with 4 consumers.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import queue
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402  (benchmarks/run.py: broker processes, table, progress)

TOPIC = "share-bench"


def _fill(bootstrap: str, records: int, partitions: int, size: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(30)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 262144, "acks": 1}
    )
    payload = b"x" * size
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, payload, key=str(i).encode(), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def _group_config(bootstrap: str, group: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entry = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    (future,) = admin.incremental_alter_configs([resource]).values()
    future.result(30)


def member(kind: str, bootstrap: str, group: str, pcts: tuple[int, int], stop: Any, out: Any):
    """One consumer process: reports (accepted offsets, redeliveries) in chunks until `stop`."""
    from confluent_kafka import AcknowledgeType, Consumer, ShareConsumer

    release_pct, reject_pct = pcts
    config = {"bootstrap.servers": bootstrap, "group.id": group}
    if kind == "classic":
        c: Any = Consumer({**config, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    else:
        if kind == "mixed":
            config["share.acknowledgement.mode"] = "explicit"
        c = ShareConsumer(config)
    c.subscribe([TOPIC])
    accepted: list[tuple[int, int]] = []
    deliveries = 0
    while not stop.is_set():
        msgs = c.consume(1000, 0.2) if kind == "classic" else c.poll(0.2)
        for m in msgs:
            if m.error() is not None:
                continue
            if kind != "classic" and m.delivery_count() > 1:
                deliveries += 1
            if kind == "mixed":
                bucket = m.offset() % 100
                if bucket < reject_pct:
                    c.acknowledge(m, AcknowledgeType.REJECT)
                    continue
                if bucket < reject_pct + release_pct and m.delivery_count() == 1:
                    c.acknowledge(m, AcknowledgeType.RELEASE)
                    continue
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            accepted.append((m.partition(), m.offset()))
        if accepted or deliveries:
            out.put((accepted, deliveries))
            accepted, deliveries = [], 0
    c.close()


def run_group(kind: str, bootstrap: str, args: argparse.Namespace, expected: int) -> dict:
    group = f"{kind}-{time.monotonic_ns()}"
    if kind != "classic":
        _group_config(bootstrap, group)
    ctx = mp.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    pcts = (args.release_pct, args.reject_pct)
    procs = [
        ctx.Process(target=member, args=(kind, bootstrap, group, pcts, stop, out))
        for _ in range(args.consumers)
    ]
    started = time.monotonic()
    for p in procs:
        p.start()
    seen: set[tuple[int, int]] = set()
    duplicates = deliveries = 0
    deadline = started + args.timeout
    while len(seen) < expected and time.monotonic() < deadline:
        try:
            got, delivered = out.get(timeout=0.5)
        except queue.Empty:
            continue
        deliveries += delivered
        for tp in got:
            if tp in seen:
                duplicates += 1
            seen.add(tp)
    elapsed = time.monotonic() - started
    stop.set()
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
    bench.progress(f"{kind}: {len(seen)} of {expected} in {elapsed:.2f} s")
    return {
        "rate": len(seen) / elapsed,
        "complete": len(seen) >= expected,
        "duplicates": duplicates,
        "redeliveries": deliveries,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a small run (tests)")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--release-pct", type=int, default=10)
    parser.add_argument("--reject-pct", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    if args.smoke:
        args.records, args.timeout = 2000, 60
    workdir = Path(tempfile.mkdtemp(prefix="bench-share-"))
    broker = bench.start_broker(
        bench.TRIO,
        workdir,
        None,
        {"offsets.topic.num.partitions": "5", "group.initial.rebalance.delay.ms": "0"},
    )
    try:
        bench.progress(f"filling {TOPIC}: {args.records} records of {args.size} bytes")
        _fill(broker.bootstrap, args.records, args.partitions, args.size)
        results = {
            "classic": run_group("classic", broker.bootstrap, args, args.records),
            "share": run_group("share", broker.bootstrap, args, args.records),
        }
        not_rejected = sum(
            1
            for p in range(args.partitions)
            for o in range(len(range(p, args.records, args.partitions)))
            if o % 100 >= args.reject_pct
        )
        results["mixed"] = run_group("mixed", broker.bootstrap, args, not_rejected)
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    classic = results["classic"]["rate"]
    print(
        f"{'group':<8} {'records/s':>10} {'vs classic':>10} {'complete':>8} {'dup':>5} {'redeliv':>8}"
    )
    for kind, r in results.items():
        print(
            f"{kind:<8} {r['rate']:>10.0f} {r['rate'] / classic:>10.2f} "
            f"{'yes' if r['complete'] else 'NO':>8} {r['duplicates']:>5} {r['redeliveries']:>8}"
        )
    return 0 if all(r["complete"] and not r["duplicates"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
