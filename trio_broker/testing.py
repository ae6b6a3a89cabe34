"""Brokers for tests and for programs that are not Trio programs.

Blocking clients (confluent-kafka, kafka-python) and asyncio ones (aiokafka) cannot run
inside the broker's Trio loop, so `BrokerThread` runs `serve()` under its own `trio.run`
on a daemon thread:

    with BrokerThread({"log.dirs": "/tmp/data"}) as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})

`BrokerProcess` runs `trio-broker serve` as a child process instead, for what a thread
cannot do: `kill()` is a kill -9, as in a crash test.

    broker = BrokerProcess({"log.dirs": "/tmp/data"})
    ...
    broker.kill()
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from trio_broker.config import BrokerConfig

__all__ = ["BrokerProcess", "BrokerThread"]


class BrokerThread:
    def __init__(self, config: BrokerConfig | Mapping[str, str], *, start_timeout_s: float = 30):
        if not isinstance(config, BrokerConfig):
            props = {"listeners": "PLAINTEXT://127.0.0.1:0"} | dict(config)
            config = BrokerConfig.from_properties(props)
        self.config = config
        self.addresses: list[tuple[str, int]] = []
        self._start_timeout_s = start_timeout_s
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._thread: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        host, port = self.addresses[0][:2]
        return f"{host}:{port}"

    @property
    def host(self) -> str:
        return self.addresses[0][0]

    @property
    def port(self) -> int:
        return self.addresses[0][1]

    @property
    def log_dir(self) -> Path:
        return Path(self.config.log_dirs[0])

    def start(self) -> BrokerThread:
        self._thread = threading.Thread(target=self._run, name="trio-broker", daemon=True)
        self._thread.start()
        if not self._started.wait(self._start_timeout_s):
            raise TimeoutError("broker did not start")
        if self._error is not None:
            raise RuntimeError("broker failed to start") from self._error
        return self

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # reported to the starting thread
            self._error = exc
            self._started.set()

    async def _main(self) -> None:
        from trio_broker.broker import serve

        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            self._scope = scope
            async with trio.open_nursery() as nursery:
                self.addresses = await nursery.start(serve, self.config)
                self._started.set()

    def stop(self, timeout_s: float = 30) -> None:
        """Graceful shutdown (as on SIGTERM); returns once the logs are closed."""
        if self._thread is None:
            return
        if self._token is not None and self._scope is not None and self._thread.is_alive():
            try:
                trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join(timeout_s)
        self._thread = None
        if self._error is not None:
            raise RuntimeError("broker failed") from self._error

    def restart(self) -> BrokerThread:
        """Stop, then start again on the same port and log directories."""
        port = self.port
        self.stop()
        listeners = tuple(
            type(lst)(name=lst.name, host=lst.host, port=port) for lst in self.config.listeners[:1]
        )
        import attrs

        self.config = attrs.evolve(self.config, listeners=listeners)
        self._started = threading.Event()
        return self.start()

    def __enter__(self) -> BrokerThread:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (another process may take it before you do)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class BrokerProcess:
    """`python -m trio_broker serve` with these overrides, on a free loopback port unless
    `listeners` is given; returns once the broker says it started. Its log lines are kept
    in `.lines` (and stderr is drained, so the child never blocks on a full pipe)."""

    def __init__(self, overrides: Mapping[str, str], *, start_timeout_s: float = 60) -> None:
        props = dict(overrides)
        if "listeners" not in props:
            props["listeners"] = f"PLAINTEXT://127.0.0.1:{free_port()}"
        self.port = int(props["listeners"].rsplit(":", 1)[1])
        self.lines: list[str] = []
        args = [sys.executable, "-m", "trio_broker", "serve"]
        for key, value in props.items():
            args += ["--override", f"{key}={value}"]
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        started = threading.Event()
        threading.Thread(target=self._drain, args=(started,), daemon=True).start()
        if not started.wait(start_timeout_s) or self.proc.poll() is not None:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("broker did not start:\n" + "".join(self.lines[-30:]))

    def _drain(self, started: threading.Event) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if not started.is_set() and re.search(r"broker \d+ started", line):
                started.set()
        started.set()  # exited: the starter looks at poll()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        """kill -9: no shutdown, no flush, no checkpoint."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM (a graceful shutdown); returns the exit code. Fails if it had exited."""
        code = self.proc.poll()
        if code is not None:
            raise RuntimeError(f"broker exited by itself ({code}):\n" + "".join(self.lines[-30:]))
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)
