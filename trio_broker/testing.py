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
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from trio_broker.config import BrokerConfig

__all__ = ["BrokerProcess", "BrokerThread", "KafkaCluster", "ZooKeeperServer", "wait_all_see"]


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


_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default; elsewhere bind(0) below still answers


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now, for a server this process is about to start.

    It is taken below the kernel's ephemeral range (ip_local_port_range): a port that
    bind(0) returns lies inside that range, where any process's outgoing connection can be
    given it as its local port before the server binds it ("Address already in use").
    Ports this process handed out are not handed out again. Another process may still
    start a server on it first; that is rare, and a caller that cares retries."""
    import random

    low = _ephemeral_low()
    if low > 12000:
        for _attempt in range(100):
            port = random.randrange(10000, low)
            if port in _handed_out:
                continue
            with socket.socket() as s:
                # As a listener binds (trio sets SO_REUSEADDR): a connection in TIME_WAIT
                # on the port does not stop it, a listener does.
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    with socket.socket() as s:
        s.bind((host, 0))
        port = s.getsockname()[1]
    _handed_out.add(port)
    return port


class BrokerProcess:
    """`python -m trio_broker serve` with these overrides, on a free loopback port unless
    `listeners` is given (with several, `port` and `bootstrap` are the last one's);
    returns once the broker says it started. Its log lines are kept
    in `.lines` (and stderr is drained, so the child never blocks on a full pipe).
    `prefix` runs the command through another one that execs it (such as
    `ip netns exec <namespace>`: the broker on a host of a test network); `preexec_fn`
    runs in the child before the broker (such as lowering its RLIMIT_NOFILE)."""

    def __init__(
        self,
        overrides: Mapping[str, str],
        *,
        start_timeout_s: float = 60,
        prefix: Sequence[str] = (),
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        props = dict(overrides)
        if "listeners" not in props:
            props["listeners"] = f"PLAINTEXT://127.0.0.1:{free_port()}"
        last = props["listeners"].split(",")[-1]
        self.host = last.split("://", 1)[-1].rsplit(":", 1)[0] or "127.0.0.1"
        self.port = int(last.rsplit(":", 1)[1])
        self.overrides = props
        self.start_timeout_s = start_timeout_s
        self.prefix = list(prefix)
        self.preexec_fn = preexec_fn
        self.lines: list[str] = []
        self._launch()

    def _launch(self) -> None:
        args = [*self.prefix, sys.executable, "-m", "trio_broker", "serve"]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        start_timeout_s = self.start_timeout_s
        self.proc = subprocess.Popen(
            args, stderr=subprocess.PIPE, text=True, preexec_fn=self.preexec_fn
        )
        started = threading.Event()
        self._drainer = threading.Thread(target=self._drain, args=(started,), daemon=True)
        self._drainer.start()
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
        return f"{self.host}:{self.port}"

    def wait_exit(self, timeout_s: float) -> int:
        """The exit code once the process has ended on its own, with every line it wrote
        in `.lines` (the process's exit does not wait for the thread reading them)."""
        code = self.proc.wait(timeout_s)
        self._drainer.join(timeout_s)
        return code

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

    @property
    def log_dir(self) -> Path:
        return Path(self.overrides["log.dirs"].split(",")[0])

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def pause(self) -> None:
        """SIGSTOP: the process is frozen (its ZooKeeper session and connections stay open
        until they time out), as a long GC pause or a hung machine would be."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after `pause()`."""
        os.kill(self.proc.pid, signal.SIGCONT)

    def start_again(self) -> BrokerProcess:
        """Start the stopped or killed broker again, same port and log dirs."""
        if self.alive:
            raise RuntimeError("the broker is still running")
        self._launch()
        return self

    def close(self) -> None:
        """Whatever its state: resume if paused, then SIGTERM, then kill -9 after 30 s."""
        if not self.alive:
            return
        try:
            self.resume()
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            if self.alive:
                self.kill()


# --- ZooKeeper, for clusters ----------------------------------------------------------------

# Debian's `zookeeper` package: the server classes in /usr/share/java/zookeeper.jar, whose
# manifest Class-Path names its dependencies (netty, jute, slf4j-api, ...) in the same folder.
# slf4j needs a binding to log at all; log4j 1.2 is what Debian's own start script uses.
_ZOOKEEPER_JARS = (
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/slf4j-log4j12.jar",
    "/usr/share/java/log4j-1.2.jar",
)
ZOOKEEPER_MISSING = "ZooKeeper is not installed (apt-get install zookeeper; .ci/run installs it)"


def zookeeper_classpath() -> str | None:
    """The classpath of Debian's ZooKeeper server, or None when it (or java) is missing."""
    import shutil

    if shutil.which("java") is None or not all(os.path.exists(j) for j in _ZOOKEEPER_JARS):
        return None
    return ":".join(_ZOOKEEPER_JARS)


def zookeeper_command(address: str, command: bytes = b"srvr", timeout_s: float = 2) -> str:
    """A four-letter-word command (`ruok`, `srvr`, `dump`, ...) to a ZooKeeper at host:port."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as s:
        s.sendall(command)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode()


class ZooKeeperServer:
    """Debian's ZooKeeper, standalone, on a free loopback port in a temporary directory.

        with ZooKeeperServer() as zk:
            config = {"zookeeper.connect": zk.connect, ...}

    Its own zoo.cfg, data dir and log4j config (the server logs to `zookeeper.log` in the
    directory); the admin HTTP server is off. Started with `java ... ZooKeeperServerMain`
    directly rather than through zkServer.sh, which costs a few shell round trips and
    waits. `tickTime` is 500 ms so that sessions may be as short as 1 s and expire on
    time in tests (ZooKeeper checks expiry once per tick). The directory is removed on
    `stop()` unless `keep_dir`.
    """

    def __init__(
        self,
        *,
        tick_time_ms: int = 500,
        start_timeout_s: float = 30,
        keep_dir: bool = False,
        host: str = "127.0.0.1",
        prefix: Sequence[str] = (),
    ) -> None:
        # `host` and `prefix` put the server on another host of a test network: it binds
        # `host`, and its command runs through `prefix` (`ip netns exec <namespace>`).
        self.host = host
        self.prefix = list(prefix)
        self.tick_time_ms = tick_time_ms
        self.start_timeout_s = start_timeout_s
        self.keep_dir = keep_dir
        self.dir: Path | None = None
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_seconds = 0.0

    @property
    def connect(self) -> str:
        """The `zookeeper.connect` string, without a chroot."""
        return f"{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        assert self.dir is not None
        return self.dir / "zookeeper.log"

    def start(self) -> ZooKeeperServer:
        import tempfile
        import time

        classpath = zookeeper_classpath()
        if classpath is None:
            raise RuntimeError(ZOOKEEPER_MISSING)
        begin = time.perf_counter()
        self.dir = Path(tempfile.mkdtemp(prefix="zookeeper-"))
        # free_port() can race with another process; a lost race shows as an early exit.
        for _attempt in range(3):
            self.port = free_port()
            self._write_config()
            if self._launch(classpath):
                self.start_seconds = time.perf_counter() - begin
                return self
        self.stop()
        raise RuntimeError(f"ZooKeeper did not start; see {self.log_file}")

    def _write_config(self) -> None:
        assert self.dir is not None
        data = self.dir / "data"
        data.mkdir(exist_ok=True)
        (self.dir / "zoo.cfg").write_text(
            f"tickTime={self.tick_time_ms}\n"
            f"dataDir={data}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            f"minSessionTimeout={2 * self.tick_time_ms}\n"
            "maxSessionTimeout=60000\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,dump,wchc\n"
            # No snapshot thread work for tests' tiny data; nothing to purge.
            "autopurge.purgeInterval=0\n"
        )
        (self.dir / "log4j.properties").write_text(
            "log4j.rootLogger=INFO, FILE\n"
            "log4j.appender.FILE=org.apache.log4j.FileAppender\n"
            f"log4j.appender.FILE.File={self.dir / 'zookeeper.log'}\n"
            "log4j.appender.FILE.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n\n"
        )

    def _launch(self, classpath: str) -> bool:
        import time

        assert self.dir is not None
        args = [
            *self.prefix,
            "java",
            "-cp",
            classpath,
            # A small, short-lived JVM: the client compiler alone and the serial collector
            # start fastest, and a test's ZooKeeper holds a few kilobytes.
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-Xmx128m",
            f"-Dlog4j.configuration=file:{self.dir / 'log4j.properties'}",
            "-Dzookeeper.jmx.log4j.disable=true",
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(self.dir / "zoo.cfg"),
        ]
        with open(self.dir / "zookeeper.out", "ab") as out:
            self.proc = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if "Mode: standalone" in zookeeper_command(self.connect, b"srvr", 1):
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        self._terminate()
        return False

    def _terminate(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """kill -9 the server: every session's connection drops at once, and nothing
        answers on the port until `start_again()`."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def start_again(self) -> ZooKeeperServer:
        """After `kill()`: the same server again, on the same port with the same data, so
        sessions and znodes come back from its transaction log, as after a crash."""
        classpath = zookeeper_classpath()
        if classpath is None:
            raise RuntimeError(ZOOKEEPER_MISSING)
        if self.proc is not None:
            raise RuntimeError("ZooKeeper is still running")
        if not self._launch(classpath):
            raise RuntimeError(f"ZooKeeper did not start again; see {self.log_file}")
        return self

    def stop(self) -> None:
        import shutil

        self._terminate()
        if self.dir is not None and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def wait_all_see(brokers: Mapping[int, Any], budget_s: float = 30) -> None:
    """Until every broker (BrokerThread or BrokerProcess, by node id) lists every one in its
    Metadata. A broker learns of another a moment after that one registers (from the
    controller's UpdateMetadata), and until then, as in Kafka, a topic created through it
    cannot have a replica there (INVALID_REPLICA_ASSIGNMENT): a cluster is ready once they
    all know each other. A broker whose listeners all need TLS or SASL is not asked."""
    want = set(brokers)
    deadline = time.monotonic() + budget_s
    for node_id, broker in brokers.items():
        addresses = (
            [(a[0], a[1]) for a in broker.addresses]
            if isinstance(broker, BrokerThread)
            else [(getattr(broker, "host", "127.0.0.1"), broker.port)]
        )
        while True:
            seen = _brokers_seen(addresses)
            if seen is None or want <= seen:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"broker {node_id} lists brokers {sorted(seen)}, not {sorted(want)}, "
                    f"after {budget_s} s"
                )
            time.sleep(0.02)


def _brokers_seen(addresses: list[tuple[str, int]]) -> set[int] | None:
    """The node ids in the Metadata (v1) of the first of `addresses` that answers in plain
    Kafka; None when none does (TLS or SASL listeners only)."""
    import struct

    from trio_broker.protocol._generated.metadata_request import MetadataRequest
    from trio_broker.protocol._generated.metadata_response import MetadataResponse
    from trio_broker.protocol._generated.request_header import RequestHeader

    body = bytearray()
    RequestHeader(
        request_api_key=3, request_api_version=1, correlation_id=1, client_id="kafka-cluster"
    ).encode(1, body)
    MetadataRequest(topics=[]).encode(1, body)
    frame = struct.pack(">i", len(body)) + bytes(body)
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=5) as sock:
                sock.sendall(frame)
                data = b""
                while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
                    chunk = sock.recv(65536)
                    if not chunk:
                        raise ConnectionError("closed")
                    data += chunk
            response, _ = MetadataResponse.decode(data[4:], 1, 4)  # after the correlation id
            return {b.node_id for b in response.brokers}
        except (OSError, ValueError, struct.error, IndexError):
            continue
    return None


