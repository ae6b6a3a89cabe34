"""Controller reaction times: how long until every surviving broker's Metadata names new
leaders for the partitions of a broker that was killed (kill -9) or stopped (SIGTERM,
controlled shutdown), on a cluster of three brokers and Debian's ZooKeeper.

    .venv/bin/python benchmarks/bench_failover.py [--smoke] [--rounds 10] [--session-ms 6000]

Brokers 1 and 2 run in this process (threads), broker 3 as a child process. Each round
makes broker 3 the leader of its preferred partitions again (its ISR membership written
back as a leader would, then ElectLeaders), then kills or stops it, and times from the
signal until both survivors describe no partition led by broker 3. kill -9 rounds wait
for the ZooKeeper session (--session-ms) to expire; SIGTERM rounds do not.

This is the controller's part only: the time until clients are told. The issue's figure
(to the first acknowledged produce on the successor) needs the replicas' half too.
Progress goes to stderr, one table to stdout. No assertion on speed.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import run as bench  # noqa: E402  (benchmarks/run.py: progress)
from wire import request_of, roundtrip  # noqa: E402

from trio_broker.testing import BrokerProcess, KafkaCluster, ZooKeeperServer  # noqa: E402

TOPIC = "failover"


def _leaders(bootstrap: str) -> dict[int, int]:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        m = roundtrip(sock, request_of(3, topics=None, allow_auto_topic_creation=False), 12)
    return {
        p.partition_index: p.leader_id for t in m.topics if t.name == TOPIC for p in t.partitions
    }


def _wait(check, budget_s: float = 60) -> None:
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.005)
    raise TimeoutError("the cluster did not get there")


def _rejoin(kz, root: str, partitions: list[int]) -> None:
    """Broker 3 back in the ISRs (as their leaders would write), then preferred elections."""
    for p in partitions:
        path = f"{root}/brokers/topics/{TOPIC}/partitions/{p}/state"
        data, stat = kz.get(path)
        state = json.loads(data)
        if 3 not in state["isr"]:
            state["isr"].append(3)
            kz.set(path, json.dumps(state).encode(), version=stat.version)
    change = {"version": 1, "partitions": [{"topic": TOPIC, "partition": p} for p in partitions]}
    kz.create(
        f"{root}/isr_change_notification/isr_change_", json.dumps(change).encode(), sequence=True
    )


def _make_preferred_leader(ctl, tps, survivors, preferred: list[int]) -> None:
    """ElectLeaders until both survivors describe broker 3 leading its preferred partitions
    (the controller may not have read the ISR change yet)."""
    from confluent_kafka import ElectionType

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ctl.elect_leaders(ElectionType.PREFERRED, tps).result(10)
        if all(_leaders(b.bootstrap).get(p) == 3 for b in survivors for p in preferred):
            return
        time.sleep(0.1)
    raise TimeoutError("broker 3 did not become leader again")


def main(argv: list[str] | None = None) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from kazoo.client import KazooClient

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="2 rounds, 4 s sessions")
    parser.add_argument("--rounds", type=int, default=10, help="kill -9 and SIGTERM rounds each")
    parser.add_argument("--session-ms", type=int, default=6000)
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.session_ms = 1, 4000
    overrides = {
        "zookeeper.session.timeout.ms": str(args.session_ms),
        "auto.leader.rebalance.enable": "false",
    }
    results: dict[str, list[float]] = {"kill -9": [], "SIGTERM": []}
    with tempfile.TemporaryDirectory() as tmp, ZooKeeperServer() as zk:
        cluster = KafkaCluster(zk, base_dir=tmp, size=2, overrides=overrides)
        with cluster:
            config = cluster.broker_config(3)
            config["listeners"] = f"PLAINTEXT://127.0.0.1:{bench.free_port()}"
            victim = BrokerProcess(config)
            kz = KazooClient(hosts=zk.connect, timeout=10)
            kz.start(10)
            try:
                admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
                survivors = list(cluster.brokers.values())
                _wait(lambda: len(kz.get_children("/kafka/brokers/ids")) == 3)
                time.sleep(0.5)
                admin.create_topics([NewTopic(TOPIC, 6, 3)])[TOPIC].result()
                assignment = json.loads(kz.get(f"/kafka/brokers/topics/{TOPIC}")[0])["partitions"]
                preferred = sorted(int(p) for p, r in assignment.items() if r[0] == 3)
                for round_ in range(2 * args.rounds):
                    how = "kill -9" if round_ % 2 == 0 else "SIGTERM"
                    _rejoin(kz, "/kafka", preferred)
                    controller = json.loads(kz.get("/kafka/controller")[0])["brokerid"]
                    ctl = AdminClient({"bootstrap.servers": cluster.brokers[controller].bootstrap})
                    tps = [TopicPartition(TOPIC, p) for p in preferred]
                    _make_preferred_leader(ctl, tps, survivors, preferred)
                    started = time.perf_counter()
                    if how == "kill -9":
                        victim.kill()
                    else:
                        victim.proc.send_signal(15)
                    _wait(lambda: all(3 not in _leaders(b.bootstrap).values() for b in survivors))
                    took = time.perf_counter() - started
                    results[how].append(took)
                    bench.progress(f"round {round_ + 1}: {how}: leaders moved in {took:.3f} s")
                    if how == "SIGTERM":
                        victim.proc.wait(30)
                    victim = BrokerProcess(config)
                    _wait(lambda: len(kz.get_children("/kafka/brokers/ids")) == 3)
            finally:
                kz.stop()
                if victim.proc.poll() is None:
                    victim.kill()
    print(f"| how (session {args.session_ms} ms) | rounds | p50 s | max s |")
    print("|---|---|---|---|")
    for how, times in results.items():
        print(f"| {how} | {len(times)} | {statistics.median(times):.3f} | {max(times):.3f} |")


if __name__ == "__main__":
    main()
