"""(b) in a cluster: one connection of single-record produces to a partition with three
replicas, for each acks a producer may use.

    .venv/bin/python benchmarks/bench_cluster_small.py [--smoke] [--records 20000]
        [--rounds 3]

One ZooKeeper and three trio-broker processes on this machine; a topic of one partition
with replication factor 3, made by the cluster's controller. One librdkafka producer
(`trio_broker.perf produce`, `linger.ms=0`, `batch.num.messages=1`: every record is a
Produce request of its own, pipelined as the client allows) writes --records 100-byte
records to it, in three phases:

    acks=1            the client's in-flight limit is librdkafka's default (1,000,000)
    acks=all          likewise; each request waits for the ISR in the leader's purgatory
    acks=all idem.    enable.idempotence=true: at most 5 requests in flight

The phases alternate over --rounds rounds, so each sees the machine in the same state.
Printed per phase: requests per second (the median round, and the lowest and highest),
and the CPU microseconds per request of the leader and of each follower (all of their
threads, /proc schedstat). These are the figures that small requests cost in a cluster: the
produces a connection reads together are appended as one write on the leader
(apis/produce.py handle_batch_now), an acks=all group waiting for the ISR together; the
followers fetch what the leader appended in one fetch. No assertion on speed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import cpu_ns, perf  # noqa: E402  (benchmarks/run.py)

from trio_broker.testing import (  # noqa: E402
    ZOOKEEPER_MISSING,
    KafkaCluster,
    ZooKeeperServer,
    zookeeper_classpath,
)

PHASES = (
    ("acks=1", ["--acks", "1"]),
    ("acks=all", ["--acks", "all"]),
    ("acks=all idem.", ["--acks", "all", "--producer-prop", "enable.idempotence=true"]),
)


class _Bootstrap:
    """What run.perf needs of a broker: its address."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap


def _leader(bootstrap: str, topic: str) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        if partitions and partitions[0].leader >= 0 and len(partitions[0].isrs) == 3:
            return int(partitions[0].leader)
        time.sleep(0.1)
    raise RuntimeError(f"{topic}-0 has no leader with a full ISR")


def run(records: int, rounds: int) -> dict[str, list[tuple[float, list[float]]]]:
    """Per phase, per round: (requests/s, [leader, follower, follower] CPU us/request)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    results: dict[str, list[tuple[float, list[float]]]] = {name: [] for name, _ in PHASES}
    with (
        tempfile.TemporaryDirectory() as base,
        ZooKeeperServer() as zookeeper,
        KafkaCluster(zookeeper, base_dir=base, processes=True) as cluster,
    ):
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("small", num_partitions=1, replication_factor=3)])[
            "small"
        ].result(30)
        leader = _leader(cluster.bootstrap, "small")
        order = [leader] + [n for n in sorted(cluster.brokers) if n != leader]
        pids = [cluster.brokers[n].proc.pid for n in order]
        target = _Bootstrap(cluster.brokers[leader].bootstrap)
        # Warm-up: the producer's metadata, the followers' fetch sessions.
        perf("produce", target, "--topic", "small", "--num-records", "200",
             "--record-size", "100", "--acks", "all")  # fmt: skip
        for _ in range(rounds):
            for name, args in PHASES:
                before = [cpu_ns(pid) for pid in pids]
                result = perf("produce", target, "--topic", "small",
                              "--num-records", str(records), "--record-size", "100",
                              "--linger-ms", "0", "--batch-num-messages", "1",
                              "--connections", "1", *args)  # fmt: skip
                if result.get("errors"):
                    raise RuntimeError(f"{name}: {result['errors']} delivery errors")
                after = [cpu_ns(pid) for pid in pids]
                results[name].append(
                    (
                        result["records_per_s"],
                        [(a - b) / records / 1e3 for a, b in zip(after, before, strict=True)],
                    )
                )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if zookeeper_classpath() is None:
        print(ZOOKEEPER_MISSING, file=sys.stderr)
        return 1
    records, rounds = (500, 1) if args.smoke else (args.records, args.rounds)
    results = run(records, rounds)
    print(f"{records} single-record requests per phase, {rounds} round(s), one connection")
    header = (
        f"{'phase':<16} {'requests/s':>11} {'low-high':>15} "
        f"{'leader us':>10} {'follower us':>12} {'follower us':>12}"
    )
    print(header)
    for name, _ in PHASES:
        rows = results[name]
        rates = [rate for rate, _ in rows]
        cpu = [statistics.median(row[1][i] for row in rows) for i in range(3)]
        print(
            f"{name:<16} {statistics.median(rates):>11,.0f} "
            f"{f'{min(rates):,.0f}-{max(rates):,.0f}':>15} "
            f"{cpu[0]:>10.1f} {cpu[1]:>12.1f} {cpu[2]:>12.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
