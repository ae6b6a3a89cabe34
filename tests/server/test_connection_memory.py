"""What a connection holds while it waits (issue 34): no read buffer until its first byte
or between requests, and memory given back to the system after many close. The figures
(10,000 idle connections, RSS) are in benchmarks/bench_connections.py."""

import gc
import socket
import struct
import time

import trio
from wire import encode_request, read_response, request_of

from trio_broker.server.connection import Connection
from trio_broker.server.memory_reclaim import MemoryReclaimer

API_VERSIONS_V = 3


def connect(broker) -> socket.socket:
    return socket.create_connection((broker.host, broker.port), timeout=20)


def broker_side(socks: list[socket.socket], timeout_s: float = 10) -> list[Connection]:
    """The broker's Connection of each client socket (the broker runs in this process)."""
    peers = {f"127.0.0.1:{s.getsockname()[1]}": s for s in socks}
    deadline = time.monotonic() + timeout_s
    while True:
        found = {
            c.peer: c for c in gc.get_objects() if isinstance(c, Connection) and c.peer in peers
        }
        if len(found) == len(peers) or time.monotonic() > deadline:
            return [found[p] for p in peers if p in found]
        time.sleep(0.05)


def wait_until(predicate, timeout_s: float = 10) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_idle_connections_hold_no_read_buffer(kafka_broker):
    # Ten connections that sent nothing, and ten that sent three pipelined requests in one
    # write (what followed the first went through a buffer of the connection's own) and
    # were answered. Before, each held a 64 KiB buffer from its accept on: 73 KB apiece.
    silent = [connect(kafka_broker) for _ in range(10)]
    answered = [connect(kafka_broker) for _ in range(10)]
    for sock in answered:
        sock.sendall(b"".join(encode_request(request_of(18), API_VERSIONS_V, c) for c in (1, 2, 3)))
        assert [read_response(sock, 18, API_VERSIONS_V)[0] for _ in range(3)] == [1, 2, 3]
    connections = broker_side(silent + answered)
    assert len(connections) == 20
    for connection in connections:
        assert wait_until(lambda c=connection: not c.reader.has_buffer), connection
        assert connection.reader.held == 0 and connection.reader.buffered == 0
    # And they serve as before, a request split across reads included.
    for cid, sock in enumerate(silent + answered, 10):
        frame = encode_request(request_of(18), API_VERSIONS_V, cid)
        sock.sendall(frame[:3])
        time.sleep(0.01)
        sock.sendall(frame[3:])
        assert read_response(sock, 18, API_VERSIONS_V)[0] == cid


def test_a_large_request_after_an_idle_wait_arrives_whole(kafka_broker):
    # Its first bytes are read into the processor's buffer, the rest into its own.
    sock = connect(kafka_broker)
    body = encode_request(request_of(18), API_VERSIONS_V, 5)[4:]
    padded = body + b"\x00" * 300_000  # ApiVersions ignores bytes after its fields
    sock.sendall(struct.pack(">i", len(padded)) + padded)
    assert read_response(sock, 18, API_VERSIONS_V)[0] == 5


async def test_memory_is_reclaimed_once_a_burst_of_closes_is_over(nursery, autojump_clock):
    started = []
    # (malloc_trim would run in a thread, which the mock clock does not wait for)
    reclaimer = MemoryReclaimer(
        after_closes=100, on_reclaim=lambda: started.append(1), trim_heap=False
    )
    nursery.start_soon(reclaimer.run)
    for _ in range(150):  # 150 closes over 7.5 s: not while they go on
        reclaimer.connection_closed()
        await trio.sleep(0.05)
    assert started == []
    await trio.sleep(2.5)
    assert len(started) == reclaimer.reclaims == 1
    for _ in range(100):  # another burst soon after: at most once a minute
        reclaimer.connection_closed()
    await trio.sleep(5)
    assert len(started) == 1
    await trio.sleep(60)
    assert len(started) == 2
    for _ in range(99):  # too few to be worth a full collection
        reclaimer.connection_closed()
    await trio.sleep(120)
    assert len(started) == 2
