"""Clients that announce huge frames cannot make the broker allocate them (issue 11), and a
connection whose frame finds the request memory pool spent waits, then goes on."""

import logging
import socket
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from test_connection_io import PRODUCE_V, create_topic, produce_frame
from wire import encode_request, is_closed, read_response, request_of

from trio_broker.testing import BrokerProcess

API_VERSIONS_V = 3


def vm_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def api_versions(sock: socket.socket, cid: int = 1) -> int:
    sock.sendall(encode_request(request_of(18), API_VERSIONS_V, cid))
    got_cid, body = read_response(sock, 18, API_VERSIONS_V)
    assert got_cid == cid
    return body.error_code


def produce_and_consume(bootstrap: str, topic: str, n: int) -> list[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    errors = []
    for i in range(n):
        producer.produce(topic, value=b"v%05d" % i, on_delivery=lambda e, m: e and errors.append(e))
    assert producer.flush(60) == 0
    assert errors == []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "memory-test"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(out) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        out.append(msg.value())
    consumer.close()
    return out


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc for VmRSS")
def test_announced_100mb_frames_do_not_grow_rss(tmp_path):
    # 200 connections each announce a 100,000,000-byte frame; half send 100 KiB of it,
    # then all idle. Before, the broker allocated every announced frame at once (20 such
    # connections took it from 36 MB to 1.9 GB). Meanwhile a client produces and consumes.
    broker = BrokerProcess({"log.dirs": str(tmp_path / "logs"), "num.partitions": "1"})
    sockets = []
    try:
        pid = broker.proc.pid
        warm = socket.create_connection(("127.0.0.1", broker.port), timeout=20)
        assert api_versions(warm) == 0
        before = vm_rss_mb(pid)
        part = b"\x00" * (100 * 1024)
        for i in range(200):
            sock = socket.create_connection(("127.0.0.1", broker.port), timeout=20)
            sock.sendall(struct.pack(">i", 100_000_000) + (part if i % 2 else b""))
            sockets.append(sock)
        got = produce_and_consume(broker.bootstrap, "beside-the-flood", 1000)
        assert got == [b"v%05d" % i for i in range(1000)]
        assert api_versions(warm, 2) == 0
        grown = vm_rss_mb(pid) - before
        print(f"RSS {before:.0f} MB -> {before + grown:.0f} MB")
        assert grown < 300, f"RSS grew by {grown:.0f} MB"
        # The announcers are still connected (idle, not yet past connections.max.idle.ms).
        assert broker.proc.poll() is None
    finally:
        for sock in sockets:
            sock.close()
        broker.stop()


def padded_api_versions(cid: int, size: int) -> bytes:
    """An ApiVersions request of `size` bytes (the broker reads its fields, not the rest):
    a large frame that any broker answers."""
    body = encode_request(request_of(18), API_VERSIONS_V, cid)[4:]
    body += b"\x00" * (size - len(body))
    return struct.pack(">i", len(body)) + body


def answered_within(sock: socket.socket, timeout: float) -> int | None:
    """The correlation id of the answer read within `timeout`, else None."""
    sock.settimeout(timeout)
    try:
        return read_response(sock, 18, API_VERSIONS_V)[0]
    except TimeoutError:
        return None
    finally:
        sock.settimeout(20)


def test_large_frame_waits_for_request_memory_then_goes_on(kafka_broker_factory):
    # A 1 MiB pool (and so 1 MiB requests): one client's large frame, half sent, holds
    # what large frames may take; another client's large request waits unread until that
    # memory comes back. A small request is answered meanwhile (issue 34: before, it waited
    # too, as everything did).
    broker = kafka_broker_factory(
        {"queued.max.request.bytes": str(1 << 20), "socket.request.max.bytes": str(1 << 20)}
    )
    hog = socket.create_connection((broker.host, broker.port), timeout=20)
    # Alone, it may take past its share: its exact buffer (once an eighth is here) is the
    # whole pool, 4 + (1 MiB - 4) bytes.
    hog.sendall(struct.pack(">i", (1 << 20) - 4) + b"\x00" * 500_000)
    big = socket.create_connection((broker.host, broker.port), timeout=20)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        big.sendall(padded_api_versions(7, 300_000))
        if answered_within(big, 0.5) is None:
            break
        # The hog's bytes may not all be read yet: until they are, others still get in.
        hog.sendall(b"\x00")
    small = socket.create_connection((broker.host, broker.port), timeout=20)
    assert api_versions(small, 3) == 0
    assert answered_within(big, 0.5) is None
    hog.close()  # its memory goes back: the waiting request is read and answered
    assert answered_within(big, 20) == 7
    assert api_versions(big, 8) == 0


def hostile(broker, frame_size: int) -> socket.socket:
    """A connection that announces `frame_size` bytes and sends until its socket blocks."""
    sock = socket.create_connection((broker.host, broker.port), timeout=20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    sock.sendall(struct.pack(">i", frame_size))
    sock.setblocking(False)
    chunk, sent, blocked = b"\x00" * 65536, 0, 0
    while blocked < 3 and sent < frame_size - len(chunk):
        try:
            sent += sock.send(chunk)
            blocked = 0
        except BlockingIOError:
            blocked += 1
            time.sleep(0.1)
    return sock


def test_large_frames_in_progress_never_starve_small_requests(kafka_broker_factory):
    # Issue 34: fifty connections announcing 100 MB and sending until their socket blocked
    # held the whole pool, and for 75 s a producer got one acknowledgement. Here, a 16 MiB
    # pool and ten such connections: the producer's requests and a fresh ApiVersions are
    # answered at once, and a large request gets through once the hostile ones are gone.
    size = 16 << 20
    broker = kafka_broker_factory(
        {
            "queued.max.request.bytes": str(size),
            "socket.request.max.bytes": str(size),
            "num.partitions": "1",
        }
    )
    producer = socket.create_connection((broker.host, broker.port), timeout=20)
    create_topic(producer, "beside-the-hostile")
    held = [hostile(broker, size - 4) for _ in range(10)]
    producer.settimeout(5)
    for cid in range(1, 21):
        producer.sendall(produce_frame("beside-the-hostile", b"v%d" % cid, cid))
        got, body = read_response(producer, 0, PRODUCE_V)
        assert got == cid
        assert body.responses[0].partition_responses[0].error_code == 0
    fresh = socket.create_connection((broker.host, broker.port), timeout=5)
    assert api_versions(fresh) == 0
    big = socket.create_connection((broker.host, broker.port), timeout=20)
    big.sendall(padded_api_versions(9, 3 << 20))
    for sock in held:
        sock.close()
    assert answered_within(big, 20) == 9


def test_a_partly_read_frame_that_stops_coming_is_dropped(kafka_broker_factory, caplog):
    # Its memory goes back to the pool, and the line says so, once per address.
    broker = kafka_broker_factory({"connections.max.idle.ms": "1000"})
    with caplog.at_level(logging.INFO, logger="trio_broker.server"):
        stalled = socket.create_connection((broker.host, broker.port), timeout=20)
        stalled.sendall(struct.pack(">i", 4_000_000) + b"\x00" * 600_000)
        assert is_closed(stalled, timeout=10)
    lines = [r.getMessage() for r in caplog.records if "middle of a request" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "600004 bytes read" in lines[0]
    assert "bytes of request memory held" in lines[0]
