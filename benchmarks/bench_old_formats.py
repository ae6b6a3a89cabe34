"""What message formats 0 and 1 cost, and that format 2 costs what it did (a script, not a
test: nothing here asserts a time).

    .venv/bin/python benchmarks/bench_old_formats.py [--mib 64] [--base COMMIT]

The broker runs in a process of its own; the client here sends prebuilt frames on one
connection, one request at a time, so a row measures the broker's work per request:

    produce v3  a format 2 batch of 200 records of 512 B (as stored: no conversion)
    produce v2  the same records as a format 1 message set (converted on append)
    produce v0  the same as format 0 (converted on append)
    fetch v4    the log read back in 1 MiB fetches (file regions, sendfile)
    fetch v3    the same read as format 1 (down-converted)
    fetch v0    the same read as format 0 (down-converted)

each uncompressed and with gzip: MB/s of record data, and the broker process's CPU seconds
per GB of record data (user + system, from /proc: what contention on a shared machine
moves least). `--base COMMIT` also runs the produce v3 and fetch v4 rows on the broker of
that commit (a `git worktree` under /tmp, imported in place of this checkout), to show
the format 2 paths unchanged.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORDS = 200
VALUE = 512
_SIZE = struct.Struct(">i")


# -- the broker process -----------------------------------------------------------------


class _CheckoutFinder(importlib.machinery.PathFinder):
    """Imports trio_broker (and the folders mapped into it) from another checkout."""

    MAPPED = {"apis": "apis", "log": "log", "cluster": "cluster", "analytics": "analytics"}

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201
        parts = name.split(".")
        if parts[0] != "trio_broker":
            return None
        if len(parts) == 1:
            base = self.root / "trio_broker"
        elif parts[1] in self.MAPPED:
            base = self.root / self.MAPPED[parts[1]] / Path(*parts[2:])
        else:
            base = self.root / "trio_broker" / Path(*parts[1:])
        if (base / "__init__.py").is_file():
            return importlib.util.spec_from_file_location(
                name, base / "__init__.py", submodule_search_locations=[str(base)]
            )
        if base.with_suffix(".py").is_file():
            return importlib.util.spec_from_file_location(name, base.with_suffix(".py"))
        return None


def serve(root: str, port: int, log_dir: str) -> None:
    sys.meta_path.insert(0, _CheckoutFinder(Path(root)))
    from trio_broker.testing import BrokerThread

    props = {
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": log_dir,
        "num.partitions": "1",
        "log.segment.bytes": str(1 << 30),
    }
    with BrokerThread(props):
        print("ready", flush=True)
        sys.stdin.read()  # until the parent closes our stdin


class Broker:
    def __init__(self, root: Path) -> None:
        from trio_broker.testing import free_port

        self.port = free_port()
        self.dir = tempfile.TemporaryDirectory(prefix="bench-old-formats-")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(root), str(self.port), self.dir.name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout.readline().strip() == "ready"

    def cpu_seconds(self) -> float:
        """The broker process's CPU time so far (user + system)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(60)
        self.dir.cleanup()


# -- the client ---------------------------------------------------------------------------


def _frame(request, version: int, correlation_id: int = 1) -> bytes:
    from trio_broker.protocol._generated.request_header import RequestHeader

    flexible = type(request).FLEXIBLE_MIN_VERSION
    header_version = 2 if flexible is not None and version >= flexible else 1
    body = bytearray()
    RequestHeader(
        request_api_key=type(request).API_KEY,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id="bench",
    ).encode(header_version, body)
    request.encode(version, body)
    return _SIZE.pack(len(body)) + bytes(body)


