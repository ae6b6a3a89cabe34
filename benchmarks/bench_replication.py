"""Replication benchmark: acks=all with replication factor 3 beside acks=1 with replication
factor 1, on one ZooKeeper and three trio-broker processes sharing this machine.

    .venv/bin/python benchmarks/bench_replication.py [--smoke] [--records 1000000]
        [--record-size 1024] [--cold]

The RF1 phase runs on a lone broker process first. For RF3 the cluster's controller
creates the topic (CreateTopics with the assignment [1, 2, 3]: broker 1 leads). One
confluent-kafka producer writes --records records of --record-size bytes to partition 0,
with acks=1 to the lone broker, then with acks=all to broker 1 (the followers fetch from
it). "broker 1" of the RF1 column is the lone broker. Reported: MB/s of records offered,
each broker's CPU seconds per GB produced (and the kernel's share of them), and the
`os.sendfile` calls broker 1 made against the bytes they moved (in the RF3 phase, all of
its sendfile traffic serves the two followers: nothing consumes). No assertion on speed.

Each phase starts on recycled page cache: just before it, a scratch file as large as what
the phase appends on all its brokers (records x replicas) is written and deleted. A broker
that has run a while writes into memory its page cache gave back; a VM that returns free
memory to its host (this project's machine) instead pays for memory untouched for a few
seconds as it would for new memory: a single writer's 1 GiB took 0.23 kernel CPU s/GB
into freshly freed memory and 2.3 s/GB beyond it. Without the warm-up the acks=all phase,
which writes three times the bytes and runs second, would measure mostly that. `--cold`
leaves it out, to see the difference.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402  (benchmarks/run.py: cpu_user_system, progress)

from trio_broker.testing import BrokerProcess, ZooKeeperServer, wait_all_see  # noqa: E402

CHROOT = "/bench"
MiB = 1 << 20


def _create_rf3(bootstrap: str, topic: str, replicas: list[int]) -> None:
    """CreateTopics with the assignment `replicas` (the first leads); returns once the
    controller made it so: broker 1 leads with all three in the ISR."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, 1, replica_assignment=[replicas])], operation_timeout=30
    )
    futures[topic].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and 0 in md.partitions:
            p = md.partitions[0]
            if p.leader == replicas[0] and len(p.isrs) == len(replicas):
                return
        time.sleep(0.05)
    raise RuntimeError(f"{topic} has no leader {replicas[0]} with a full ISR")


def _produce(bootstrap: str, topic: str, n: int, size: int, acks: str) -> float:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "acks": acks}
    )
    value = b"x" * size
    started = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(300) != 0:
        raise RuntimeError("records left unsent")
    return time.perf_counter() - started


def warm_page_cache(directory: Path, nbytes: int) -> None:
    """Write `nbytes` into a scratch file in `directory` and delete it: the next writes
    (the brokers') reuse the page cache it freed (see the module docstring)."""
    chunk = b"w" * MiB
    path = directory / "warm-page-cache.tmp"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    try:
        for _ in range(max(1, nbytes // MiB)):
            os.write(fd, chunk)
    finally:
        os.close(fd)
        path.unlink()


def _phase(brokers, leader, topic, n, size, acks, warm: Path | None) -> dict[str, float]:
    if warm is not None:
        replicas = len(brokers)  # the RF1 phase has the lone broker, RF3 three brokers
        # A tenth more than the records themselves: batch headers and index entries.
        warm_page_cache(warm, int(n * size * replicas * 1.1))
    before = {node: bench.cpu_user_system(b.proc.pid) for node, b in brokers.items()}
    seconds = _produce(leader.bootstrap, topic, n, size, acks)
    # Followers finish fetching what was acknowledged after the last answer (acks=1).
    time.sleep(1)
    gb = n * size / 1e9
    out = {"MB/s": n * size / 1e6 / seconds, "seconds": seconds}
    for node, broker in brokers.items():
        user_after, system_after = bench.cpu_user_system(broker.proc.pid)
        user, system = user_after - before[node][0], system_after - before[node][1]
        out[f"broker {node} CPU s/GB"] = (user + system) / gb
        out[f"broker {node} system s/GB"] = system / gb
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument(
        "--cold", action="store_true", help="no page cache warm-up before each phase"
    )
    args = parser.parse_args(argv)
    n = 5_000 if args.smoke else args.records
    size = args.record_size
    workdir = Path(tempfile.mkdtemp(prefix="bench-replication-"))
    warm = None if args.cold else workdir
    brokers: dict[int, BrokerProcess] = {}
    alone = None
    try:
        # acks=1 RF1: a lone broker (until UpdateMetadata, a cluster's brokers other than
        # a topic's replicas do not know the topic, and clients may ask them).
        alone = BrokerProcess({"log.dirs": str(workdir / "alone")})
        from trio_broker.perf import ensure_topic

        ensure_topic(alone.bootstrap, "rf1", 1)
        bench.progress(f"acks=1 RF1 on a lone broker: {n} records of {size} bytes")
        one = _phase({1: alone}, alone, "rf1", n, size, "1", warm)
        for node in (2, 3):
            one[f"broker {node} CPU s/GB"] = one[f"broker {node} system s/GB"] = 0.0
        alone.stop()
        with ZooKeeperServer() as zookeeper:
            bench.progress(f"ZooKeeper on {zookeeper.connect}")
            for node in (1, 2, 3):
                brokers[node] = BrokerProcess(
                    {
                        "node.id": str(node),
                        "log.dirs": str(workdir / f"broker-{node}"),
                        "zookeeper.connect": zookeeper.connect + CHROOT,
                        "auto.create.topics.enable": "false",
                    }
                )
            wait_all_see(brokers)  # else broker 1 may not know broker 3 yet
            _create_rf3(brokers[1].bootstrap, "rf3", [1, 2, 3])
            bench.progress(f"acks=all RF3: {n} records of {size} bytes")
            three = _phase(brokers, brokers[1], "rf3", n, size, "all", warm)
            for node in (3, 2, 1):
                brokers[node].stop()
            stats = None
            for line in brokers[1].lines:
                m = re.search(r"sendfile: (\d+) calls, (\d+) bytes", line)
                if m:
                    stats = (int(m.group(1)), int(m.group(2)))
            fetches = 0
            for node in (2, 3):
                for line in brokers[node].lines:
                    m = re.search(r"fetched (\d+) times", line)
                    if m:
                        fetches += int(m.group(1))
        keys = ["MB/s", "seconds"] + [
            f"broker {b} {kind} s/GB" for b in (1, 2, 3) for kind in ("CPU", "system")
        ]
        print(f"{'':28} {'acks=1 RF1':>12} {'acks=all RF3':>13}")
        for key in keys:
            print(f"{key:28} {one[key]:12.2f} {three[key]:13.2f}")
        print(f"{'acks=all RF3 / acks=1 RF1':28} {three['MB/s'] / one['MB/s']:26.0%}")
        print(
            "page cache before each phase: " + ("as found (--cold)" if warm is None else "warmed")
        )
        if stats is not None:
            calls, moved = stats
            print(
                f"broker 1 sendfile to followers: {calls} calls, {moved / 1e6:.1f} MB, "
                f"{moved / max(calls, 1) / 1024:.0f} KiB per call; {fetches} follower fetches"
            )
        return 0
    finally:
        for broker in [*brokers.values(), *([alone] if alone else [])]:
            if broker.proc.poll() is None:
                broker.kill()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
