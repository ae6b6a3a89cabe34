"""Failover as a producer sees it: an idempotent acks=all confluent-kafka producer streams
into a partition replicated on three brokers (separate processes, Debian's ZooKeeper)
while its leader is stopped (SIGTERM: controlled shutdown) or killed (kill -9).

    .venv/bin/python benchmarks/bench_produce_failover.py [--smoke]
        [--sigterm-rounds 10] [--kill-rounds 20] [--session-ms 6000]
        [--client-refresh-ms 1000]

Per round, from the signal:
  - SIGTERM: until the process exited, and until the first acknowledgement of a record
    the successor appended (an offset at or past the start of the successor's first leader
    epoch after the old one: its leader-epoch-checkpoint), i.e. the client moved over;
  - kill -9: until that first acknowledgement on the successor (the session must expire
    first: --session-ms).
The time from the new leader in a survivor's Metadata to the first acknowledgement is
mostly the client's: librdkafka (2.16) learns the new leader at its next periodic metadata
refresh, then moves the partition off the dead broker and applies the leader only at the
refresh after that (its debug log: "Reverting from preferred replica", "partition drain"),
so up to two --client-refresh-ms intervals (topic.metadata.refresh.interval.ms). The
stopped broker is started again and the next round waits until all three are in the ISR.
Every acknowledged record is checked once at its offset at the end (reads from the
leader). Progress goes to stderr, one table to stdout. No assertion on speed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402  (benchmarks/run.py: progress)

from trio_broker.testing import KafkaCluster, ZooKeeperServer  # noqa: E402

TOPIC = "failover"


class StreamingProducer:
    """acks=all, idempotent; records (ack time, offset) of every acknowledgement."""

    def __init__(self, bootstrap: str, extra: dict | None = None) -> None:
        self.bootstrap = bootstrap
        self.extra = dict(extra or {})
        self.acks: list[tuple[float, int]] = []
        self.values: dict[int, bytes] = {}
        self.errors: list[object] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: object, msg: object) -> None:
        now = time.monotonic()
        with self._lock:
            if err is not None:
                self.errors.append(err)
            else:
                self.acks.append((now, msg.offset()))  # type: ignore[attr-defined]
                self.values[msg.offset()] = msg.value()  # type: ignore[attr-defined]

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 120_000,
                "retry.backoff.ms": 50,
                "topic.metadata.refresh.interval.ms": 1000,
                **self.extra,
            }
        )
        n = 0
        while not self._stop.is_set():
            if n - len(self.acks) - len(self.errors) < 200:
                try:
                    producer.produce(
                        TOPIC, value=b"v-%d" % n, partition=0, on_delivery=self._on_delivery
                    )
                    n += 1
                except BufferError:
                    pass
            producer.poll(0.001)
        producer.flush(150)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(180)

    def first_ack_at_or_after(self, offset: int, since: float) -> float | None:
        with self._lock:
            times = [t for t, o in self.acks if o >= offset and t >= since]
        return min(times) if times else None

    def acked_since(self, since: float) -> int:
        with self._lock:
            return sum(1 for t, _ in self.acks if t > since)


def _partition(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=10)
    t = md.topics.get(TOPIC)
    if t is None or t.error is not None or 0 not in t.partitions:
        return None
    return t.partitions[0]


def _leader_and_epoch(bootstrap: str) -> tuple[int, int]:
    import socket

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from wire import request_of, roundtrip

    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        m = roundtrip(sock, request_of(3, topics=None, allow_auto_topic_creation=False), 12)
    for t in m.topics:
        if t.name == TOPIC:
            p = t.partitions[0]
            return p.leader_id, p.leader_epoch
    return -1, -1


def _wait(check, budget_s: float, what: str):
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        try:
            got = check()
        except Exception:  # noqa: BLE001  (a broker down meanwhile)
            got = None
        if got:
            return got
        time.sleep(0.01)
    raise TimeoutError(what)


def _epoch_start(log_dir: Path, after_epoch: int) -> int | None:
    """Where the first leader epoch newer than `after_epoch` starts in this replica's log."""
    path = log_dir / f"{TOPIC}-0" / "leader-epoch-checkpoint"
    try:
        lines = path.read_text().split("\n")
    except OSError:
        return None
    entries = [tuple(int(x) for x in line.split()) for line in lines[2:] if line.strip()]
    for epoch, start in entries:
        if epoch > after_epoch:
            return start
    return None


