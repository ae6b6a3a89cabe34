"""Codec and request-path micro-benchmark (a script, not a test: nothing here asserts a time).

    .venv/bin/python benchmarks/bench_codec.py [--seconds 3] [--runs 2000]

(a) Decoding a ProduceRequest v9 carrying one 1 MiB record batch: the median over many
    runs, in µs, and a check that the decoded records are a view of the frame, not a copy.
(b) ApiVersions requests per second against a running broker (BrokerThread, in this
    process), with a synchronous request/response loop on 1 connection and on 8.
    The clients are separate processes (spawned, not forked: the broker's Trio thread must
    not be duplicated): client threads in this process would compete with the broker for
    the GIL and measure the client's Python as much as the broker's.
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import struct
import tempfile
import time

from trio_broker.apis.registry import supported_versions
from trio_broker.protocol._generated.api_versions_request import ApiVersionsRequest
from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_broker.protocol._generated.request_header import RequestHeader
from trio_broker.protocol.quirks import parse_request
from trio_broker.protocol.record_codec import build_batch
from trio_broker.testing import BrokerThread

_SIZE = struct.Struct(">i")


def produce_frame(batch: bytes) -> bytearray:
    """A ProduceRequest v9 frame body (header v2 + body), without the size prefix."""
    buf = bytearray()
    RequestHeader(
        request_api_key=0, request_api_version=9, correlation_id=7, client_id="bench"
    ).encode(2, buf)
    ProduceRequest(
        acks=1,
        timeout_ms=30_000,
        topic_data=[
            TopicProduceData(
                name="bench", partition_data=[PartitionProduceData(index=0, records=batch)]
            )
        ],
    ).encode(9, buf)
    return buf


def bench_produce_decode(runs: int) -> tuple[float, float, int]:
    records = [(None, bytes([i % 256]) * 1000, (), 0) for i in range(1041)]
    batch = bytes(build_batch(records))
    frame = produce_frame(batch)
    view = memoryview(frame)
    supported = supported_versions()

    parsed = parse_request(view, supported)
    decoded = parsed.body.topic_data[0].partition_data[0].records
    assert isinstance(decoded, memoryview), type(decoded)
    assert decoded.obj is frame, "the records were copied out of the frame"
    assert decoded == batch

    samples = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        parse_request(view, supported)
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000, min(samples) / 1000, len(batch)


def _recv_exact(sock: socket.socket, n: int) -> None:
    while n:
        chunk = sock.recv(min(n, 65536))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        n -= len(chunk)


def _client(host: str, port: int, seconds: float, start_at: float) -> int:
    buf = bytearray(4)
    RequestHeader(
        request_api_key=18, request_api_version=3, correlation_id=1, client_id="bench"
    ).encode(2, buf)
    ApiVersionsRequest(client_software_name="bench", client_software_version="1").encode(3, buf)
    _SIZE.pack_into(buf, 0, len(buf) - 4)
    request = bytes(buf)
    with socket.create_connection((host, port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while time.time() < start_at:
            time.sleep(0.001)
        count = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sock.sendall(request)
            size = bytearray(4)
            view = memoryview(size)
            got = 0
            while got < 4:
                n = sock.recv_into(view[got:])
                if not n:
                    raise ConnectionError("broker closed the connection")
                got += n
            _recv_exact(sock, _SIZE.unpack(size)[0])
            count += 1
    return count


def bench_api_versions(host: str, port: int, connections: int, seconds: float) -> float:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(connections) as pool:
        start_at = time.time() + 1.0  # let every process start and connect first
        counts = pool.starmap(_client, [(host, port, seconds, start_at)] * connections)
    return sum(counts) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()

    median_us, min_us, size = bench_produce_decode(args.runs)
    rows = [
        (f"decode ProduceRequest v9, {size / 2**20:.2f} MiB batch (median)", f"{median_us:.1f} µs"),
        ("  fastest run", f"{min_us:.1f} µs"),
        ("  records copied?", "no (memoryview over the frame)"),
    ]
    with tempfile.TemporaryDirectory() as data, BrokerThread({"log.dirs": data}) as broker:
        for connections in (1, 8):
            rate = bench_api_versions(broker.host, broker.port, connections, args.seconds)
            rows.append(
                (f"ApiVersions v3, {connections} connection(s), sync loop", f"{rate:,.0f} req/s")
            )
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value:>16}")


if __name__ == "__main__":
    main()
