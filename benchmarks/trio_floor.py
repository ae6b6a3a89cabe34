"""The floor under one isolated request: what Trio itself costs per round trip.

    .venv/bin/python benchmarks/trio_floor.py [--round-trips 20000] [--rate 5000]

A client process sends one 100-byte message at a time (send, wait for the answer, send
the next) to an echo server in Trio, in two shapes:

    direct  the connection task reads, checkpoints once, writes back
    hops    the broker's shape: connection task -> request channel -> handler task ->
            processor response channel -> response task -> the connection's channel ->
            connection task, which writes

and prints round trips per second and the server's CPU microseconds per round trip. No
parsing, no handler work: these figures are Trio's (epoll, wakeups, scheduler batches)
and the kernel's. A third row sends the same client's ApiVersions requests to a real
trio-broker: what a request costs the broker beyond the `hops` row is ours.

`--rate` paces the client instead (round trips started per second, as (d)'s unbatched
producer sends at 5,000 records/s), and adds each shape's share of a core: the least an
unbatched stream at that rate costs here, before any Kafka work.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import cpu_seconds  # noqa: E402  (benchmarks/run.py)

from trio_broker.testing import BrokerProcess  # noqa: E402

_ECHO_SERVER = r"""
import os, sys, trio

HOPS = sys.argv[1] == "hops"


async def serve():
    requests_send, requests = trio.open_memory_channel(500)
    responses_send, responses = trio.open_memory_channel(500)

    async def handler():
        async for reply_to, data in requests:
            responses_send.send_nowait((reply_to, data))

    async def response_task():
        async for reply_to, data in responses:
            reply_to.send_nowait(data)

    async def connection(stream):
        sock = stream.socket
        fd = sock.fileno()
        mine_send, mine = trio.open_memory_channel(1)
        buf = bytearray(65536)
        while True:
            try:
                n = os.readv(fd, [buf])
            except BlockingIOError:
                await trio.lowlevel.wait_readable(sock)
                continue
            if not n:
                return
            data = bytes(buf[:n])
            if HOPS:
                requests_send.send_nowait((mine_send, data))
                data = await mine.receive()
            else:
                await trio.lowlevel.checkpoint()
            os.write(fd, data)

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    print(listeners[0].socket.getsockname()[1], flush=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(handler)
        nursery.start_soon(response_task)
        await trio.serve_listeners(connection, listeners)


trio.run(serve)
"""

_CLIENT = r"""
import socket, struct, sys, time

sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
n = int(sys.argv[2])
rate = float(sys.argv[3])  # round trips started per second; 0: back to back
kafka = len(sys.argv) > 4
if kafka:
    # ApiVersions v0, correlation id 1, client id "floor": a whole Kafka request frame.
    body = struct.pack(">hhih", 18, 0, 1, 5) + b"floor"
    message = struct.pack(">i", len(body)) + body
else:
    message = b"x" * 100


def answer():
    data = sock.recv(65536)
    if kafka:
        want = 4 + struct.unpack_from(">i", data)[0]
        while len(data) < want:
            data += sock.recv(65536)


for _ in range(200):
    sock.sendall(message)
    answer()
start = time.perf_counter()
for i in range(n):
    if rate:
        # Paced as (d)'s producer is: the i-th round trip starts i / rate after the first.
        wait = start + i / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
    sock.sendall(message)
    answer()
print(time.perf_counter() - start)
"""


def measure(shape: str, round_trips: int, rate: float = 0) -> tuple[float, float]:
    """(round trips per second, server CPU microseconds per round trip); `rate` paces the
    client (round trips started per second), 0 sends them back to back."""
    with tempfile.TemporaryDirectory() as workdir:
        if shape == "broker":
            broker = BrokerProcess({"log.dirs": workdir})
            server, port, extra = broker.proc, str(broker.port), ["kafka"]
        else:
            server = subprocess.Popen(
                [sys.executable, "-c", _ECHO_SERVER, shape], stdout=subprocess.PIPE, text=True
            )
            port, extra = server.stdout.readline().strip(), []
        try:
            cpu0 = cpu_seconds(server.pid)
            out = subprocess.run(
                [sys.executable, "-c", _CLIENT, port, str(round_trips), str(rate), *extra],
                capture_output=True,
                text=True,
                check=True,
            )
            cpu = cpu_seconds(server.pid) - cpu0
            return round_trips / float(out.stdout), cpu / round_trips * 1e6
        finally:
            server.kill()
            server.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--round-trips", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=0, help="round trips per second")
    args = parser.parse_args(argv)
    print(f"{'shape':<8} {'round trips/s':>14} {'server CPU us each':>19} {'% of a core':>12}")
    for shape in ("direct", "hops", "broker"):
        rate, cpu_us = measure(shape, args.round_trips, args.rate)
        print(f"{shape:<8} {rate:>14,.0f} {cpu_us:>19.1f} {rate * cpu_us / 1e4:>12.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
