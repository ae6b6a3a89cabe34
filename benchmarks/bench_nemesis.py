"""The nemesis soak: every fault of tests/cluster/nemesis.py, many times, under the
workload, each run proved by the history checker (tests/cluster/history.py); then a table
of what it found: safety (acknowledged records lost, duplicated or moved: must be 0) and
availability (the longest a partition went without an acks=all acknowledgement, the
longest until every replica was back in every ISR), and for the faults that cut a live
leader off, how long before the controller's election it had given its leaderships up.

    sudo .venv/bin/python benchmarks/bench_nemesis.py [--smoke] [--rounds 2]
        [--injections 9] [--hold 8] [--faults kill-leader,isolate-leader,...] [--keep]
        [--override replica.socket.timeout.ms=3000 ...]

Brokers and ZooKeeper run on network namespaces of their own (root, iproute2 and iptables
needed: .ci/run installs them); faults drop packets with iptables, kill -9, SIGSTOP,
restart ZooKeeper. A round is one fresh 3-broker cluster (6 s ZooKeeper sessions) in which
the fault is injected `--injections` times, each once the cluster is whole again, on the
leader of that moment (or the controller). The default, 15 faults x 2 rounds x 9
injections, is 270 injections (over an hour here). A failed check stops nothing: it is
counted and printed with the run's directory kept. Progress goes to stderr, the table to
stdout. No assertion on speed.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [
    str(Path(__file__).resolve().parent),
    str(ROOT / "tests" / "cluster"),
    str(ROOT / "tests"),
]

import run as bench  # noqa: E402  (benchmarks/run.py: progress)
from nemesis import FAULTS, SESSION_TIMEOUT_S, NetCluster, run_scenario, save_logs  # noqa: E402
from netlab import NetLab, skip_reason  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="one injection of one fault")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--injections", type=int, default=9)
    parser.add_argument("--hold", type=float, default=8.0, help="seconds each fault lasts")
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker config for every broker of the run (again for more)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep every round's directory (broker logs, the producer's eos log), not "
        "only those of failed rounds",
    )
    parser.add_argument(
        "--producer-debug",
        default="eos",
        metavar="CONTEXTS",
        help="librdkafka debug contexts of the acks=all producer's log (producer-eos.log in "
        "the round's directory; with --keep): e.g. eos,broker,protocol,msg",
    )
    parser.add_argument(
        "--probe",
        action="store_true",
        help="sample the clients' TCP connections to the brokers (ss -tin, every 0.25 s) "
        "each host's iptables counters and each broker's own ss (every 0.5 s) into probe.log in the round's "
        "directory (with --keep)",
    )
    parser.add_argument(
        "--fresh-clusters",
        type=int,
        default=0,
        metavar="N",
        help="only this: N fresh clusters, each creating a topic with RF 3 as soon as a "
        "broker's Metadata lists three brokers",
    )
    args = parser.parse_args(argv)
    faults = args.faults.split(",")
    if args.smoke:
        faults, args.rounds, args.injections, args.hold = ["isolate-leader"], 1, 1, 8.0
    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        parser.error(f"unknown faults {unknown}; known: {', '.join(FAULTS)}")
    reason = skip_reason()
    if reason is not None:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    if args.fresh_clusters:
        return fresh_clusters(args.fresh_clusters)

    overrides = dict(o.split("=", 1) for o in args.override)
    rows = []
    failures = 0
    with NetLab() as lab:
        for fault in faults:
            outcomes = []
            failed = []
            for r in range(args.rounds):
                base = Path(tempfile.mkdtemp(prefix=f"nemesis-{fault}-"))
                bench.progress(
                    f"{fault}: round {r + 1}/{args.rounds}, {args.injections} injections"
                )
                began = time.monotonic()
                try:
                    with (
                        NetCluster(lab, base, overrides=overrides) as cluster,
                        Probe(lab, base / "probe.log") if args.probe else contextlib.nullcontext(),
                    ):
                        outcome = run_scenario(
                            cluster,
                            lab,
                            fault,
                            hold_s=args.hold,
                            injections=args.injections,
                            producer_debug=args.producer_debug,
                        )
                        if args.keep:
                            save_logs(cluster, base)
                    outcomes.append(outcome)
                    if not args.keep:
                        shutil.rmtree(base, ignore_errors=True)
                    ahead = outcome.deposed_ahead_s
                    bench.progress(
                        f"  {time.monotonic() - began:.0f} s: {outcome.report}"
                        + (f"; deposed {ahead:.2f} s or more ahead" if ahead is not None else "")
                        + f"; faults (victim, began, ended) {list(outcome.fault_times)}"
                        + (f"; kept in {base}" if args.keep else "")
                    )
                except Exception as exc:  # a finding: counted, printed, its data kept
                    failed.append(f"{type(exc).__name__}: {str(exc)[:300]} ({base})")
                    # The whole message (the brokers' lines the checker attaches) to stderr:
                    # the log dirs are tmpfs mounts, gone with the cluster.
                    bench.progress(f"  FAILED: {type(exc).__name__}: {exc} ({base})")
            failures += len(failed)
            rows.append((fault, outcomes, failed))

    print(
        "\n| fault | injections | failed checks | acks=all acknowledged, all read back once | "
        "acks=1 lost in Kafka's window | acks=1 lost after expiry known | longest gap s | "
        "longest until whole s | deposed ahead of the election, least s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    total = 0
    for fault, outcomes, failed in rows:
        injections = sum(o.injections for o in outcomes) + len(failed) * args.injections
        total += injections
        acked = sum(o.report.acked_all for o in outcomes)
        lost_one = sum(o.report.lost_one - o.report.lost_one_after_expiry for o in outcomes)
        lost_after = sum(o.report.lost_one_after_expiry for o in outcomes)
        gap = max((o.report.longest_gap_s for o in outcomes), default=float("nan"))
        whole = max((o.whole_s for o in outcomes), default=float("nan"))
        aheads = [o.deposed_ahead_s for o in outcomes if o.deposed_ahead_s is not None]
        ahead = f"{min(aheads):.2f}" if aheads else "-"
        print(
            f"| {fault} | {injections} | {len(failed)} | {acked} | {lost_one} | "
            f"{lost_after} | {gap:.1f} | {whole:.1f} | {ahead} |"
        )
    print(
        f"\n{total} injections, {failures} failed checks; ZooKeeper session "
        f"{SESSION_TIMEOUT_S:.0f} s, each fault held {args.hold:.0f} s."
    )
    for fault, _, failed in rows:
        for f in failed:
            print(f"- {fault}: {f}")
    return 1 if failures else 0


class Probe:
    """A thread writing, with wall-clock times as the brokers' logs show them, `ss -tinp` of
    this process's side of every connection to a broker (port 9092: the workload's clients,
    each with its fd, as librdkafka's `broker` debug names the socket it connects;
    rto, backoff, unacked, retrans, lastsnd/lastrcv say whether a request waits on TCP's
    retransmission backoff) every `every_s`; every `rules_every_s`, each host's iptables
    rules with their packet counters (a fault's drops) and each broker's own `ss -tin` (the
    connections it serves and those it fetches on)."""

    def __init__(self, lab: NetLab, path: Path, every_s: float = 0.25, rules_every_s: float = 0.5):
        import threading

        self.lab = lab
        self.path = path
        self.every_s = every_s
        self.rules_every_s = rules_every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        import subprocess

        def now() -> str:
            at = time.time()
            return time.strftime("%H:%M:%S", time.localtime(at)) + f",{int(at % 1 * 1000):03d}"

        def run(args: list[str]) -> str:
            try:
                done = subprocess.run(args, capture_output=True, text=True, timeout=5)
                return done.stdout
            except (OSError, subprocess.SubprocessError) as exc:
                return f"{exc!r}\n"

        next_rules = 0.0
        with open(self.path, "w") as out:
            while not self._stop.wait(self.every_s):
                text = run(["ss", "-tinp", "state", "established", "( dport = :9092 )"])
                out.write(f"=== {now()} ss\n{text}")
                if time.monotonic() >= next_rules:
                    next_rules = time.monotonic() + self.rules_every_s
                    for name, host in list(self.lab.hosts.items()):
                        rules = run(
                            host.command(["iptables", "-w", "-L", "INPUT", "-v", "-x", "-n"])
                        )
                        if "DROP" in rules:
                            out.write(f"=== {now()} iptables {name} ({host.address})\n{rules}")
                        if name != "zk":  # the brokers' own side: served and fetching
                            text = run(
                                host.command(
                                    ["ss", "-tin", "state", "established",
                                     "( sport = :9092 or dport = :9092 )"]
                                )
                            )  # fmt: skip
                            out.write(f"=== {now()} ss {name} ({host.address})\n{text}")
                out.flush()


def fresh_clusters(n: int) -> int:
    """A script that starts a cluster, waits until Metadata lists every broker and then
    creates its topics: CreateTopics with RF 3 on the first try, n fresh clusters."""
    from confluent_kafka.admin import AdminClient, NewTopic

    sys.path.insert(0, str(ROOT / "tests"))
    from clustertest_helpers import eventually
    from wire import request_of, roundtrip

    def listed(host: str, port: int) -> int:
        import socket

        with socket.create_connection((host, port), timeout=5) as sock:
            return len(roundtrip(sock, request_of(3, topics=[]), 1).brokers)

    ok = 0
    failures = []
    with NetLab() as lab:
        for i in range(n):
            base = Path(tempfile.mkdtemp(prefix="fresh-"))
            with NetCluster(lab, base, wait_all_see=False, together=True) as cluster:
                # Started together: whichever lists all three first is asked; the client's
                # CreateTopics goes to the controller, which may learn of them later.
                b = cluster.brokers[3]
                eventually(lambda b=b: listed(b.host, b.port) == 3, budget_s=30, what="three")
                admin = AdminClient({"bootstrap.servers": b.bootstrap})
                future = admin.create_topics([NewTopic("first", 3, 3)], request_timeout=30)
                try:
                    future["first"].result(30)
                    ok += 1
                except Exception as exc:  # the finding: counted and printed
                    failures.append(str(exc))
                bench.progress(
                    f"fresh cluster {i + 1}/{n}: {'ok' if not failures or ok == i + 1 else failures[-1]}"
                )
            shutil.rmtree(base, ignore_errors=True)
    print(f"\nCreateTopics RF 3 at once on a fresh cluster: {ok} of {n} succeeded")
    for f in failures:
        print(f"- {f}")
    return 0 if ok == n else 1


if __name__ == "__main__":
    raise SystemExit(main())
