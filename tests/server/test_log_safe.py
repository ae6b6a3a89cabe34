"""Log lines clients cannot forge or flood (issue 34): their strings escaped wherever they
reach a line, and the lines they cause limited per address."""

import logging
import socket
import struct
import time

import pytest
from wire import encode_request, is_closed, read_response, request_of

from trio_broker.errors import ErrorCode
from trio_broker.server import log_safe
from trio_broker.server.log_safe import CLIENT_ADDRESS, ClientLineFilter, escape
from trio_broker.testing import BrokerProcess

FORGED = "2026-11-27 00:00:00,000 ERROR trio_broker.broker: FORGED LINE"


def test_escape_writes_every_control_character_as_an_escape():
    assert escape("a\nb\rc\td") == "a\\nb\\rc\\td"
    assert escape("\x00\x1b[31m\x7f\x85\u2028") == "\\x00\\x1b[31m\\x7f\\x85\\u2028"
    assert escape("plain, ünïcode and \\n as typed") == "plain, ünïcode and \\n as typed"


@pytest.fixture
def records() -> list[logging.LogRecord]:
    log_safe.install()
    got: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = got.append  # type: ignore[method-assign]
    logger = logging.getLogger("trio_broker.test_log_safe")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    yield got
    logger.removeHandler(handler)
    logger.propagate = True
    logger.setLevel(logging.NOTSET)


def test_a_client_string_cannot_write_a_line_of_its_own(records):
    logger = logging.getLogger("trio_broker.test_log_safe")
    logger.info("transactional id %s: producer id %d", f"t\n{FORGED}", 7)
    logger.info("group %r", f"g\n{FORGED}")  # already escaped by repr: unchanged
    assert records[0].getMessage() == f"transactional id t\\n{FORGED}: producer id 7"
    assert records[1].getMessage() == f"group 'g\\n{FORGED}'"
    try:
        raise ValueError(f"no topic named x\n{FORGED}")
    except ValueError:
        logger.exception("handler failed")
    text = logging.Formatter().format(records[2])
    assert f"\n{FORGED}" not in text
    assert f"ValueError: no topic named x\\n{FORGED}" in text
    assert text.startswith("handler failed\nTraceback")  # the traceback's own lines stay


def test_other_loggers_are_left_alone():
    log_safe.install()
    record = logging.getLogger("someone.else").makeRecord(
        "someone.else", logging.INFO, __file__, 1, "a\n%s", ("b",), None
    )
    assert record.getMessage() == "a\nb"


def test_lines_on_a_clients_behalf_are_limited_per_address_and_call_site():
    limit = ClientLineFilter(burst=3, interval_s=60)

    def record(line: int) -> logging.LogRecord:
        return logging.LogRecord("trio_broker.x", logging.INFO, "x.py", line, "m%d", (line,), None)

    assert [limit.filter(record(1)) for _ in range(5)] == [True] * 5  # no client: all pass
    token = CLIENT_ADDRESS.set("10.0.0.1")
    try:
        assert [limit.filter(record(1)) for _ in range(5)] == [True] * 3 + [False] * 2
        assert limit.filter(record(2))  # another call site has its own
        CLIENT_ADDRESS.set("10.0.0.2")
        assert limit.filter(record(1))  # another address too
        CLIENT_ADDRESS.set("10.0.0.1")
        limit._windows[("10.0.0.1", "trio_broker.x", 1)][0] -= 60  # a minute later
        passed = record(1)
        assert limit.filter(passed)
        assert passed.getMessage() == "m1 (2 more like this from 10.0.0.1 not logged)"
    finally:
        CLIENT_ADDRESS.reset(token)


def test_closed_mid_frame_is_logged_once_per_address(kafka_broker, caplog):
    # Issue 34: one address wrote 20,166 such lines in four minutes.
    with caplog.at_level(logging.INFO, logger="trio_broker.server"):
        for _ in range(200):
            sock = socket.create_connection((kafka_broker.host, kafka_broker.port), timeout=20)
            sock.sendall(struct.pack(">i", 100) + b"\x00" * 10)
            sock.close()
        time.sleep(0.5)
        last = socket.create_connection((kafka_broker.host, kafka_broker.port), timeout=20)
        last.sendall(encode_request(request_of(18), 3, 1))
        assert read_response(last, 18, 3)[0] == 1
    lines = [r.getMessage() for r in caplog.records if "closed mid-frame" in r.getMessage()]
    assert len(lines) == 1, len(lines)


def init_producer_id(sock: socket.socket, transactional_id: str, cid: int) -> int:
    request = request_of(22, transactional_id=transactional_id, transaction_timeout_ms=60_000)
    sock.sendall(encode_request(request, 1, cid))
    got, body = read_response(sock, 22, 1)
    assert got == cid
    return body.error_code


def test_a_forged_line_is_escaped_in_the_brokers_output(tmp_path):
    # The issue's own case, through the command line's logging: a transactional.id with a
    # newline, logged by the transaction coordinator, wrote a line of its own. And the
    # coordinator's line for each InitProducerId is limited per address like the others.
    broker = BrokerProcess({"log.dirs": str(tmp_path / "logs"), "num.partitions": "1"})
    try:
        sock = socket.create_connection(("127.0.0.1", broker.port), timeout=20)
        deadline = time.monotonic() + 30
        cid = 0
        while True:
            cid += 1
            code = init_producer_id(sock, f"txn\n{FORGED}", cid)
            if code == ErrorCode.NONE or time.monotonic() > deadline:
                break
            time.sleep(0.2)  # the transaction state topic is being made
        assert code == ErrorCode.NONE
        for _ in range(25):
            cid += 1
            assert init_producer_id(sock, f"txn\n{FORGED}", cid) == ErrorCode.NONE
        sock.close()
        assert not is_closed(socket.create_connection(("127.0.0.1", broker.port)), 0.2)
    finally:
        broker.stop()
    output = "".join(broker.lines)
    assert FORGED in output
    assert not any(line.startswith(FORGED) for line in broker.lines)
    escaped = [line for line in broker.lines if f"txn\\n{FORGED}" in line]
    assert 1 <= len(escaped) <= 10, len(escaped)  # 26 InitProducerId, one line each before
