"""What connections cost the broker: idle ones in memory, hostile ones in others' latency.

    .venv/bin/python benchmarks/bench_connections.py idle [--connections 10000] [--batch 500]
        [--after-request] [--rounds 1]
    .venv/bin/python benchmarks/bench_connections.py hostile [--hostile 50] [--seconds 20]
    .venv/bin/python benchmarks/bench_connections.py --smoke

idle      one broker process at rest, then N connections that send nothing (or, with
          --after-request, one ApiVersions each and nothing more), opened in batches by a
          separate process so that the broker's RSS is measured alone; then all closed.
          Prints the broker's RSS at rest, with N open, after close, and per connection;
          with --rounds R, opens and closes them R times and prints each round's figures
          (what closing keeps is reused by the next round, not added to).
hostile   (issue 34 item 4) a normal producer (Produce v9, acks=1, one 100-byte record per
          request, paced at 100 requests/s on one connection) and a fresh connection's
          ApiVersions every second, first alone, then beside --hostile connections that
          each announce a 100,000,000-byte frame and send until their socket blocks, held
          open. Prints p50/p99/max latency and unanswered requests in both phases.

Both raise RLIMIT_NOFILE's soft limit to the hard one, here and in the client process (the
broker inherits it). Progress goes to stderr, the table to stdout. No assertion on figures.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trio_broker.protocol._generated import request_class, response_class
from trio_broker.protocol._generated.produce_request import PartitionProduceData, TopicProduceData
from trio_broker.protocol._generated.request_header import RequestHeader
from trio_broker.protocol._generated.response_header import ResponseHeader
from trio_broker.protocol.record_codec import build_batch
from trio_broker.testing import BrokerProcess

TOPIC = "bench-connections"
HOSTILE_FRAME = 100_000_000


def progress(text: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


# ---------------------------------------------------------------- the wire


def encode(api_key: int, version: int, cid: int, **fields: Any) -> bytes:
    cls = request_class(api_key)
    flexible = cls.FLEXIBLE_MIN_VERSION is not None and version >= cls.FLEXIBLE_MIN_VERSION
    body = bytearray()
    RequestHeader(
        request_api_key=api_key, request_api_version=version, correlation_id=cid, client_id="bench"
    ).encode(2 if flexible else 1, body)
    cls(**fields).encode(version, body)
    return struct.pack(">i", len(body)) + bytes(body)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


def read_response(sock: socket.socket, api_key: int, version: int) -> tuple[int, Any]:
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    frame = recv_exact(sock, size)
    cls = response_class(api_key)
    flexible = cls.FLEXIBLE_MIN_VERSION is not None and version >= cls.FLEXIBLE_MIN_VERSION
    header, pos = ResponseHeader.decode(frame, 1 if flexible and api_key != 18 else 0)
    body, _ = cls.decode(frame, version, pos)
    return header.correlation_id, body


def api_versions(sock: socket.socket, cid: int = 1) -> None:
    sock.sendall(encode(18, 3, cid))
    got, body = read_response(sock, 18, 3)
    assert (got, body.error_code) == (cid, 0), (got, body.error_code)


# ---------------------------------------------------------------- idle


def hold(port: int, n: int, batch: int, after_request: bool) -> None:
    """The client process: open `n` connections in batches, report, close on "close"."""
    raise_nofile()
    socks: list[socket.socket] = []
    while len(socks) < n:
        for _ in range(min(batch, n - len(socks))):
            sock = socket.create_connection(("127.0.0.1", port), timeout=60)
            if after_request:
                api_versions(sock)
            socks.append(sock)
        print(f"opened {len(socks)}", flush=True)
    print("ready", flush=True)
    sys.stdin.readline()
    for sock in socks:
        sock.close()
    print("closed", flush=True)


def wait_fds(pid: int, want: int, *, above: bool, timeout_s: float = 120) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        count = open_fds(pid)
        if (count >= want) if above else (count <= want):
            return count
        if time.monotonic() > deadline:
            raise TimeoutError(f"broker has {count} fds, waited for {want}")
        time.sleep(0.1)


def settle(pid: int, seconds: float = 2.0) -> float:
    time.sleep(seconds)
    return rss_mb(pid)


def run_idle(n: int, batch: int, after_request: bool, rounds: int = 1) -> list[tuple[str, str]]:
    with tempfile.TemporaryDirectory(prefix="bench-conn-") as tmp:
        broker = BrokerProcess({"log.dirs": str(Path(tmp) / "logs")})
        try:
            pid = broker.proc.pid
            warm = socket.create_connection(("127.0.0.1", broker.port), timeout=20)
            api_versions(warm)
            warm.close()
            base_fds = wait_fds(pid, 0, above=True)
            time.sleep(0.5)
            base_fds = open_fds(pid)
            rest = settle(pid)
            progress(f"broker at rest: {rest:.1f} MB, {base_fds} fds")
            rows: list[tuple[float, float, float, float]] = []
            closed_at = -math.inf
            for _round in range(rounds):
                # The broker reclaims at most once a minute: let the previous round's pass.
                time.sleep(max(0.0, closed_at + 62 - time.monotonic()))
                client = subprocess.Popen(
                    [sys.executable, __file__, "_hold", str(broker.port), str(n), str(batch)]
                    + (["--after-request"] if after_request else []),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                assert client.stdout is not None and client.stdin is not None
                started = time.perf_counter()
                for line in client.stdout:
                    if line.startswith("opened"):
                        progress(line.strip())
                    if line.strip() == "ready":
                        break
                wait_fds(pid, base_fds + n, above=True)
                opened_s = time.perf_counter() - started
                with_n = settle(pid)
                progress(f"{n} open: {with_n:.1f} MB")
                client.stdin.write("close\n")
                client.stdin.flush()
                client.wait(120)
                wait_fds(pid, base_fds, above=False)
                closed_at = time.monotonic()
                after = settle(pid, 3.0)
                progress(f"after close: {after:.1f} MB")
                later = settle(pid, 7.0)
                progress(f"10 s after close: {later:.1f} MB")
                rows.append((with_n, after, later, opened_s))
        finally:
            broker.stop()
    reclaimed = [line.split(": ", 1)[-1].strip() for line in broker.lines if "reclaimed" in line]
    kind = "idle after one ApiVersions" if after_request else "idle, nothing sent"
    with_n, after, later, opened_s = rows[0]
    per_kb = (with_n - rest) * 1024 / n
    more = [
        (
            f"round {k}: open / closed / 10 s later, MB",
            f"{w:.1f} / {a:.1f} / {lt:.1f} ({lt - rest:.1f} over rest)",
        )
        for k, (w, a, lt, _) in enumerate(rows[1:], start=2)
    ]
    return [
        ("connections", f"{n:,} ({kind})"),
        ("broker RSS at rest, MB", f"{rest:.1f}"),
        (f"broker RSS with {n:,} open, MB", f"{with_n:.1f}"),
        ("over rest, MB", f"{with_n - rest:.1f}"),
        ("per connection, KB", f"{per_kb:.1f}"),
        ("broker RSS after all closed, MB", f"{after:.1f}"),
        ("not returned after close, MB", f"{after - rest:.1f}"),
        ("broker RSS 10 s after close, MB", f"{later:.1f} ({later - rest:.1f} over rest)"),
        ("broker said", "; ".join(reclaimed) or "-"),
        ("time to open them all, s", f"{opened_s:.1f}"),
        *more,
    ]


# ---------------------------------------------------------------- hostile


def hostile(port: int, n: int) -> None:
    """The hostile process: `n` connections announce 100 MB frames and send until their
    socket blocks (three tries 200 ms apart find it still full), then hold them open."""
    raise_nofile()
    chunk = b"\x00" * (1 << 20)
    socks = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        sock.sendall(struct.pack(">i", HOSTILE_FRAME))
        sock.setblocking(False)
        socks.append(sock)
    sent = [4] * n
    blocked = [0] * n
    while min(blocked) < 3:
        for i, sock in enumerate(socks):
            if blocked[i] >= 3:
                continue
            try:
                while sent[i] < HOSTILE_FRAME:
                    sent[i] += sock.send(chunk[: HOSTILE_FRAME - sent[i]])
                blocked[i] = 3  # the whole frame went: nothing left to hold back
            except BlockingIOError:
                blocked[i] += 1
            except OSError:
                blocked[i] = 3  # closed by the broker
        time.sleep(0.2)
    print(f"blocked {sum(sent) / 1e6:.0f} MB", flush=True)
    sys.stdin.readline()
    for sock in socks:
        sock.close()


class Producer:
    """One connection producing one small record per request at a fixed rate."""

    def __init__(self, port: int, rate: float) -> None:
        self.port = port
        self.interval = 1 / rate
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.cid = 0
        self.latencies: list[float] = []
        self.slowest: list[tuple[float, float]] = []  # (latency ms, seconds into the run)
        self.started = time.perf_counter()
        self.unanswered = 0

    def produce(self) -> None:
        self.cid += 1
        batch = build_batch([(b"k", b"v" * 100, (), int(time.time() * 1000))])
        frame = encode(
            0,
            9,
            self.cid,
            acks=1,
            timeout_ms=5000,
            topic_data=[
                TopicProduceData(
                    name=TOPIC, partition_data=[PartitionProduceData(index=0, records=batch)]
                )
            ],
        )
        started = time.perf_counter()
        try:
            self.sock.sendall(frame)
            got, body = read_response(self.sock, 0, 9)
        except (TimeoutError, OSError):
            self.unanswered += 1
            self.sock.close()
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            return
        assert got == self.cid and body.responses[0].partition_responses[0].error_code == 0
        latency = (time.perf_counter() - started) * 1000
        self.latencies.append(latency)
        if latency > 50:
            self.slowest.append((latency, started - self.started))

    def run_for(self, seconds: float) -> None:
        deadline = time.perf_counter() + seconds
        next_at = time.perf_counter()
        while time.perf_counter() < deadline:
            self.produce()
            next_at += self.interval
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)


def fresh_api_versions(port: int, stop: threading.Event, out: list[float | None]) -> None:
    while not stop.wait(1.0):
        started = time.perf_counter()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                api_versions(sock)
            out.append((time.perf_counter() - started) * 1000)
        except (TimeoutError, OSError):
            out.append(None)


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))] if ordered else float("nan")


def phase(port: int, seconds: float) -> tuple[Producer, list[float | None]]:
    producer = Producer(port, rate=100)
    stop = threading.Event()
    fresh: list[float | None] = []
    watcher = threading.Thread(target=fresh_api_versions, args=(port, stop, fresh))
    watcher.start()
    try:
        producer.run_for(seconds)
    finally:
        stop.set()
        watcher.join()
        producer.sock.close()
    return producer, fresh


def describe(name: str, producer: Producer, fresh: list[float | None]) -> list[tuple[str, str]]:
    lat = producer.latencies
    answered = [x for x in fresh if x is not None]
    p50, p99 = percentile(lat, 0.5), percentile(lat, 0.99)
    worst = max(lat, default=float("nan"))
    fresh_max = max(answered, default=float("nan"))
    return [
        (f"{name}: produce requests answered", f"{len(lat):,} ({producer.unanswered} not)"),
        (f"{name}: produce p50 / p99 / max, ms", f"{p50:.2f} / {p99:.2f} / {worst:.1f}"),
        (
            f"{name}: fresh ApiVersions answered",
            f"{len(answered)} of {len(fresh)}, max {fresh_max:.1f} ms",
        ),
        (
            f"{name}: produce over 50 ms (ms @ s into it)",
            ", ".join(f"{ms:.0f} @ {at:.1f}" for ms, at in sorted(producer.slowest)[-5:]) or "-",
        ),
    ]


def run_hostile(n: int, seconds: float) -> list[tuple[str, str]]:
    from trio_broker.perf import ensure_topic

    with tempfile.TemporaryDirectory(prefix="bench-conn-") as tmp:
        broker = BrokerProcess({"log.dirs": str(Path(tmp) / "logs"), "num.partitions": "1"})
        try:
            pid = broker.proc.pid
            ensure_topic(broker.bootstrap, TOPIC, 1)
            rest = rss_mb(pid)
            progress(f"alone for {seconds:.0f} s")
            alone = phase(broker.port, seconds)
            progress(f"{n} hostile connections")
            attack = subprocess.Popen(
                [sys.executable, __file__, "_hostile", str(broker.port), str(n)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert attack.stdout is not None and attack.stdin is not None
            blocked = attack.stdout.readline().strip()
            progress(f"hostile connections {blocked}; producing beside them for {seconds:.0f} s")
            held_rss = rss_mb(pid)
            beside = phase(broker.port, seconds)
            held_rss = max(held_rss, rss_mb(pid))
            attack.stdin.write("close\n")
            attack.stdin.flush()
            attack.wait(60)
        finally:
            broker.stop()
    dropped = sum("partly read" in line or "closing" in line for line in broker.lines)
    return [
        *describe("alone", *alone),
        ("hostile connections", f"{n}, each announcing {HOSTILE_FRAME:,} bytes; {blocked}"),
        *describe(f"beside {n} hostile", *beside),
        ("broker RSS at rest / beside them, MB", f"{rest:.0f} / {held_rss:.0f}"),
        ("broker log lines about closing connections", str(dropped)),
    ]


# ---------------------------------------------------------------- main


def table(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    print(flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_hold"]:
        hold(int(argv[1]), int(argv[2]), int(argv[3]), "--after-request" in argv)
        return 0
    if argv[:1] == ["_hostile"]:
        hostile(int(argv[1]), int(argv[2]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", nargs="?", choices=["idle", "hostile"], default="idle")
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--after-request", action="store_true")
    parser.add_argument("--rounds", type=int, default=1, help="open and close them R times")
    parser.add_argument("--hostile", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, both modes")
    args = parser.parse_args(argv)
    limit = raise_nofile()
    if args.smoke:
        table(run_idle(200, 100, False))
        table(run_hostile(3, 2.0))
        return 0
    if args.mode == "idle":
        n = min(args.connections, limit - 100)
        table(run_idle(n, args.batch, args.after_request, args.rounds))
    else:
        table(run_hostile(args.hostile, args.seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
