"""A lone broker grown through thousands of partitions (issue 37): what each level costs.

    .venv/bin/python benchmarks/bench_scale.py [--levels 1000,5000,20000] [--connections 2000]
    .venv/bin/python benchmarks/bench_scale.py --quick       # levels 200,1000; 200 connections

One broker process on a fresh log dir. At each level, topics of --per-topic partitions are
created until the broker holds that many partitions, and one record is produced to every
new partition (acks=1). Then it prints, per level:

create         seconds for the CreateTopics requests of this level's new partitions
metadata       a Metadata request for all topics (median of 5, ms)
rss, fds       the broker's VmRSS and its open descriptors (/proc/PID/fd); at the top
               level also with --connections client connections open (each has sent an
               ApiVersions), so that descriptors for partitions and connections add up
SIGTERM        stop: from the signal to the exit; first: from the new process's launch to
               its first ApiVersions answer; all: to a ListOffsets (latest) answered
               without error for every partition (and, after the table, the broker's CPU
               seconds in the stop and from its launch to all serving)
kill -9        the same restart after SIGKILL (one more record produced to every partition
               first, so that recovery has something to read after the recovery point)

With --cluster: ZooKeeper and three broker processes instead, --partitions partitions at
replication factor 3 (topics of --per-topic), session timeout --session-ms; it prints:

create         seconds for the CreateTopics requests (each answers once every partition
               has a leader)
idle CPU       each broker's CPU (user + system, 1.0 = one core) over 10 s once every
               broker has applied the creation: nothing produced, the followers fetch
kill -9        of a broker leading a third of the partitions (not the controller): until
               both survivors' Metadata name a live leader for every partition
rejoin         the killed broker started again: until it is in every partition's ISR
preferred      ElectLeaders (preferred, all partitions): until its answer, and until
               Metadata shows it leading its third again
SIGTERM        of that broker (controlled shutdown): until it exited, and until both
               survivors' Metadata name a live leader for every partition
With --profile DIR, py-spy records the controller during each phase (and in the kill
phase the other survivor, into kill-broker-N.txt) and the heaviest
functions of each profile are printed (the raw profiles are kept in DIR, and each
broker's log lines, broker-N.log, at the end).

Raw Kafka wire from this process (no client library in the figures). It raises its own
RLIMIT_NOFILE soft limit to the hard one; the broker raises its own at start. No
assertion on figures: the machine is shared, so they are noisy.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# The same process and wire helpers as the connections benchmark beside it.
from bench_connections import encode, open_fds, progress, rss_mb  # noqa: E402

from trio_broker.protocol._generated import response_class
from trio_broker.protocol._generated.create_topics_request import CreatableTopic
from trio_broker.protocol._generated.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsTopic,
)
from trio_broker.protocol._generated.produce_request import PartitionProduceData, TopicProduceData
from trio_broker.protocol._generated.response_header import ResponseHeader
from trio_broker.protocol.record_codec import build_batch
from trio_broker.testing import free_port

# ---------------------------------------------------------------- the wire


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(min(n - len(out), 1 << 20))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


def call(sock: socket.socket, api_key: int, version: int, **fields: Any) -> Any:
    sock.sendall(encode(api_key, version, 1, **fields))
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    frame = recv_exact(sock, size)
    cls = response_class(api_key)
    flexible = cls.FLEXIBLE_MIN_VERSION is not None and version >= cls.FLEXIBLE_MIN_VERSION
    _, pos = ResponseHeader.decode(frame, 1 if flexible and api_key != 18 else 0)
    body, _ = cls.decode(frame, version, pos)
    return body


def connect(port: int, timeout: float = 120) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


# ---------------------------------------------------------------- the broker


class Broker:
    def __init__(self, log_dir: Path, port: int, log_file: str | None = None) -> None:
        self.log_dir = log_dir
        self.log_file = open(log_file, "a") if log_file else None  # noqa: SIM115
        self.port = port
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []

    def launch(self) -> float:
        """Start the process; returns the launch time (perf_counter)."""
        args = [sys.executable, "-m", "trio_broker", "serve"]
        for key, value in {
            "log.dirs": str(self.log_dir),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "num.partitions": "1",
            "offsets.topic.num.partitions": "1",
            "auto.create.topics.enable": "false",
        }.items():
            args += ["--override", f"{key}={value}"]
        started = time.perf_counter()
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._drain, args=(self.proc,), daemon=True).start()
        return started

    def _drain(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.lines.append(line)
            if self.log_file is not None:
                self.log_file.write(line)
                self.log_file.flush()
            del self.lines[:-200]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def first_answer(self, launched: float, timeout: float = 600) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError("broker exited:\n" + "".join(self.lines[-30:]))
            try:
                with connect(self.port, timeout=5) as sock:
                    body = call(sock, 18, 3)
                    if body.error_code == 0:
                        return time.perf_counter() - launched
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("no answer:\n" + "".join(self.lines[-30:]))

    def stop(self, sig: int) -> float:
        assert self.proc is not None
        started = time.perf_counter()
        before = cpu_s(self.proc.pid)
        self.proc.send_signal(sig)
        # wait4: the exit status and the process's CPU (its rusage), for stop_cpu
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.stop_cpu = usage.ru_utime + usage.ru_stime - before
        return time.perf_counter() - started


def create(port: int, topics: list[str], per_topic: int, replication_factor: int = 1) -> None:
    with connect(port, timeout=600) as sock:
        for i in range(0, len(topics), 20):
            body = call(
                sock,
                19,
                5,
                topics=[
                    CreatableTopic(
                        name=t, num_partitions=per_topic, replication_factor=replication_factor
                    )
                    for t in topics[i : i + 20]
                ],
                timeout_ms=600_000,
            )
            bad = [(t.name, t.error_code) for t in body.topics if t.error_code]
            if bad:
                raise RuntimeError(f"create failed: {bad[:5]}")


def produce(port: int, topics: list[str], per_topic: int, tag: bytes) -> None:
    batch = build_batch([(b"k", b"v" * 100 + tag, (), int(time.time() * 1000))])
    with connect(port, timeout=600) as sock:
        for topic in topics:
            body = call(
                sock,
                0,
                9,
                acks=1,
                timeout_ms=60_000,
                topic_data=[
                    TopicProduceData(
                        name=topic,
                        partition_data=[
                            PartitionProduceData(index=p, records=batch) for p in range(per_topic)
                        ],
                    )
                ],
            )
            for t in body.responses:
                for p in t.partition_responses:
                    if p.error_code:
                        raise RuntimeError(f"produce to {t.name}-{p.index}: {p.error_code}")


def metadata_ms(port: int) -> tuple[float, int]:
    """Median ms from sending a Metadata request for all topics to holding the whole answer
    (decoding it here, in Python, is not counted), and the partitions it lists."""
    with connect(port) as sock:
        times = []
        for _ in range(5):
            started = time.perf_counter()
            sock.sendall(encode(3, 12, 1, topics=None, allow_auto_topic_creation=False))
            (size,) = struct.unpack(">i", recv_exact(sock, 4))
            frame = recv_exact(sock, size)
            times.append((time.perf_counter() - started) * 1000)
    _, pos = ResponseHeader.decode(frame, 1)
    body, _ = response_class(3).decode(frame, 12, pos)
    return statistics.median(times), sum(len(t.partitions) for t in body.topics)


def serving(port: int, topics: list[str], per_topic: int) -> bool:
    """Whether every partition answers ListOffsets (latest) without an error."""
    request = [
        ListOffsetsTopic(
            name=t,
            partitions=[
                ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=-1)
                for p in range(per_topic)
            ],
        )
        for t in topics
    ]
    with connect(port) as sock:
        body = call(sock, 2, 7, replica_id=-1, isolation_level=0, topics=request)
    return all(p.error_code == 0 for t in body.topics for p in t.partitions)


def all_serving(port: int, topics: list[str], per_topic: int, launched: float) -> float:
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if serving(port, topics, per_topic):
                return time.perf_counter() - launched
        time.sleep(0.05)
    raise RuntimeError("not all partitions serving")


def open_connections(port: int, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        sock = connect(port)
        sock.sendall(encode(18, 3, 1))
        socks.append(sock)
    for sock in socks:
        (size,) = struct.unpack(">i", recv_exact(sock, 4))
        recv_exact(sock, size)
    return socks


# ---------------------------------------------------------------- the run


def restart(broker: Broker, sig: int, topics: list[str], per_topic: int) -> dict[str, float]:
    """Wall seconds of the stop, to the first answer and to all serving, and the broker's
    CPU seconds in its stop and from its launch to all serving (on a loaded machine the
    CPU figures say more than the wall ones)."""
    stop = broker.stop(sig)
    launched = broker.launch()
    first = broker.first_answer(launched)
    every = all_serving(broker.port, topics, per_topic, launched)
    return {
        "stop": stop,
        "first": first,
        "all": every,
        "stop_cpu": broker.stop_cpu,
        "all_cpu": cpu_s(broker.pid),
    }


# ---------------------------------------------------------------- a 3-broker cluster (--cluster)


def leaders(port: int) -> tuple[int, dict[tuple[str, int], tuple[int, tuple[int, ...]]]]:
    """(controller id, {(topic, partition): (leader, isr)}) from one broker's Metadata."""
    with connect(port) as sock:
        body = call(sock, 3, 12, topics=None, allow_auto_topic_creation=False)
    return body.controller_id, {
        (t.name, p.partition_index): (p.leader_id, tuple(p.isr_nodes))
        for t in body.topics
        if t.name.startswith("scale-")
        for p in t.partitions
    }


