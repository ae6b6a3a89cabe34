"""Replication benchmark: acks=all with replication factor 3 beside acks=1 with replication
factor 1, on one ZooKeeper and three trio-broker processes sharing this machine.

    .venv/bin/python benchmarks/bench_replication.py [--smoke] [--records 1000000]
        [--record-size 1024] [--rounds 5] [--partitions 1] [--producers 1] [--cold]

A lone broker process serves acks=1 RF1. For RF3 the cluster's controller creates the
topic (CreateTopics with the assignment [1, 2, 3]: broker 1 leads). One confluent-kafka
producer writes records of --record-size bytes to partition 0, with acks=1 to the lone
broker, then with acks=all to broker 1 (the followers fetch from it). "broker 1" of the RF1
column is the lone broker. The --records are split into --rounds rounds; each round runs
the acks=1 phase then the acks=all phase, so that both see the machine in the same state,
and the table sums the rounds: MB/s of records offered (all bytes over all seconds), the
producer's CPU seconds per GB (this process: the load shares the two cores with the
brokers), each broker's CPU seconds per GB produced (and the kernel's share of them), the
whole machine's (every process, kernel threads and interrupts: what the columns above
leave out) and what the hypervisor stole from it (/proc/stat), the acks=all / acks=1
ratio with its lowest, median and highest round, and the `os.sendfile` calls the RF3
brokers made against the bytes they moved (all of it serves followers: nothing
consumes). No assertion on speed.

Why rounds: page cache on this machine. Its VM hands memory freed in the guest back to the
host within seconds (free page reporting), and a write into a page the host took back costs
the host's fault as well: 1 MiB writes into a file ran at 0.3 kernel CPU s/GiB into memory
freed a moment before and at 2.2 s/GiB beyond it (`run.py` notes the same). Each phase
therefore starts on recycled page cache: just before it, a scratch file as large as what
the phase appends on all its brokers (records x replicas) is written and deleted, as a
broker that has run a while writes into memory its page cache gave back. That holds only
for a phase short enough to use the memory before the host takes it back: with one round
of 1 GB, the acks=all phase (3 GB of appends over 8 s) wrote most of it beyond, and its
followers paid twice the kernel CPU per GB that they pay within it, while the acks=1 phase
(1 GB in 3 s) stayed within. Rounds of 200 MB keep both phases within. `--rounds 1`
measures the old way; `--cold` leaves the warm-up out.

`--producers N` runs N producer processes at once in both phases, each writing records / N
(their CPU is the producer's; MB/s counts from the first start to the last end). A
broker reads a connection's next request only after answering the last, so with one
producer the leader waits for its followers between produces; N connections keep it busy
meanwhile.

`--partitions N` (N > 1) adds a second layout after the first: N partitions, records
spread round them, on the lone broker and then with replicas [1, 2, 3] rotated per
partition so that the three brokers lead in turn (Kafka's own acks=all benchmark used six
partitions). Each layout is its own pair of columns.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
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


def assignment(partitions: int) -> list[list[int]]:
    """Partition p's replicas: [1, 2, 3] rotated by p, so leadership goes round the brokers
    (Kafka's round-robin assignment, without its random start)."""
    return [[(p + i) % 3 + 1 for i in range(3)] for p in range(partitions)]


def _create_rf3(bootstrap: str, topic: str, replicas: list[list[int]]) -> None:
    """CreateTopics with the assignment `replicas` (per partition, the first leads); returns
    once the controller made it so: each partition's first replica leads with all three in
    the ISR."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, len(replicas), replica_assignment=replicas)], operation_timeout=30
    )
    futures[topic].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == len(replicas):
            parts = md.partitions
            if all(
                parts[p].leader == r[0] and len(parts[p].isrs) == len(r)
                for p, r in enumerate(replicas)
            ):
                return
        time.sleep(0.05)
    raise RuntimeError(f"{topic}: not every partition has its first replica leading a full ISR")


def _produce(bootstrap: str, topic: str, n: int, size: int, acks: str, partitions: int) -> float:
    return _produce_timed(bootstrap, topic, n, size, acks, partitions)[1]


def _produce_timed(
    bootstrap: str, topic: str, n: int, size: int, acks: str, partitions: int
) -> tuple[float, float, float, float]:
    """(wall-clock start, seconds, CPU seconds, wall-clock end) of producing n records."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "acks": acks}
    )
    value = b"x" * size
    producer.list_topics(topic, timeout=30)  # connected before the clock starts
    cpu = _cpu_seconds()
    wall = time.time()
    started = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(300) != 0:
        raise RuntimeError("records left unsent")
    seconds = time.perf_counter() - started
    return wall, seconds, _cpu_seconds() - cpu, time.time()