def _read(sock: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = sock.recv(min(n - len(out), 1 << 20))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return bytes(out)

    (size,) = _SIZE.unpack(exact(4))
    return exact(size)


def _records(version: int, codec: int) -> bytes:
    from trio_broker.protocol.legacy_records import build_message_set
    from trio_broker.protocol.record_codec import build_batch
    from trio_broker.protocol.records import Compression

    now = int(time.time() * 1000)
    # Half random, half repeated: gzip halves them, as it does typical JSON.
    rng = random.Random(7)
    values = [
        (b"key-%d" % i, rng.randbytes(VALUE // 4) * 2 + bytes(VALUE // 2)) for i in range(RECORDS)
    ]
    if version >= 3:
        return build_batch([(k, v, (), now) for k, v in values], compression=Compression(codec))
    magic = 1 if version == 2 else 0
    return build_message_set(
        [(i, now, k, v) for i, (k, v) in enumerate(values)], magic=magic, codec=codec
    )


def _create(topic: str):
    from trio_broker.protocol._generated.create_topics_request import (
        CreatableTopic,
        CreateTopicsRequest,
    )

    return CreateTopicsRequest(
        topics=[CreatableTopic(name=topic, num_partitions=1, replication_factor=1)],
        timeout_ms=30000,
    )


def produce_rate(port: int, topic: str, version: int, codec: int, mib: int) -> float:
    from trio_broker.protocol._generated.produce_request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )
    from trio_broker.protocol._generated.produce_response import ProduceResponse

    request = ProduceRequest(
        acks=1,
        timeout_ms=30000,
        topic_data=[
            TopicProduceData(
                name=topic,
                partition_data=[PartitionProduceData(index=0, records=_records(version, codec))],
            )
        ],
    )
    frame = _frame(request, version)
    count = max(1, mib * (1 << 20) // (RECORDS * VALUE))
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(_frame(_create(topic), 2))
        _read(sock)
        sock.sendall(frame)  # the first append is not timed
        _read(sock)
        start = time.perf_counter()
        for _ in range(count):
            sock.sendall(frame)
            answer = _read(sock)
        elapsed = time.perf_counter() - start
    response, _ = ProduceResponse.decode(memoryview(answer), version, 4)
    assert response.responses[0].partition_responses[0].error_code == 0
    return count * RECORDS * VALUE / elapsed / 1e6


def _next_offset(records: bytes, version: int) -> int:
    """The offset after the last record of a fetched records blob."""
    if version >= 4:
        from trio_broker.protocol.records import iter_batches

        last = -1
        for _, header in iter_batches(records):
            last = header.last_offset
        return last + 1
    pos, last = 0, -1
    while pos + 12 <= len(records):
        offset, size = struct.unpack_from(">qi", records, pos)
        if pos + 12 + size > len(records):
            break
        last = offset
        pos += 12 + size
    return last + 1


def fetch_rate(port: int, topic: str, version: int, end: int) -> float:
    from trio_broker.protocol._generated.fetch_request import (
        FetchPartition,
        FetchRequest,
        FetchTopic,
    )
    from trio_broker.protocol._generated.fetch_response import FetchResponse

    offset = 0
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        while offset < end:
            request = FetchRequest(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=1 << 20,
                topics=[
                    FetchTopic(
                        topic=topic,
                        partitions=[
                            FetchPartition(
                                partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
                            )
                        ],
                    )
                ],
            )
            sock.sendall(_frame(request, version))
            response, _ = FetchResponse.decode(memoryview(_read(sock)), version, 4)
            p = response.responses[0].partitions[0]
            assert p.error_code == 0, p.error_code
            offset = _next_offset(bytes(p.records), version)
    elapsed = time.perf_counter() - start
    return end * VALUE / elapsed / 1e6


Result = dict[tuple[str, int, int], tuple[float, float]]  # row -> (MB/s, broker CPU s/GB)


def run(root: Path, mib: int, rows: list[tuple[str, int]]) -> Result:
    out: Result = {}
    broker = Broker(root)
    data = max(1, mib * (1 << 20) // (RECORDS * VALUE)) * RECORDS * VALUE

    def timed(key: tuple[str, int, int], measure) -> None:  # noqa: ANN001
        cpu = broker.cpu_seconds()
        rate = measure()
        out[key] = (rate, (broker.cpu_seconds() - cpu) / (data / 1e9))
        print(f"  {key[0]} v{key[1]} codec {key[2]}: {rate:.1f} MB/s", file=sys.stderr)

    try:
        for codec in (0, 1):
            written = {}
            for kind, version in rows:
                if kind == "produce":
                    topic = f"p{version}-c{codec}"
                    timed(
                        (kind, version, codec),
                        partial(produce_rate, broker.port, topic, version, codec, mib),
                    )
                    written[version] = topic
            # Read back the log the format 2 producer wrote, in each fetch version.
            topic = written.get(3) or next(iter(written.values()))
            end = (1 + max(1, mib * (1 << 20) // (RECORDS * VALUE))) * RECORDS
            for kind, version in rows:
                if kind == "fetch":
                    timed(
                        (kind, version, codec),
                        partial(fetch_rate, broker.port, topic, version, end),
                    )
    finally:
        broker.close()
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=64, help="record data per produce row")
    parser.add_argument("--base", help="a commit whose v3 produce and v4 fetch to run too")
    args = parser.parse_args()
    rows = [
        ("produce", 3),
        ("produce", 2),
        ("produce", 0),
        ("fetch", 4),
        ("fetch", 3),
        ("fetch", 0),
    ]
    print("this checkout:", file=sys.stderr)
    now = run(REPO, args.mib, rows)
    base = {}
    if args.base:
        tree = Path(tempfile.mkdtemp(prefix="bench-base-"))
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), args.base],
            check=True,
            capture_output=True,
        )
        try:
            print(f"base {args.base}:", file=sys.stderr)
            base = run(tree, args.mib, [("produce", 3), ("fetch", 4)])
        finally:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                check=False,
                capture_output=True,
            )
    print(
        f"{'row':<12} {'codec':<6} {'MB/s':>8} {'CPU s/GB':>9} {'CPU vs v3/v4':>13}"
        f" {'base MB/s':>10} {'base CPU s/GB':>14}"
    )
    for kind, version in rows:
        for codec in (0, 1):
            rate, cpu = now[(kind, version, codec)]
            ref = now[(kind, 3 if kind == "produce" else 4, codec)][1]
            b = base.get((kind, version, codec))
            tail = "" if b is None else f" {b[0]:10.1f} {b[1]:14.2f}"
            print(
                f"{kind} v{version:<4} {('none', 'gzip')[codec]:<6} {rate:8.1f} {cpu:9.2f} "
                f"{(cpu / ref if ref else float('nan')):13.2f}{tail}"
            )


if __name__ == "__main__":
    main()
