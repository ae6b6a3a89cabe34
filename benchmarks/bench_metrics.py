"""The cost of metrics: produce and fetch throughput with `metrics.listener` off and on,
and the /metrics endpoint's response time with 1,000 partitions.

    .venv/bin/python benchmarks/bench_metrics.py [--smoke] [--rounds 3]
    .venv/bin/python benchmarks/bench_metrics.py --request-path [--rounds 5] [--off-only]

Each configuration runs as its own broker process; the load is `trio_broker.perf`
(librdkafka) as in benchmarks/run.py: (a) 1 KiB records acks=1 over 8 partitions,
(b) 100-byte records, one per Produce request (the request path's fixed cost), (c) a
consumer reading back what (a) wrote. Off and on alternate, round after round, and the
best of each is printed (the machine is shared). Then one broker with metrics on gets
1,000 partitions with a record each and a consumer group with commits on all of them,
and /metrics is fetched 20 times.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import TRIO, perf, produce_args, progress, start_broker  # noqa: E402

from trio_broker.testing import free_port  # noqa: E402


def one_round(metrics: bool, workdir: Path, records: int, small: int) -> dict[str, float]:
    overrides = {"metrics.listener": f"http://127.0.0.1:{free_port()}"} if metrics else {}
    broker = start_broker(TRIO, workdir, None, overrides)
    cpu = {}
    try:
        t = broker.cpu_seconds()
        a = perf("produce", broker, *produce_args("a", records, 1024, 8, batch_size=1048576))
        t, cpu["a"] = broker.cpu_seconds(), broker.cpu_seconds() - t
        b = perf("produce", broker, *produce_args("b", small, 100, 1, linger_ms=0, batch_size=1))
        t, cpu["b"] = broker.cpu_seconds(), broker.cpu_seconds() - t
        c = perf("consume", broker, "--topic", "a", "--num-records", str(records))
        cpu["c"] = broker.cpu_seconds() - t
    finally:
        broker.stop()
    gb = records * 1024 / 1e9
    return {
        "produce 1 KiB, MB/s": a["mb_per_s"],
        "produce 1 record/request, records/s": b["records_per_s"],
        "consume, MB/s": c["mb_per_s"],
        # Broker CPU per unit of work: steadier than rates on a shared machine.
        "broker CPU s/GB produced (-)": cpu["a"] / gb,
        "broker CPU us/small request (-)": cpu["b"] / small * 1e6,
        "broker CPU s/GB consumed (-)": cpu["c"] / gb,
    }


def request_path_cpu(metrics: bool, seconds: float, connections: int = 8) -> tuple[float, float]:
    """ApiVersions in a sync loop against a broker in this process (clients are other
    processes): requests/s, and the broker's CPU µs per request (this process's CPU)."""
    from bench_codec import bench_api_versions

    from trio_broker.testing import BrokerThread

    overrides = {"metrics.listener": f"http://127.0.0.1:{free_port()}"} if metrics else {}
    with tempfile.TemporaryDirectory() as data:
        with BrokerThread({"log.dirs": data, **overrides}) as broker:
            before = time.process_time()
            rate = bench_api_versions(broker.host, broker.port, connections, seconds)
            cpu = time.process_time() - before
    return rate, cpu / (rate * seconds) * 1e6


def endpoint_time(workdir: Path, partitions: int, scrapes: int) -> tuple[float, float, int]:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    port = free_port()
    broker = start_broker(TRIO, workdir, None, {"metrics.listener": f"http://127.0.0.1:{port}"})
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("wide", partitions, 1)]).values():
            f.result(60)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
        for p in range(partitions):
            producer.produce("wide", b"x", partition=p)
        producer.flush(60)
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "wide-readers",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe(["wide"])
        seen = 0
        while seen < partitions:
            msg = consumer.poll(30)
            if msg is None:
                raise RuntimeError("no records")
            seen += 1
        consumer.commit(asynchronous=False)
        consumer.close()
        url = f"http://127.0.0.1:{port}/metrics"
        times = []
        size = 0
        for _ in range(scrapes):
            started = time.perf_counter()
            with urllib.request.urlopen(url, timeout=60) as answer:
                size = len(answer.read())
            times.append((time.perf_counter() - started) * 1000)
    finally:
        broker.stop()
    return statistics.median(times), max(times), size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--request-path",
        action="store_true",
        help="only the request path's CPU per request, off and on (--off-only: off alone)",
    )
    parser.add_argument("--off-only", action="store_true")
    args = parser.parse_args(argv)
    if args.request_path:
        labels = ("off",) if args.off_only else ("off", "on")
        cpu: dict[str, list[float]] = {label: [] for label in labels}
        for r in range(args.rounds):
            for label in labels:
                progress(f"request path round {r + 1}/{args.rounds}, metrics {label}")
                rate, us = request_path_cpu(label == "on", 1.0 if args.smoke else 3.0)
                cpu[label].append(us)
                progress(f"  {rate:,.0f} req/s, {us:.1f} µs broker CPU per request")
        for label in labels:
            print(
                f"ApiVersions, 8 connections, metrics {label}: broker CPU per request "
                f"min {min(cpu[label]):.1f} µs, median {statistics.median(cpu[label]):.1f} µs"
            )
        return 0
    records, small, rounds, partitions = (
        (2000, 200, 1, 50) if args.smoke else (200_000, 20_000, args.rounds, 1000)
    )
    results: dict[str, dict[str, list[float]]] = {"off": {}, "on": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for label in ("off", "on"):
                progress(f"round {r + 1}/{rounds}, metrics {label}")
                workdir = Path(tmp) / f"{label}-{r}"
                workdir.mkdir()
                for key, value in one_round(label == "on", workdir, records, small).items():
                    results[label].setdefault(key, []).append(value)
        progress(f"/metrics with {partitions} partitions")
        workdir = Path(tmp) / "wide"
        workdir.mkdir()
        median_ms, max_ms, size = endpoint_time(workdir, partitions, 20)
    print(f"{'figure (best of ' + str(rounds) + ')':<42} {'off':>12} {'on':>12} {'on/off':>8}")
    for key in results["off"]:
        # Best of the rounds: the highest rate, the lowest cost (figures marked "(-)").
        best = min if key.endswith("(-)") else max
        off, on = best(results["off"][key]), best(results["on"][key])
        print(f"{key:<42} {off:>12,.1f} {on:>12,.1f} {on / off:>8.2f}")
    print(
        f"/metrics with {partitions} partitions: median {median_ms:.1f} ms, "
        f"max {max_ms:.1f} ms, {size / 1024:.0f} KiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
