"""An idle cluster's CPU: what the followers' fetches cost the leaders (Session 23).

    .venv/bin/python benchmarks/idle_fetch.py [--partitions 3000] [--idle-s 20]
        [--base REV [--new-from REV]] [--rounds 3] [--profile DIR]

ZooKeeper and three broker processes, --partitions partitions at replication factor 3
(topics of 100), nothing produced: the followers only fetch, in their sessions. Once every
broker's Metadata shows every partition with a full ISR (and 5 s more), each broker's CPU
(user + system, /proc/PID/stat; 1.0 = one core) over --idle-s seconds is printed, with its
busiest threads, and the cluster's CPU per Fetch answered in that window (the count from
each broker's Prometheus text, metrics.listener): a loaded machine slows the fetch cycles,
and with them the idle CPU, so the figure per fetch is the one to compare under load.

With --base REV, the brokers of every other run are that commit's (a detached `git worktree`
under /tmp, imported in place of this checkout), alternating with this checkout's, and the
ratios this/base of each pair are printed: the machine is shared and noisy, so a ratio of
runs in the same minutes says more than either figure. --new-from REV takes the "new" side
from a worktree too: REV's tree with this checkout's uncommitted change to the files named
by `--files` (default: none), so that others' work in progress is not in it.

With --profile DIR, py-spy records every broker during the idle window of each run
(DIR/<run>-broker-N.txt, raw) and the heaviest project functions are printed.
"""

from __future__ import annotations

import argparse
import os
import runpy
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run_broker_from(root: str, argv: list[str]) -> None:
    """`--as ROOT python -m trio_broker serve ...`: BrokerProcess's prefix, running the
    broker in this process with trio_broker imported from ROOT."""
    from bench_old_formats import _CheckoutFinder

    sys.meta_path.insert(0, _CheckoutFinder(Path(root)))
    assert argv[1:3] == ["-m", "trio_broker"], argv
    sys.argv = ["trio_broker", *argv[3:]]
    runpy.run_module("trio_broker", run_name="__main__", alter_sys=True)


def worktree(rev: str, patch: bytes = b"") -> Path:
    tree = Path(tempfile.mkdtemp(prefix="bench-idle-fetch-"))
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev],
        check=True,
        capture_output=True,
    )
    if patch:
        subprocess.run(["git", "-C", str(tree), "apply"], input=patch, check=True)
    return tree


def drop_worktree(tree: Path) -> None:
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
        check=False,
        capture_output=True,
    )


def cpu_s(pid: int, tid: str = "") -> float:
    stat = Path(f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat")
    fields = stat.read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of `pid`, by "tid name"."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            out[f"{task.name} {name}"] = cpu_s(pid, task.name)
        except OSError:
            continue  # the thread ended
    return out


def fetches_answered(metrics_listener: str) -> int:
    """Fetch requests the broker has answered (its Prometheus text)."""
    import urllib.request

    with urllib.request.urlopen(metrics_listener + "/metrics", timeout=60) as answer:
        text = answer.read().decode()
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("kafka_network_requestmetrics_requests_total{")
        and 'request="Fetch"' in line
    )


