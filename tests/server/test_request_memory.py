"""Clients that announce huge frames cannot make the broker allocate them (issue 11), and a
connection whose frame finds the request memory pool spent waits, then goes on."""

import socket
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from wire import encode_request, read_response, request_of

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


def test_connection_waits_for_request_memory_then_goes_on(kafka_broker_factory):
    # A 1 MiB pool (and so 1 MiB requests): one client's large frame, half sent, holds it;
    # another client's small request waits unread until that memory comes back.
    broker = kafka_broker_factory(
        {"queued.max.request.bytes": str(1 << 20), "socket.request.max.bytes": str(1 << 20)}
    )
    hog = socket.create_connection((broker.host, broker.port), timeout=20)
    # Its exact buffer (once an eighth is here) is the whole pool: 4 + (1 MiB - 4) bytes.
    hog.sendall(struct.pack(">i", (1 << 20) - 4) + b"\x00" * 500_000)
    other = socket.create_connection((broker.host, broker.port), timeout=20)
    deadline = time.monotonic() + 20
    while api_versions_answered_within(other, 0.2) and time.monotonic() < deadline:
        # The hog's bytes may not all be read yet: until they are, others still get in.
        hog.sendall(b"\x00")
    other.settimeout(0.5)
    with pytest.raises(TimeoutError):
        read_response(other, 18, API_VERSIONS_V)
    hog.close()  # its memory goes back: the waiting request is read and answered
    other.settimeout(20)
    cid, body = read_response(other, 18, API_VERSIONS_V)
    assert (cid, body.error_code) == (7, 0)
    assert api_versions(other, 8) == 0


def api_versions_answered_within(sock: socket.socket, timeout: float) -> bool:
    """Send ApiVersions (correlation id 7); True if answered within `timeout`."""
    sock.sendall(encode_request(request_of(18), API_VERSIONS_V, 7))
    sock.settimeout(timeout)
    try:
        read_response(sock, 18, API_VERSIONS_V)
    except TimeoutError:
        return False
    return True