def _produce_in_processes(
    producers: int, bootstrap: str, topic: str, n: int, size: int, acks: str, partitions: int
) -> tuple[float, float]:
    """`producers` processes (spawned: librdkafka's threads do not survive a fork), each
    producing n / producers records at once: (seconds from the first start to the last
    end, their CPU seconds)."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    with context.Pool(producers) as pool:
        results = pool.starmap(
            _produce_timed,
            [(bootstrap, topic, n // producers, size, acks, partitions)] * producers,
        )
    start = min(r[0] for r in results)
    end = max(r[3] for r in results)
    return end - start, sum(r[2] for r in results)


def _cpu_seconds() -> float:
    """User and system CPU seconds of this process, librdkafka's threads included."""
    times = os.times()
    return times.user + times.system


def machine_cpu() -> tuple[float, float]:
    """Seconds the whole machine's CPUs were busy (every process and the kernel's own
    threads, interrupts included) and seconds the hypervisor ran something else on them
    (steal), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    ticks = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq) / ticks, steal / ticks


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


def _phase(
    brokers, leader, topic, n, size, acks, partitions, warm: Path | None, producers: int = 1
) -> dict[str, float]:
    """One phase: its seconds, bytes, the producer's CPU seconds and each broker's user and
    system CPU seconds (sums: `_add` adds rounds, `_per_gb` makes the table's rows)."""
    if warm is not None:
        replicas = len(brokers)  # the RF1 phase has the lone broker, RF3 three brokers
        # A tenth more than the records themselves: batch headers and index entries.
        warm_page_cache(warm, int(n * size * replicas * 1.1))
    before = {node: bench.cpu_user_system(b.proc.pid) for node, b in brokers.items()}
    machine_before = machine_cpu()
    producer_before = _cpu_seconds()
    if producers > 1:
        seconds, children_cpu = _produce_in_processes(
            producers, leader.bootstrap, topic, n, size, acks, partitions
        )
        producer_before -= children_cpu
    else:
        seconds = _produce(leader.bootstrap, topic, n, size, acks, partitions)
    # Followers finish fetching what was acknowledged after the last answer (acks=1).
    time.sleep(1)
    # This process is the producer (confluent-kafka: its Python loop and librdkafka's
    # threads); the time.sleep above costs nothing.
    out = {"seconds": seconds, "bytes": n * size, "producer": _cpu_seconds() - producer_before}
    busy, steal = machine_cpu()
    out["machine"] = busy - machine_before[0]
    out["steal"] = steal - machine_before[1]
    for node in (1, 2, 3):
        out[f"user {node}"] = out[f"system {node}"] = 0.0
    for node, broker in brokers.items():
        user_after, system_after = bench.cpu_user_system(broker.proc.pid)
        out[f"user {node}"] = user_after - before[node][0]
        out[f"system {node}"] = system_after - before[node][1]
    return out


def _add(total: dict[str, float] | None, phase: dict[str, float]) -> dict[str, float]:
    return dict(phase) if total is None else {k: total[k] + phase[k] for k in total}


def _per_gb(total: dict[str, float]) -> dict[str, float]:
    """The table's rows from a layout's summed phases."""
    gb = total["bytes"] / 1e9
    out = {
        "MB/s": total["bytes"] / 1e6 / total["seconds"],
        "seconds": total["seconds"],
        "producer CPU s/GB": total["producer"] / gb,
        "machine CPU s/GB": total["machine"] / gb,
        "machine steal s/GB": total["steal"] / gb,
    }
    for node in (1, 2, 3):
        user, system = total[f"user {node}"], total[f"system {node}"]
        out[f"broker {node} CPU s/GB"] = (user + system) / gb
        out[f"broker {node} system s/GB"] = system / gb
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="rounds of an acks=1 phase then an acks=all phase, --records split among "
        "them (default 5; 1 with --smoke)",
    )
    parser.add_argument(
        "--producers",
        type=int,
        default=1,
        help="producer processes writing at once, in both phases (default 1)",
    )
    parser.add_argument(
        "--cold", action="store_true", help="no page cache warm-up before each phase"
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=1,
        help="with more than 1, a second layout of this many partitions, their leaders "
        "round the three brokers (Kafka's own acks=all benchmark used 6)",
    )
    args = parser.parse_args(argv)
    rounds = 1 if args.smoke else max(1, args.rounds)
    n = (5_000 if args.smoke else args.records) // rounds
    size = args.record_size
    layouts = [1] if args.partitions == 1 else [1, args.partitions]
    workdir = Path(tempfile.mkdtemp(prefix="bench-replication-"))
    warm = None if args.cold else workdir
    brokers: dict[int, BrokerProcess] = {}
    alone = None
    one: dict[int, dict[str, float]] = {}
    three: dict[int, dict[str, float]] = {}
    ratios: dict[int, list[float]] = {parts: [] for parts in layouts}
    try:
        # acks=1 RF1: a lone broker (until UpdateMetadata, a cluster's brokers other than
        # a topic's replicas do not know the topic, and clients may ask them). It idles
        # while the cluster works, and the cluster while it does.
        alone = BrokerProcess({"log.dirs": str(workdir / "alone")})
        from trio_broker.perf import ensure_topic

        for parts in layouts:
            ensure_topic(alone.bootstrap, f"rf1-{parts}", parts)
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
            for parts in layouts:
                _create_rf3(brokers[1].bootstrap, f"rf3-{parts}", assignment(parts))
            for r in range(rounds):
                for parts in layouts:
                    bench.progress(
                        f"round {r + 1}/{rounds}, {parts} partition(s): acks=1 RF1 on the lone "
                        f"broker, then acks=all RF3: {n} records of {size} bytes each"
                    )
                    rf1 = _phase(
                        {1: alone}, alone, f"rf1-{parts}", n, size, "1", parts, warm, args.producers
                    )
                    rf3 = _phase(
                        brokers,
                        brokers[1],
                        f"rf3-{parts}",
                        n,
                        size,
                        "all",
                        parts,
                        warm,
                        args.producers,
                    )
                    ratios[parts].append(rf1["seconds"] / rf3["seconds"])
                    one[parts] = _add(one.get(parts), rf1)
                    three[parts] = _add(three.get(parts), rf3)
            for node in (3, 2, 1):
                brokers[node].stop()
            calls = moved = fetches = 0
            for node in (1, 2, 3):
                for line in brokers[node].lines:
                    m = re.search(r"fetched (\d+) times.*sendfile: (\d+) calls, (\d+) bytes", line)
                    if m:
                        fetches += int(m.group(1))
                        calls += int(m.group(2))
                        moved += int(m.group(3))
        alone.stop()
        table = {parts: (_per_gb(one[parts]), _per_gb(three[parts])) for parts in layouts}
        keys = (
            ["MB/s", "seconds", "producer CPU s/GB"]
            + [f"broker {b} {kind} s/GB" for b in (1, 2, 3) for kind in ("CPU", "system")]
            + ["machine CPU s/GB", "machine steal s/GB"]
        )
        print(f"{'':28}" + "".join(f"{f'{parts} partition(s)':>27}" for parts in layouts))
        print(f"{'':28}" + f"{'acks=1 RF1':>13} {'acks=all RF3':>13}" * len(layouts))
        for key in keys:
            print(
                f"{key:28}"
                + "".join(f"{table[p][0][key]:13.2f} {table[p][1][key]:13.2f}" for p in layouts)
            )
        print(
            f"{'acks=all RF3 / acks=1 RF1':28}"
            + "".join(f"{table[p][1]['MB/s'] / table[p][0]['MB/s']:27.0%}" for p in layouts)
        )
        spread = []
        for parts in layouts:
            r = sorted(ratios[parts])
            spread.append(f"{r[0]:.0%} / {statistics.median(r):.0%} / {r[-1]:.0%}")
        print(f"{'rounds: low / median / high':28}" + "".join(f"{x:>27}" for x in spread))
        print(
            f"rounds: {rounds} of {n} records of {size} bytes per phase; page cache before each "
            "phase: " + ("as found (--cold)" if warm is None else "warmed")
        )
        print(
            f"sendfile to followers, all RF3 phases and brokers: {calls} calls, "
            f"{moved / 1e6:.1f} MB, {moved / max(calls, 1) / 1024:.0f} KiB per call; "
            f"{fetches} follower fetches"
        )
        return 0
    finally:
        for broker in [*brokers.values(), *([alone] if alone else [])]:
            if broker.proc.poll() is None:
                broker.kill()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
