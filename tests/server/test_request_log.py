"""The request log (`request.log.enable`, logger `kafka.request.logger`)."""

from __future__ import annotations

import logging
import re
import socket
import struct
import time

from confluent_kafka import Producer
from test_metrics import scrape, value
from wire import encode_request, recv_exact

from trio_broker.protocol._generated.metadata_request import MetadataRequest
from trio_broker.testing import BrokerProcess, free_port

TIMEOUT = 30
LINE = re.compile(
    r"Completed request: api=(\w+) version=(\d+) correlation_id=(\d+) client_id=(\S+) "
    r"peer=(\S+) listener=(\w+) principal=(\S+) request_bytes=(\d+) response_bytes=(\d+) "
    r"totalTime=([\d.]+) requestQueueTime=([\d.]+) localTime=([\d.]+) remoteTime=([\d.]+) "
    r"responseQueueTime=([\d.]+) sendTime=([\d.]+)$"
)


def lines(caplog) -> list[re.Match]:
    return [
        m
        for r in caplog.records
        if r.name == "kafka.request.logger" and (m := LINE.match(r.getMessage()))
    ]


def test_each_request_logged_once_with_sizes_and_times(kafka_broker_factory, caplog):
    caplog.set_level(logging.INFO, logger="kafka.request.logger")
    port = free_port()
    broker = kafka_broker_factory(
        {"request.log.enable": "true", "metrics.listener": f"http://127.0.0.1:{port}"}
    )
    sizes = []
    with socket.create_connection((broker.host, broker.port), timeout=TIMEOUT) as sock:
        local = "{}:{}".format(*sock.getsockname()[:2])
        for cid in (11, 12, 13):
            frame = encode_request(MetadataRequest(topics=[]), 9, cid, client_id="logged")
            sock.sendall(frame)
            (size,) = struct.unpack(">i", recv_exact(sock, 4))
            recv_exact(sock, size)
            sizes.append((len(frame), size + 4))
    # A request is logged once its answer is written: the client may read it first.
    deadline = time.monotonic() + TIMEOUT
    while len(found := [m for m in lines(caplog) if m.group(4) == "logged"]) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert [(m.group(1), m.group(2), m.group(3)) for m in found] == [
        ("Metadata", "9", "11"),
        ("Metadata", "9", "12"),
        ("Metadata", "9", "13"),
    ]
    for m, (request_bytes, response_bytes) in zip(found, sizes, strict=True):
        assert m.group(5) == local and m.group(6) == "PLAINTEXT"
        assert m.group(7) == "User:ANONYMOUS"
        assert (int(m.group(8)), int(m.group(9))) == (request_bytes, response_bytes)
        parts = [float(m.group(i)) for i in range(11, 16)]
        assert abs(sum(parts) - float(m.group(10))) < 0.01  # the five times add up

    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "logged-producer"})
    producer.produce("logged-topic", b"x")
    assert producer.flush(TIMEOUT) == 0
    deadline = time.monotonic() + TIMEOUT
    while "Produce" not in {m.group(1) for m in lines(caplog) if m.group(4) == "logged-producer"}:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    apis = {m.group(1) for m in lines(caplog) if m.group(4) == "logged-producer"}
    assert {"ApiVersions", "Metadata", "Produce"} <= apis
    # With metrics on too, every logged request is also counted.
    samples = scrape(f"http://127.0.0.1:{port}/metrics")
    logged = sum(1 for m in lines(caplog) if (m.group(1), m.group(2)) == ("Metadata", "9"))
    counted = value(
        samples, "kafka_network_requestmetrics_requests_total", request="Metadata", version="9"
    )
    assert counted == logged >= 3


def test_off_by_default(kafka_broker, caplog):
    caplog.set_level(logging.INFO, logger="kafka.request.logger")
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    producer.produce("quiet", b"x")
    assert producer.flush(TIMEOUT) == 0
    assert lines(caplog) == []


def test_trio_broker_serve_logs_every_request_with_the_client_id_escaped(tmp_path):
    """Under `trio-broker serve`, whose handler limits the lines each client causes: the
    request log still has a line for every request (it had 10 of 25), and a newline in a
    client id is escaped there as in the broker's own lines (it wrote a line of its own)."""
    broker = BrokerProcess({"log.dirs": str(tmp_path / "logs"), "request.log.enable": "true"})
    try:
        with socket.create_connection((broker.host, broker.port), timeout=TIMEOUT) as sock:
            for cid in range(25):
                frame = encode_request(
                    MetadataRequest(topics=[]), 9, cid, client_id="ops\nFORGED line"
                )
                sock.sendall(frame)
                (size,) = struct.unpack(">i", recv_exact(sock, 4))
                recv_exact(sock, size)
        deadline = time.monotonic() + TIMEOUT
        while sum("Completed request" in line for line in broker.lines) < 25:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        broker.stop()
    done = [line for line in broker.lines if "Completed request" in line]
    ids = [int(re.search(r"correlation_id=(\d+)", line).group(1)) for line in done]
    assert ids == list(range(25))
    assert all("client_id=ops\\nFORGED line peer=" in line for line in done)
    assert not any(line.startswith("FORGED") for line in broker.lines)
