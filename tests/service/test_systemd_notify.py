"""`trio-broker serve` under systemd (Type=notify), with the test playing systemd: a
datagram socket whose address is the broker's NOTIFY_SOCKET, the messages read and checked.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

from cli_run import run_cli
from service_helpers import (
    NotifySocket,
    ServiceProcess,
    api_versions_answers,
    clean_env,
    wait_for,
)

from trio_broker.testing import free_port


def _serve(tmp_path, notify: NotifySocket, port: int, **env: str) -> ServiceProcess:
    return ServiceProcess(
        [
            sys.executable,
            "-m",
            "trio_broker",
            "serve",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override",
            f"log.dirs={tmp_path / 'data'}",
        ],
        env=clean_env(NOTIFY_SOCKET=notify.address, **env),
    )


def test_ready_status_watchdog_then_stopping(tmp_path):
    # An abstract socket (NOTIFY_SOCKET=@name), as systemd itself gives.
    notify = NotifySocket(abstract=True)
    port = free_port()
    # WatchdogSec=0.4 s: a ping every 0.2 s.
    broker = _serve(tmp_path, notify, port, WATCHDOG_USEC="400000")
    try:
        wait_for(lambda: api_versions_answers("127.0.0.1", port, 1), 60, "ApiVersions")
        answered = time.monotonic()
        ready_at, ready = wait_for(lambda: notify.first("READY", "1"), 60, "READY=1")
        assert ready["STATUS"] == f"serving on 127.0.0.1:{port}"
        # The goal: READY=1 within 1 s of the first ApiVersions answer (on an empty broker).
        # Printed, not asserted: a timed assertion fails on a loaded machine.
        print(f"\nREADY=1 {1000 * (ready_at - answered):+.0f} ms after the first ApiVersions")
        statuses = notify.values("STATUS")
        # While starting, before READY: what it was doing.
        assert statuses[0] == f"loading logs from {tmp_path / 'data'}"
        assert "found 0 logs; starting listeners" in statuses
        assert statuses.index("serving") < statuses.index(f"serving on 127.0.0.1:{port}")
        assert all("READY" not in f for _, f in notify.all()[: statuses.index("serving")])
        wait_for(lambda: len(notify.values("WATCHDOG")) >= 3, 60, "three WATCHDOG=1")
        assert set(notify.values("WATCHDOG")) == {"1"}

        assert broker.terminate() == 0
        stopping = notify.first("STOPPING", "1")
        assert stopping is not None and stopping[1]["STATUS"] == "stopping (SIGTERM)"
        assert notify.first("STATUS", "shutting down") is not None
        # Nothing claims readiness after the stop began.
        after = [f for at, f in notify.all() if at >= stopping[0]]
        assert not any("READY" in f for f in after)
    finally:
        broker.close()
        notify.close()


def test_recovery_is_reported_and_no_watchdog_unless_asked(tmp_path):
    notify = NotifySocket()  # a socket file this time
    port = free_port()
    broker = _serve(tmp_path, notify, port)
    try:
        wait_for(lambda: notify.first("READY", "1"), 60, "READY=1")
        bootstrap = f"127.0.0.1:{port}"
        run_cli(bootstrap, "topics", "create", "events", "-p", "1")
        run_cli(bootstrap, "produce", "events", "--value", "one", "--value", "two")
        assert (tmp_path / "data" / "events-0").is_dir()
        # kill -9: the next start must recover the log.
        os.kill(broker.proc.pid, signal.SIGKILL)
        broker.proc.wait(30)
    finally:
        broker.close()
    assert not notify.values("WATCHDOG")
    notify.close()

    notify = NotifySocket()
    broker = _serve(tmp_path, notify, port)
    try:
        wait_for(lambda: notify.first("READY", "1"), 60, "READY=1 after the crash")
        statuses = notify.values("STATUS")
        assert statuses[0] == f"recovering logs after an unclean shutdown in {tmp_path / 'data'}"
        assert "found 1 logs; starting listeners" in statuses
        assert broker.terminate() == 0
        assert notify.first("STOPPING", "1") is not None
    finally:
        broker.close()
        notify.close()


def test_a_broker_that_cannot_start_says_why(tmp_path):
    notify = NotifySocket()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        broker = _serve(tmp_path, notify, taken.getsockname()[1])
        try:
            assert broker.proc.wait(60) == 1
        finally:
            broker.close()
            notify.close()
    assert notify.first("READY") is None
    assert notify.values("STATUS")[-1].startswith("cannot start: [Errno 98]")
