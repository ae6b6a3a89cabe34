"""serve() and open_broker() embedded in a Trio program; the CLI as a process."""

import os
import re
import signal
import subprocess
import sys
import time

import trio
from wire import encode_request, request_of

import trio_broker
from trio_broker.protocol._generated import response_class
from trio_broker.protocol._generated.response_header import ResponseHeader


async def _api_versions(stream: trio.SocketStream, correlation_id: int = 1) -> int:
    await stream.send_all(encode_request(request_of(18), 3, correlation_id))
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
        chunk = await stream.receive_some(65536)
        assert chunk, "connection closed"
        buf += chunk
    header, pos = ResponseHeader.decode(buf[4:], 0)
    body, _ = response_class(18).decode(buf[4:], 3, pos)
    assert body.error_code == 0
    return header.correlation_id


async def test_serve_reports_bound_port_and_answers(tmp_path):
    config = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)}
    async with trio.open_nursery() as nursery:
        addresses = await nursery.start(trio_broker.serve, config)
        host, port = addresses[0]
        assert host == "127.0.0.1" and port > 0
        stream = await trio.open_tcp_stream(host, port)
        assert await _api_versions(stream, 7) == 7
        await stream.aclose()
        nursery.cancel_scope.cancel()


async def test_open_broker_yields_bootstrap(tmp_path):
    config = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)}
    async with trio_broker.open_broker(config) as bootstrap:
        host, port = bootstrap.rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        assert await _api_versions(stream) == 1
        await stream.aclose()


async def test_shutdown_lets_the_request_in_flight_finish(tmp_path):
    """Cancelling serve() while a client waits for a response still delivers it."""
    config = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)}
    async with trio.open_nursery() as outer:
        broker_scope = trio.CancelScope()

        async def run_broker(task_status):
            with broker_scope:
                await trio_broker.serve(config, task_status=task_status)

        (host, port), *_ = await outer.start(run_broker)
        stream = await trio.open_tcp_stream(host, port)
        # Send a request and cancel the broker in the same scheduling step.
        await stream.send_all(encode_request(request_of(18), 3, 5))
        broker_scope.cancel()
        data = await stream.receive_some(65536)
        assert len(data) > 8 and int.from_bytes(data[4:8], "big") == 5
        await stream.aclose()


def test_cli_starts_logs_port_and_stops_on_sigterm(tmp_path):
    start = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trio_broker",
            "serve",
            "--override",
            "listeners=PLAINTEXT://127.0.0.1:0",
            "--override",
            f"log.dirs={tmp_path / 'data'}",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = None
        for line in proc.stderr:
            m = re.search(r"listening on PLAINTEXT://127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        assert port, "no listening line"
        import socket

        from wire import roundtrip

        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        assert roundtrip(sock, request_of(18), 3).error_code == 0
        first_answer_s = time.monotonic() - start
        sock.close()
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()
        assert proc.wait(timeout=30) == 0
        assert "stopped" in rest
        print(f"process start to first answer: {first_answer_s * 1000:.0f} ms")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)


def test_cli_stops_on_sigterm_while_still_starting(tmp_path):
    # ZooKeeper unreachable: start-up waits for it (zookeeper.connection.timeout.ms), and a
    # SIGTERM meanwhile must stop the broker, not wait for start-up to finish first.
    from trio_broker.testing import free_port

    proc = subprocess.Popen(
        [
            sys.executable, "-m", "trio_broker", "serve",
            "--override", "listeners=PLAINTEXT://127.0.0.1:0",
            "--override", f"log.dirs={tmp_path / 'data'}",
            "--override", f"zookeeper.connect=127.0.0.1:{free_port()}",
            "--override", "zookeeper.connection.timeout.ms=120000",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        for line in proc.stderr:
            if "Connection refused" in line:  # kazoo is trying to reach ZooKeeper
                break
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert "received SIGTERM" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