def _round(cluster, producer: StreamingProducer, kill: bool) -> tuple[float, float | None, float]:
    """One failover; (signal to first ack on the successor, signal to exit or None, signal
    to a survivor's Metadata naming the new leader)."""
    brokers = cluster.brokers
    _wait(
        lambda: (p := _partition(cluster.bootstrap)) is not None and len(p.isrs) == 3,
        120,
        "all three replicas in the ISR",
    )
    _wait(lambda: producer.acked_since(time.monotonic() - 0.5) > 0, 60, "the producer streams")
    any_live = next(iter(brokers.values())).bootstrap
    leader, epoch = _leader_and_epoch(any_live)
    victim = brokers[leader]
    survivors = [b for n, b in brokers.items() if n != leader]
    t0 = time.monotonic()
    exit_s = None
    if kill:
        victim.kill()
    else:
        victim.stop()
        exit_s = time.monotonic() - t0

    def successor() -> tuple[int, int] | None:
        new, new_epoch = _leader_and_epoch(survivors[0].bootstrap)
        return (new, new_epoch) if new not in (leader, -1) and new_epoch > epoch else None

    new_leader, _ = _wait(successor, 60, "a new leader")
    moved_s = time.monotonic() - t0
    start = _wait(
        lambda: _epoch_start(brokers[new_leader].log_dir, epoch) is not None,
        60,
        "the successor's epoch",
    )
    start = _epoch_start(brokers[new_leader].log_dir, epoch)
    first = _wait(lambda: producer.first_ack_at_or_after(start, t0), 60, "an ack on the successor")
    victim.start_again()
    return first - t0, exit_s, moved_s


def _stats(values: list[float]) -> str:
    if not values:
        return "-"
    return f"p50 {statistics.median(values):.2f} s, max {max(values):.2f} s (n={len(values)})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="two rounds of each")
    parser.add_argument("--sigterm-rounds", type=int, default=10)
    parser.add_argument("--kill-rounds", type=int, default=20)
    parser.add_argument("--session-ms", type=int, default=6000)
    parser.add_argument(
        "--client-refresh-ms",
        type=int,
        default=1000,
        help="the producer's topic.metadata.refresh.interval.ms (as in the tests' producer)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.sigterm_rounds = args.kill_rounds = 2
    overrides = {
        "zookeeper.session.timeout.ms": str(args.session_ms),
        "offsets.topic.replication.factor": "3",
        "controlled.shutdown.retry.backoff.ms": "200",
    }
    results: dict[str, list[float]] = {
        "sigterm_exit": [],
        "sigterm_ack": [],
        "kill_ack": [],
        "kill_moved": [],
    }
    with tempfile.TemporaryDirectory() as tmp, ZooKeeperServer() as zk:
        cluster = KafkaCluster(
            zk, base_dir=Path(tmp) / "kafka", size=3, overrides=overrides, processes=True
        )
        with cluster:
            from confluent_kafka.admin import AdminClient, NewTopic

            client = AdminClient({"bootstrap.servers": cluster.bootstrap})
            futures = client.create_topics(
                [NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})],
                operation_timeout=30,
            )
            futures[TOPIC].result(60)
            producer = StreamingProducer(
                cluster.bootstrap, {"topic.metadata.refresh.interval.ms": args.client_refresh_ms}
            )
            producer.start()
            try:
                for i in range(args.sigterm_rounds):
                    ack_s, exit_s, _ = _round(cluster, producer, kill=False)
                    results["sigterm_exit"].append(exit_s or 0.0)
                    results["sigterm_ack"].append(ack_s)
                    bench.progress(
                        f"SIGTERM {i + 1}/{args.sigterm_rounds}: exit {exit_s:.2f} s, "
                        f"first ack on the successor {ack_s:.2f} s"
                    )
                for i in range(args.kill_rounds):
                    ack_s, _, moved_s = _round(cluster, producer, kill=True)
                    results["kill_ack"].append(ack_s)
                    results["kill_moved"].append(moved_s)
                    bench.progress(
                        f"kill -9 {i + 1}/{args.kill_rounds}: new leader in Metadata "
                        f"{moved_s:.2f} s, first ack on the successor {ack_s:.2f} s"
                    )
            finally:
                producer.stop()
            errors = len(producer.errors)
            acked = len(producer.acks)
            lost = _check_read_back(cluster, producer)
    print(
        f"failover of an acks=all idempotent producer, 3 brokers, {args.session_ms} ms "
        f"sessions, client topic.metadata.refresh.interval.ms {args.client_refresh_ms}"
    )
    print(f"  SIGTERM to exit                   {_stats(results['sigterm_exit'])}")
    print(f"  SIGTERM to first ack on successor {_stats(results['sigterm_ack'])}")
    print(f"  kill -9 to new leader in Metadata {_stats(results['kill_moved'])}")
    print(f"  kill -9 to first ack on successor {_stats(results['kill_ack'])}")
    print(f"  {acked} acknowledged, {errors} delivery errors, {lost} acknowledged not read back")


def _check_read_back(cluster, producer: StreamingProducer) -> int:
    """How many acknowledged records are not at their offset in the partition."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "bench-read-back",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    want = dict(producer.values)
    got: dict[int, bytes] = {}
    end = max(want, default=-1)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not got or max(got) < end):
        for m in consumer.consume(1000, timeout=1):
            if m.error() is None:
                got[m.offset()] = m.value()
    consumer.close()
    return sum(1 for o, v in want.items() if got.get(o) != v)


if __name__ == "__main__":
    main()