# Between two polls of a cluster phase (--poll-s). A Metadata of 10,000 partitions costs a
# broker about 0.2 s of CPU, so polling both survivors every 0.1 s took a fifth of the
# controller's CPU during the failover it measured (session 19).
POLL_S = 0.5


def wait_for(what: str, check: Any, started: float, timeout: float = 900) -> float:
    """Seconds from `started` (perf_counter) until `check()` is true, polled every POLL_S."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ConnectionError):
            if check():
                return time.perf_counter() - started
        time.sleep(POLL_S)
    raise RuntimeError(f"timed out: {what}")


def settled(ports: Iterable[int], count: int) -> bool:
    """Every broker's Metadata names `count` partitions, each with an ISR of 3."""
    for port in ports:
        seen = leaders(port)[1]
        if len(seen) != count or any(len(i) != 3 for _, i in seen.values()):
            return False
    return True


def all_led(ports: list[int], live: set[int], count: int) -> bool:
    """Every survivor's Metadata names a live leader for each of `count` partitions."""
    for port in ports:
        _, seen = leaders(port)
        if len(seen) != count or any(leader not in live for leader, _ in seen.values()):
            return False
    return True


IDLE_S = 10.0


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Profiler:
    """py-spy recording processes (the controller, and in the kill phase the other
    survivor too) while a phase runs."""

    def __init__(self, out_dir: str | None) -> None:
        self.out_dir = Path(out_dir) if out_dir else None
        self.recording: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, pid: int, name: str, *others: tuple[int, str]) -> None:
        """Record `pid` into NAME.txt, and each (pid, suffix) of `others` into
        NAME-SUFFIX.txt."""
        if self.out_dir is None:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        py_spy = Path(sys.executable).with_name("py-spy")
        for target, path in [(pid, self.out_dir / f"{name}.txt")] + [
            (other, self.out_dir / f"{name}-{suffix}.txt") for other, suffix in others
        ]:
            proc = subprocess.Popen(
                [str(py_spy), "record", "--pid", str(target), "--rate", "100", "--nonblocking"]
                + ["--format", "raw", "--output", str(path)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            self.recording.append((proc, path))
        time.sleep(1)  # py-spy attaches

    def stop(self) -> None:
        recording, self.recording = self.recording, []
        for proc, _ in recording:
            proc.send_signal(signal.SIGINT)
        for proc, path in recording:
            proc.wait(60)
            progress(f"profile {path}:\n" + summarize(path))

    def close(self) -> None:
        for proc, _ in self.recording:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def summarize(path: Path, top: int = 25) -> str:
    """The heaviest project functions of a py-spy raw profile, by inclusive samples."""
    inclusive: dict[str, int] = {}
    total = 0
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not count.isdigit():
                continue
            total += int(count)
            seen = set()
            for frame in stack.split(";"):
                if "trio_broker" not in frame and "/cluster/" not in frame:
                    continue
                name = frame.split(" (")[0] + " " + frame.rsplit("/", 1)[-1].split(":")[0]
                if name not in seen:
                    seen.add(name)
                    inclusive[name] = inclusive.get(name, 0) + int(count)
    rows = sorted(inclusive.items(), key=lambda kv: -kv[1])[:top]
    return "\n".join(f"  {n * 100 / max(total, 1):5.1f}%  {f}" for f, n in rows) + (
        f"\n  ({total} samples)"
    )


def _s(row: dict[str, Any], key: str) -> str:
    return f"{row[key]:.1f} s" if key in row else "-"


def run_cluster(args: argparse.Namespace) -> None:
    from trio_broker.testing import KafkaCluster, ZooKeeperServer

    global POLL_S
    POLL_S = args.poll_s
    per_topic = args.per_topic
    topics = [f"scale-{i:05d}" for i in range(args.partitions // per_topic)]
    count = len(topics) * per_topic
    row: dict[str, Any] = {"partitions": count}
    profiler = Profiler(args.profile)
    with tempfile.TemporaryDirectory(prefix="bench-scale-cluster-") as tmp:
        base = Path(args.log_dir or tmp)
        overrides = {
            "zookeeper.session.timeout.ms": str(args.session_ms),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
        }
        with (
            ZooKeeperServer() as zk,
            KafkaCluster(zk, base_dir=base, processes=True, overrides=overrides) as cluster,
        ):
            try:
                ports = {b: broker.port for b, broker in cluster.brokers.items()}
                controller, _ = leaders(ports[1])
                progress(f"cluster up, controller {controller}; creating {count} partitions")
                profiler.start(cluster.brokers[controller].proc.pid, "create")
                started = time.perf_counter()
                create(ports[controller], topics, per_topic, replication_factor=3)
                row["create_s"] = time.perf_counter() - started
                profiler.stop()
                progress(f"created in {row['create_s']:.1f} s")

                # Every broker has applied what the controller sent it (a follower may still
                # be making logs when CreateTopics has answered): a failover measured
                # behind that backlog would measure the backlog.
                row["settled_s"] = wait_for(
                    "full ISRs everywhere", lambda: settled(ports.values(), count), started
                )
                progress(f"every broker knows every partition {row['settled_s']:.1f} s after")
                # Idle: nothing produced, the followers only fetch. Each broker's CPU over
                # IDLE_S (what the followers' fetches cost at this scale).
                cpu_before = {b: cpu_s(x.proc.pid) for b, x in cluster.brokers.items()}
                time.sleep(IDLE_S)
                row["idle_cpu"] = [
                    (cpu_s(x.proc.pid) - cpu_before[b]) / IDLE_S for b, x in cluster.brokers.items()
                ]
                progress(
                    "idle CPU per broker: "
                    + " / ".join(f"{c * 100:.0f}%" for c in row["idle_cpu"])
                    + f" (load average {os.getloadavg()[0]:.1f})"
                )
                row["rss_mb"] = [rss_mb(b.proc.pid) for b in cluster.brokers.values()]
                row["fds"] = [open_fds(b.proc.pid) for b in cluster.brokers.values()]
                victim = max(b for b in cluster.brokers if b != controller)
                survivors = [p for b, p in ports.items() if b != victim]
                live = set(ports) - {victim}
                led = sum(
                    1 for leader, _ in leaders(ports[controller])[1].values() if leader == victim
                )
                row["victim_led"] = led
                progress(f"kill -9 of broker {victim}, leading {led}")
                profiler.start(
                    cluster.brokers[controller].proc.pid,
                    "kill",
                    *(
                        (cluster.brokers[b].proc.pid, f"broker-{b}")
                        for b in sorted(live - {controller})
                    ),
                )
                started = time.perf_counter()
                cluster.brokers[victim].kill()
                row["kill_s"] = wait_for(
                    "leaders after kill -9", lambda: all_led(survivors, live, count), started
                )
                profiler.stop()
                progress(f"all led again {row['kill_s']:.1f} s after kill -9")

                if not args.until_kill:
                    started = time.perf_counter()
                    cluster.brokers[victim].start_again()
                    row["rejoin_s"] = wait_for(
                        "the broker back in every ISR",
                        lambda: all(
                            victim in isr for _, isr in leaders(ports[controller])[1].values()
                        ),
                        started,
                    )
                    progress(f"rejoined every ISR in {row['rejoin_s']:.1f} s")
                    profiler.start(cluster.brokers[controller].proc.pid, "preferred")
                    started = time.perf_counter()
                    with connect(ports[controller], timeout=600) as sock:
                        call(
                            sock, 43, 2, election_type=0, topic_partitions=None, timeout_ms=600_000
                        )
                    row["elect_answer_s"] = time.perf_counter() - started

                    def back() -> bool:
                        seen = leaders(ports[victim])[1].values()
                        return sum(1 for leader, _ in seen if leader == victim) >= led

                    row["elect_s"] = wait_for("preferred leaders", back, started)
                    profiler.stop()
                    progress(f"preferred election {row['elect_s']:.1f} s")

                    progress(f"SIGTERM of broker {victim}")
                    profiler.start(cluster.brokers[controller].proc.pid, "sigterm")
                    started = time.perf_counter()
                    cluster.brokers[victim].stop(timeout_s=600)
                    row["term_stop_s"] = time.perf_counter() - started
                    row["term_s"] = wait_for(
                        "leaders after SIGTERM", lambda: all_led(survivors, live, count), started
                    )
                    profiler.stop()
                    progress(
                        f"SIGTERM: exited {row['term_stop_s']:.1f} s, led {row['term_s']:.1f} s"
                    )
            except BaseException:
                for b, broker in cluster.brokers.items():
                    progress(f"broker {b}'s last lines:\n" + "".join(broker.lines[-20:]))
                raise
            finally:
                profiler.close()
                if args.profile:
                    for b, broker in cluster.brokers.items():
                        log = Path(args.profile) / f"broker-{b}.log"
                        log.write_text("".join(broker.lines))
    print(
        "| partitions (RF 3) | create | idle CPU per broker | RSS per broker | fds per broker "
        "| kill -9: led again | rejoin: in every ISR | preferred: answer / led "
        "| SIGTERM: exit / led again |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {count:,} | {row['create_s']:.1f} s "
        f"| {' / '.join(f'{c * 100:.0f}%' for c in row['idle_cpu'])} "
        f"| {' / '.join(f'{m:.0f}' for m in row['rss_mb'])} MB "
        f"| {' / '.join(f'{n:,}' for n in row['fds'])} "
        f"| {row['kill_s']:.1f} s ({row['victim_led']:,} leaderships; session {args.session_ms} ms) "
        f"| {_s(row, 'rejoin_s')} | {_s(row, 'elect_answer_s')} / {_s(row, 'elect_s')} "
        f"| {_s(row, 'term_stop_s')} / {_s(row, 'term_s')} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--levels", default="1000,5000,20000")
    parser.add_argument("--per-topic", type=int, default=100)
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="levels 200,1000; 200 connections")
    parser.add_argument("--log-dir", help="default: a fresh temporary directory")
    parser.add_argument("--broker-log", help="append the broker's log lines to this file")
    parser.add_argument("--cluster", action="store_true", help="ZooKeeper and 3 brokers, RF 3")
    parser.add_argument("--partitions", type=int, default=10_000, help="with --cluster")
    parser.add_argument("--session-ms", type=int, default=6000, help="with --cluster")
    parser.add_argument("--profile", help="with --cluster: py-spy the controller into DIR")
    parser.add_argument("--poll-s", type=float, default=POLL_S, help="with --cluster")
    parser.add_argument(
        "--until-kill", action="store_true", help="with --cluster: stop after the kill -9 phase"
    )
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.cluster:
        run_cluster(args)
        return
    if args.quick:
        args.levels, args.connections = "200,1000", 200
    levels = [int(x) for x in args.levels.split(",")]
    progress(f"RLIMIT_NOFILE soft {soft} -> {hard}, hard {hard}")

    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        log_dir = Path(args.log_dir or tmp) / "logs"
        broker = Broker(log_dir, free_port(), args.broker_log)
        broker.first_answer(broker.launch())
        topics: list[str] = []
        rows = []
        try:
            for level in levels:
                new = [f"scale-{i:05d}" for i in range(len(topics), level // args.per_topic)]
                progress(f"level {level}: creating {len(new)} topics")
                started = time.perf_counter()
                create(broker.port, new, args.per_topic)
                create_s = time.perf_counter() - started
                produce(broker.port, new, args.per_topic, b"first")
                topics += new
                meta, count = metadata_ms(broker.port)
                row: dict[str, Any] = {
                    "partitions": count,
                    "create_s": create_s,
                    "metadata_ms": meta,
                    "rss_mb": rss_mb(broker.pid),
                    "fds": open_fds(broker.pid),
                }
                if level == levels[-1] and args.connections:
                    progress(f"opening {args.connections} connections")
                    socks = open_connections(broker.port, args.connections)
                    row["fds_conn"] = open_fds(broker.pid)
                    row["rss_conn_mb"] = rss_mb(broker.pid)
                    for sock in socks:
                        sock.close()
                progress(f"level {level}: SIGTERM restart")
                row["term"] = restart(broker, signal.SIGTERM, topics, args.per_topic)
                progress(f"level {level}: kill -9 restart")
                produce(broker.port, topics, args.per_topic, b"second")
                row["kill"] = restart(broker, signal.SIGKILL, topics, args.per_topic)
                row["fds_after"] = open_fds(broker.pid)
                rows.append(row)
                progress(f"level {level}: {row}")
        except BaseException:
            progress("failed; the broker's last lines:\n" + "".join(broker.lines[-40:]))
            raise
        finally:
            if broker.proc is not None and broker.proc.poll() is None:
                broker.stop(signal.SIGTERM)

    print(
        "| partitions | create | Metadata, all | RSS | open fds | with connections "
        "| SIGTERM stop / first / all | kill -9 first / all |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        conn = (
            f"{row['fds_conn']:,} fds, {row['rss_conn_mb']:.0f} MB ({args.connections:,})"
            if "fds_conn" in row
            else "-"
        )
        term, kill = row["term"], row["kill"]
        print(
            f"| {row['partitions']:,} | {row['create_s']:.1f} s | {row['metadata_ms']:.0f} ms "
            f"| {row['rss_mb']:.0f} MB | {row['fds']:,} | {conn} "
            f"| {term['stop']:.2f} s / {term['first']:.1f} s / {term['all']:.1f} s "
            f"| {kill['first']:.1f} s / {kill['all']:.1f} s |"
        )
    for row in rows:
        term, kill = row["term"], row["kill"]
        print(
            f"{row['partitions']:,} partitions, broker CPU: SIGTERM stop {term['stop_cpu']:.2f} s, "
            f"launch to all serving {term['all_cpu']:.2f} s; after kill -9 "
            f"{kill['all_cpu']:.2f} s"
        )


if __name__ == "__main__":
    main()
