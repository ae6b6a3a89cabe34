"""/health and /ready on the metrics listener, as a load balancer reads them: the status
code, and the JSON body saying why the broker is not ready."""

from __future__ import annotations

import json
import shutil
import socket
import sys
import time

from cli_run import run_cli
from service_helpers import NotifySocket, ServiceProcess, clean_env, http_get, wait_for
from wire import request_of, roundtrip

from trio_broker.protocol._generated.produce_request import PartitionProduceData, TopicProduceData
from trio_broker.protocol.record_codec import build_batch
from trio_broker.testing import free_port


def _serve(overrides: dict[str, str], notify: NotifySocket | None = None) -> ServiceProcess:
    args = [sys.executable, "-m", "trio_broker", "serve"]
    for key, value in overrides.items():
        args += ["--override", f"{key}={value}"]
    env = clean_env(NOTIFY_SOCKET=notify.address) if notify else clean_env()
    return ServiceProcess(args, env=env)


def _get(port: int, path: str) -> tuple[int, dict] | None:
    got = http_get("127.0.0.1", port, path)
    return None if got is None else (got[0], json.loads(got[1]))


def _produce(port: int, topic: str, partition: int, value: bytes = b"v") -> int:
    batch = build_batch([(b"k", value, (), int(time.time() * 1000))])
    data = [
        TopicProduceData(
            name=topic, partition_data=[PartitionProduceData(index=partition, records=batch)]
        )
    ]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        response = roundtrip(sock, request_of(0, acks=1, timeout_ms=5000, topic_data=data), 9)
    return response.responses[0].partition_responses[0].error_code


def test_ready_until_a_partition_led_here_goes_offline(tmp_path):
    port, http = free_port(), free_port()
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    broker = _serve(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": ",".join(map(str, dirs)),
            "metrics.listener": f"http://127.0.0.1:{http}",
            "log.segment.bytes": "4000",  # a big batch rolls, and a roll needs the dir
        }
    )
    try:
        broker.wait_line("broker 1 started")
        assert _get(http, "/health") == (200, {"status": "serving"})
        assert _get(http, "/ready") == (200, {"ready": True, "status": "serving"})
        # Two partitions, one in each log dir; then one dir goes (a disk pulled).
        run_cli(f"127.0.0.1:{port}", "topics", "create", "orders", "-p", "2")
        assert _produce(port, "orders", 0) == 0 and _produce(port, "orders", 1) == 0
        lost = next(d for d in dirs if (d / "orders-1").exists())
        shutil.rmtree(lost)
        assert _produce(port, "orders", 1, b"x" * 5000) != 0
        status, body = wait_for(lambda: _get(http, "/ready")[0] == 503 and _get(http, "/ready"))
        assert body["ready"] is False
        assert body["reasons"] == ["1 partition(s) led here are offline: orders-1"]
        # The process still serves (the other partition too): alive, not ready.
        assert _get(http, "/health")[0] == 200
        assert _produce(port, "orders", 0) == 0
        assert broker.terminate() == 0
    finally:
        broker.close()


def test_ready_flips_once_the_logs_found_at_start_are_loaded(tmp_path):
    # A thousand partitions, and a crash: at the next start they are recovered in one
    # worker thread while the broker already answers.
    port, http = free_port(), free_port()
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": str(tmp_path / "data"),
        "metrics.listener": f"http://127.0.0.1:{http}",
        "num.recovery.threads.per.data.dir": "1",
    }
    broker = _serve(overrides)
    try:
        broker.wait_line("broker 1 started")
        run_cli(f"127.0.0.1:{port}", "topics", "create", "many", "-p", "1000")
        broker.proc.kill()
        broker.proc.wait(30)
    finally:
        broker.close()
    notify = NotifySocket()
    broker = _serve(overrides, notify)
    try:
        status, body = wait_for(lambda: _get(http, "/ready"), 60, "/ready to answer")
        assert status == 503 and body["ready"] is False
        assert body["reasons"][0].startswith("logs not loaded yet")
        assert notify.first("READY") is None
        wait_for(lambda: _get(http, "/ready")[0] == 200, 120, "/ready to say 200")
        wait_for(lambda: notify.first("READY", "1"), 60, "READY=1")
        assert "found 1000 logs; starting listeners" in notify.values("STATUS")
        assert broker.terminate() == 0
    finally:
        broker.close()
        notify.close()


def test_ready_flips_once_a_cluster_broker_registers(tmp_path, zookeeper):
    from kazoo.client import KazooClient

    # Another session holds /brokers/ids/1 (a broker's previous life, killed a moment ago):
    # the new one waits for it to go before it registers.
    holder = KazooClient(hosts=zookeeper.connect)
    holder.start(timeout=30)
    holder.create("/kafka/brokers/ids/1", b"{}", ephemeral=True, makepath=True)
    port, http = free_port(), free_port()
    notify = NotifySocket()
    broker = _serve(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": str(tmp_path / "data"),
            "metrics.listener": f"http://127.0.0.1:{http}",
            "zookeeper.connect": zookeeper.connect + "/kafka",
            "zookeeper.session.timeout.ms": "30000",
        },
        notify,
    )
    try:
        # Answered before registering: the services start behind the listener.
        status, body = wait_for(
            lambda: (got := _get(http, "/ready")) and "registering" in got[1]["status"] and got,
            60,
            "/ready to answer while registering",
        )
        assert status == 503
        assert body == {
            "ready": False,
            "status": "registering broker 1",
            "reasons": ["not registered in ZooKeeper yet"],
        }
        assert _get(http, "/health") == (200, {"status": "registering broker 1"})
        broker.wait_line("is registered by another session")
        assert notify.first("READY") is None
        assert "registering broker 1" in notify.values("STATUS")

        holder.stop()  # the old session ends: its znode goes
        wait_for(lambda: _get(http, "/ready")[0] == 200, 60, "/ready to say 200")
        assert _get(http, "/ready") == (200, {"ready": True, "status": "serving"})
        wait_for(lambda: notify.first("READY", "1"), 60, "READY=1")
        assert broker.terminate() == 0
        assert notify.first("STOPPING", "1") is not None
    finally:
        holder.stop()
        holder.close()
        broker.close()
        notify.close()