def one_run(zk, root: Path, name: str, args: argparse.Namespace, base_dir: Path) -> list[float]:  # noqa: ANN001
    from bench_scale import Profiler, create, leaders, settled, wait_for

    from trio_broker.testing import BrokerProcess, KafkaCluster, free_port

    per_topic = 100
    topics = [f"scale-{i:05d}" for i in range(args.partitions // per_topic)]
    count = len(topics) * per_topic
    overrides = {"num.partitions": "1", "auto.create.topics.enable": "false"}
    cluster = KafkaCluster(
        zk, base_dir=base_dir / name, chroot=f"/{name}", overrides=overrides, processes=True
    )
    # Each broker runs through this script, importing trio_broker from `root`.
    prefix = [sys.executable, str(Path(__file__).resolve()), "--as", str(root)]
    try:
        for node_id in range(1, 4):
            config = cluster.broker_config(node_id)
            config["listeners"] = f"PLAINTEXT://127.0.0.1:{free_port()}"
            config["metrics.listener"] = f"http://127.0.0.1:{free_port()}"
            cluster.brokers[node_id] = BrokerProcess(config, prefix=prefix)
        cluster.wait_all_see()
    except BaseException:
        cluster.stop()
        raise
    try:
        ports = {b: broker.port for b, broker in cluster.brokers.items()}
        controller, _ = leaders(ports[1])
        started = time.perf_counter()
        create(ports[controller], topics, per_topic, replication_factor=3)

        took = wait_for("full ISRs everywhere", lambda: settled(ports.values(), count), started)
        time.sleep(5)
        profiler = Profiler(str(Path(args.profile)) if args.profile else None)
        pids = {b: x.proc.pid for b, x in cluster.brokers.items()}
        profiler_paths = []
        if args.profile:
            first, *rest = sorted(pids)
            profiler.start(
                pids[first], f"{name}-broker-{first}", *((pids[b], f"b{b}") for b in rest)
            )
            profiler_paths = list(profiler.recording)
        listeners = {b: x.overrides["metrics.listener"] for b, x in cluster.brokers.items()}
        fetches_before = sum(fetches_answered(m) for m in listeners.values())
        before = {b: cpu_s(pid) for b, pid in pids.items()}
        threads_before = {b: thread_cpu_s(pid) for b, pid in pids.items()}
        load = os.getloadavg()[0]
        time.sleep(args.idle_s)
        cpu = [(cpu_s(pid) - before[b]) / args.idle_s for b, pid in sorted(pids.items())]
        fetches = sum(fetches_answered(m) for m in listeners.values()) - fetches_before
        # The cluster's CPU per fetch answered (both sides of it: the leader's handling and
        # the follower's fetcher): a loaded machine slows the fetch cycles, and with them
        # the idle CPU, so this says more than the CPU alone.
        per_fetch_ms = sum(cpu) * args.idle_s * 1000 / max(fetches, 1)
        for b, pid in sorted(pids.items()):
            after = thread_cpu_s(pid)
            busy = sorted(
                ((after[t] - threads_before[b].get(t, 0.0), t) for t in after), reverse=True
            )
            print(
                f"  broker {b} threads: "
                + ", ".join(f"{t} {c * 100 / args.idle_s:.1f}%" for c, t in busy[:4]),
                flush=True,
            )
        if args.profile:
            profiler.stop()
            print(summarize([Path(path) for _, path in profiler_paths]), flush=True)
        print(
            f"{name}: settled {took:.1f} s after create began; idle CPU per broker "
            + " / ".join(f"{c * 100:.1f}%" for c in cpu)
            + f" (load {load:.1f} -> {os.getloadavg()[0]:.1f}); {fetches} fetches answered,"
            f" {per_fetch_ms:.2f} ms of CPU each",
            flush=True,
        )
        return cpu, per_fetch_ms
    finally:
        cluster.stop()
        # 30,000 partition dirs a run at 10,000: gone now, not all at the end.
        shutil.rmtree(base_dir / name, ignore_errors=True)


def summarize(paths: list[Path], top: int = 30) -> str:
    """Inclusive and leaf samples of each function (file, no line) in py-spy raw profiles,
    counted below the event loop, as % of all samples."""
    inclusive: dict[str, int] = {}
    leaf: dict[str, int] = {}
    total = 0
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not count.isdigit():
                continue
            n = int(count)
            total += n
            frames = [f.split(":")[0] + ")" for f in stack.split(";")]
            for i, f in enumerate(frames):
                if f.startswith("unrolled_run "):
                    frames = frames[i + 1 :]
                    break
            for f in set(frames):
                inclusive[f] = inclusive.get(f, 0) + n
            if frames:
                leaf[frames[-1]] = leaf.get(frames[-1], 0) + n
    rows = sorted(inclusive.items(), key=lambda kv: -kv[1])[:top]
    out = [f"  {n * 100 / max(total, 1):5.1f}% incl  {f}" for f, n in rows]
    rows = sorted(leaf.items(), key=lambda kv: -kv[1])[: top // 2]
    out += [f"  {n * 100 / max(total, 1):5.1f}% self  {f}" for f, n in rows]
    return "\n".join(out) + f"\n  ({total} samples)"


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--as":
        _run_broker_from(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=3000)
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--base", help="a commit to alternate with")
    parser.add_argument("--new-from", help="the new side: this commit plus --files' change")
    parser.add_argument("--files", nargs="*", default=[])
    parser.add_argument("--profile", help="py-spy raw profiles into this folder")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from trio_broker.testing import ZooKeeperServer

    trees: list[Path] = []
    new_root = REPO
    try:
        if args.new_from:
            patch = b""
            if args.files:  # (no paths would diff the whole tree: others' work too)
                patch = subprocess.run(
                    ["git", "-C", str(REPO), "diff", args.new_from, "--", *args.files],
                    check=True,
                    capture_output=True,
                ).stdout
            new_root = worktree(args.new_from, patch)
            trees.append(new_root)
        sides = [("new", new_root)]
        if args.base:
            trees.append(worktree(args.base))
            sides.append(("old", trees[-1]))
        results: dict[str, list[float]] = {side: [] for side, _ in sides}
        per_fetch: dict[str, list[float]] = {side: [] for side, _ in sides}
        with (
            tempfile.TemporaryDirectory(prefix="bench-idle-fetch-") as tmp,
            ZooKeeperServer() as zk,
        ):
            for r in range(args.rounds):
                # Alternate which side goes first, so that neither always follows the other.
                order = sides if r % 2 == 0 else sides[::-1]
                for side, root in order:
                    cpu, ms = one_run(zk, root, f"{side}{r}", args, Path(tmp))
                    results[side].append(statistics.mean(cpu))
                    per_fetch[side].append(ms)
        for side, values in results.items():
            print(
                f"{side}: mean CPU per broker per run "
                + ", ".join(f"{v * 100:.1f}%" for v in values)
            )
        if args.base:
            ratios = [n / o for n, o in zip(results["new"], results["old"], strict=True)]
            print("new/old per round: " + ", ".join(f"{x:.2f}" for x in ratios))
            ratios = [n / o for n, o in zip(per_fetch["new"], per_fetch["old"], strict=True)]
            print("CPU per fetch, new/old per round: " + ", ".join(f"{x:.2f}" for x in ratios))
    finally:
        for tree in trees:
            drop_worktree(tree)


if __name__ == "__main__":
    main()
