"""max.connections, max.connections.per.ip (+ overrides), max.connection.creation.rate: a
connection over a limit is closed at once, the others go on; bad frames and refusals are
logged once per address per interval, not once per event."""

import logging
import socket
import struct
import time

import pytest
from wire import encode_request, is_closed, read_response, request_of

from trio_broker.server.connection_quotas import ConnectionQuotas, parse_ip_overrides
from trio_broker.server.log_limit import LogLimiter

API_VERSIONS_V = 3


def connect(broker, source: str | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(20)
    if source is not None:
        sock.bind((source, 0))
    sock.connect((broker.host, broker.port))
    return sock


def answers(sock: socket.socket, cid: int = 1) -> bool:
    sock.settimeout(20)
    sock.sendall(encode_request(request_of(18), API_VERSIONS_V, cid))
    got, body = read_response(sock, 18, API_VERSIONS_V)
    return got == cid and body.error_code == 0


def refused(sock: socket.socket) -> bool:
    """Closed by the broker without a word, within a few seconds (not left hanging)."""
    return is_closed(sock, timeout=5)


def can_bind(address: str) -> bool:
    try:
        with socket.socket() as s:
            s.bind((address, 0))
    except OSError:
        return False
    return True


def test_per_ip_limit_refuses_the_extra_connection_only(kafka_broker_factory, caplog):
    overrides = {"max.connections.per.ip": "5"}
    other_ip = can_bind("127.0.0.2")
    if other_ip:
        overrides["max.connections.per.ip.overrides"] = "127.0.0.2:7"
    broker = kafka_broker_factory(overrides)
    first = [connect(broker) for _ in range(5)]
    assert all(answers(s) for s in first)
    with caplog.at_level(logging.WARNING, logger="trio_broker.server"):
        extra = [connect(broker) for _ in range(20)]
        assert all(refused(s) for s in extra)
    # The five were not disturbed.
    assert all(answers(s, 2) for s in first)
    lines = [r.getMessage() for r in caplog.records if "refused a connection" in r.getMessage()]
    assert 1 <= len(lines) <= 2, lines  # not one per refusal
    assert "127.0.0.1 already has the maximum of 5 connections" in lines[0]
    if other_ip:
        # The override: another address gets seven.
        others = [connect(broker, "127.0.0.2") for _ in range(7)]
        assert all(answers(s) for s in others)
        assert refused(connect(broker, "127.0.0.2"))
        for s in others:
            s.close()
    # A closed connection frees its place.
    first.pop().close()
    deadline = time.monotonic() + 20
    while True:
        again = connect(broker)
        if not refused_quickly(again):
            break
        assert time.monotonic() < deadline, "the freed place was never given back"
    assert answers(again)
    for s in [*first, again, *extra]:
        s.close()


def refused_quickly(sock: socket.socket) -> bool:
    # After a close, the broker may take a moment to notice it: an answer means admitted.
    try:
        return not answers(sock)
    except (ConnectionError, OSError):
        return True


def test_max_connections_refuses_at_once(kafka_broker_factory):
    broker = kafka_broker_factory({"max.connections": "3"})
    held = [connect(broker) for _ in range(3)]
    assert all(answers(s) for s in held)
    assert refused(connect(broker))
    assert all(answers(s, 2) for s in held)
    for s in held:
        s.close()


def test_connection_creation_rate_is_a_token_bucket():
    quotas = ConnectionQuotas(max_connection_creation_rate=3)
    admitted = [quotas.admit("10.0.0.1", 100.0) for _ in range(5)]
    assert admitted[:3] == [None, None, None]  # a burst up to one second's worth
    assert all("max.connection.creation.rate" in why for why in admitted[3:])
    assert quotas.admit("10.0.0.2", 100.34) is None  # a third of a second: one more token
    assert quotas.admit("10.0.0.2", 100.35) is not None
    assert quotas.total == 4
    assert [quotas.admit("10.0.0.3", 200.0) for _ in range(4)].count(None) == 3  # refilled


def test_quotas_count_per_address_and_release():
    quotas = ConnectionQuotas(max_connections=4, max_connections_per_ip=2, overrides="h:0")
    assert quotas.admit("10.0.0.1", 0) is None
    assert quotas.admit("10.0.0.1", 0) is None
    assert "maximum of 2" in quotas.admit("10.0.0.1", 0)
    assert quotas.admit("10.0.0.2", 0) is None
    assert quotas.admit("10.0.0.3", 0) is None
    assert "max.connections=4" in quotas.admit("10.0.0.4", 0)
    quotas.release("10.0.0.1")
    assert quotas.admit("10.0.0.1", 0) is None
    assert quotas.per_ip == {"10.0.0.1": 2, "10.0.0.2": 1, "10.0.0.3": 1}
    assert quotas.limit_for("h") == 0


def test_overrides_parse_like_kafka():
    assert parse_ip_overrides("127.0.0.1:5, hostname:100,::1:3,[fe80::1]:0") == {
        "127.0.0.1": 5,
        "hostname": 100,
        "::1": 3,
        "fe80::1": 0,
    }
    assert parse_ip_overrides("") == {}
    for bad in ("127.0.0.1", "x:y", "x:-1", ":3"):
        with pytest.raises(ValueError):
            parse_ip_overrides(bad)


def test_log_limiter_once_per_interval_with_a_count():
    limiter = LogLimiter(60)
    assert limiter.hit("a", 0.0) == 0
    assert [limiter.hit("a", t) for t in (1.0, 2.0, 59.0)] == [None, None, None]
    assert limiter.hit("b", 3.0) == 0  # another address has its own line
    assert limiter.hit("a", 60.0) == 3  # the next line says how many were skipped
    assert limiter.hit("a", 61.0) is None


def test_bad_frames_are_logged_once_per_client_per_interval(kafka_broker, caplog):
    with caplog.at_level(logging.WARNING, logger="trio_broker.server"):
        for _ in range(1000):
            sock = connect(kafka_broker)
            sock.sendall(struct.pack(">i", -1))
            assert is_closed(sock, timeout=10)
            sock.close()
    lines = [r.getMessage() for r in caplog.records if "bad frame" in r.getMessage()]
    assert 1 <= len(lines) <= 2, len(lines)
    assert "negative frame size" in lines[0]
    assert answers(connect(kafka_broker))  # and the broker serves on