class KafkaCluster:
    """Brokers (`BrokerThread`s, node ids 1..size) joined through one ZooKeeper, each with its
    own log dir under `base_dir` and a free loopback port.

        with ZooKeeperServer() as zk, KafkaCluster(zk, base_dir=tmp) as cluster:
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    `overrides` apply to every broker (e.g. a short `zookeeper.session.timeout.ms`);
    `add_broker(node_id)` starts one more. Brokers are stopped in reverse order on exit.

    With `processes=True` each broker is a `BrokerProcess` (`trio-broker serve` as a child
    process on a fixed free port, or on the `listeners` of its overrides) instead of a thread, for faults a thread cannot have:
    `kill()` (kill -9), `pause()`/`resume()` (SIGSTOP/SIGCONT), `stop()` (SIGTERM), and
    `start_again()` on the same port and log dir.
    """

    def __init__(
        self,
        zookeeper: ZooKeeperServer,
        *,
        base_dir: str | os.PathLike[str],
        size: int = 3,
        chroot: str = "/kafka",
        overrides: Mapping[str, str] | None = None,
        processes: bool = False,
    ) -> None:
        self.processes = processes
        self.zookeeper = zookeeper
        self.base_dir = Path(base_dir)
        self.size = size
        self.zookeeper_connect = zookeeper.connect + chroot
        # A stopping broker that still leads partitions nobody else can take (the last
        # broker standing) retries its controlled shutdown; 5 s apart, as in Kafka, would
        # make every teardown slow.
        self.overrides = {"controlled.shutdown.retry.backoff.ms": "200", **(overrides or {})}
        self.brokers: dict[int, Any] = {}  # BrokerThread, or BrokerProcess with processes

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def broker_config(
        self, node_id: int, overrides: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        return {
            "node.id": str(node_id),
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(self.base_dir / f"broker-{node_id}"),
            "zookeeper.connect": self.zookeeper_connect,
            **self.overrides,
            **(overrides or {}),
        }

    def add_broker(self, node_id: int, overrides: Mapping[str, str] | None = None) -> Any:
        config = self.broker_config(node_id, overrides)
        if self.processes:
            if "listeners" not in (overrides or {}):
                config["listeners"] = f"PLAINTEXT://127.0.0.1:{free_port()}"
            broker: Any = BrokerProcess(config)
        else:
            broker = BrokerThread(config).start()
        self.brokers[node_id] = broker
        return broker

    def start(self) -> KafkaCluster:
        try:
            for node_id in range(1, self.size + 1):
                self.add_broker(node_id)
            self.wait_all_see()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_all_see(self, budget_s: float = 30) -> None:
        wait_all_see(self.brokers, budget_s)

    def stop(self) -> None:
        for node_id in sorted(self.brokers, reverse=True):
            broker = self.brokers.pop(node_id)
            if isinstance(broker, BrokerProcess):
                broker.close()
            else:
                broker.stop()

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
