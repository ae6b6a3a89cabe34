"""The Prometheus endpoint: `metrics.listener=http://host:port`, serving GET /metrics,
and the health checks of a load balancer or an orchestrator beside it:

    GET /health   200 while the broker process serves (its event loop answers)
    GET /ready    200 once logs are loaded, the listeners are up and, in a cluster, the
                  broker is registered in ZooKeeper and no partition it leads is offline
                  here; 503 otherwise, with the reasons in a short JSON body

Both answer JSON (`{"ready": false, "status": "...", "reasons": ["..."]}`); the reasons
come from the broker's readiness (trio_broker/server/readiness.py). The listener starts
before the broker's services, so /ready says 503 while a cluster broker waits to register.

A small HTTP/1.1 server on the broker's own Trio loop (one request per connection, then
close), so the scrape reads the broker's state on the thread that owns it. The text comes
from prometheus_client (trio_broker/metrics.py).
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING, Any

import trio

from trio_broker.metrics import render

if TYPE_CHECKING:
    from trio_broker.broker import Broker

logger = logging.getLogger(__name__)

__all__ = ["health", "parse_metrics_listener", "serve_metrics"]

_MAX_HEAD = 16 * 1024
_READ_TIMEOUT_S = 10.0


def parse_metrics_listener(text: str) -> tuple[str, int]:
    """`http://host:port` -> (host, port); raises ValueError otherwise."""
    m = re.fullmatch(r"http://(\[[^\]]*\]|[^:/]*):(\d+)/?", text.strip())
    if not m:
        raise ValueError(f"expected http://host:port, got {text!r}")
    port = int(m.group(2))
    if not 0 <= port <= 65535:
        raise ValueError(f"port out of range in {text!r}")
    return m.group(1).strip("[]"), port


async def serve_metrics(
    broker: Broker,
    server: Any,
    *,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    host, port = parse_metrics_listener(broker.config.metrics_listener)
    listeners = await trio.open_tcp_listeners(port, host=host or None)
    address = listeners[0].socket.getsockname()[:2]
    broker.metrics_address = address
    logger.info("metrics on http://%s:%d/metrics", address[0], address[1])
    broker.metrics.idle_percents()  # opens the first window at start
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(_accept, listener, broker, server)
        task_status.started(address)


async def _accept(listener: trio.SocketListener, broker: Broker, server: Any) -> None:
    async with listener, trio.open_nursery() as nursery:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                logger.error("metrics listener accept failed: %s", exc)
                await trio.sleep(0.1)
                continue
            nursery.start_soon(_serve_one, stream, broker, server)


async def _serve_one(stream: trio.SocketStream, broker: Broker, server: Any) -> None:
    async with stream:
        try:
            with trio.fail_after(_READ_TIMEOUT_S):
                head = await _read_head(stream)
            if head is None:
                return
            method, _, rest = head.partition(" ")
            path = rest.split(" ", 1)[0].split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                await _answer(stream, 405, b"method not allowed\n", "text/plain")
            elif path in ("/health", "/ready"):
                status, body = health(broker, path)
                await _answer(stream, status, body, _JSON, head_only=method == "HEAD")
            elif path != "/metrics":
                await _answer(
                    stream, 404, b"not found; try /metrics, /health or /ready\n", "text/plain"
                )
            else:
                try:
                    body, content_type = render(broker, server)
                except Exception:
                    logger.exception("metrics rendering failed")
                    await _answer(
                        stream, 500, b"metrics failed; see the broker's log\n", "text/plain"
                    )
                    return
                await _answer(stream, 200, body, content_type, head_only=method == "HEAD")
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
            pass


_JSON = "application/json"


def health(broker: Broker, path: str) -> tuple[int, bytes]:
    """(status, JSON body) of /health or /ready."""
    readiness = broker.readiness
    if path == "/health":
        body: dict[str, object] = {"status": readiness.status}
        return 200, json.dumps(body).encode() + b"\n"
    try:
        reasons = readiness.reasons(broker)
    except Exception:  # a bug here must not read as "ready", nor stop the listener
        logger.exception("readiness check failed")
        reasons = ["readiness check failed; see the broker's log"]
    body = {"ready": not reasons, "status": readiness.status}
    if reasons:
        body["reasons"] = reasons
    return (503 if reasons else 200), json.dumps(body).encode() + b"\n"


async def _read_head(stream: trio.SocketStream) -> str | None:
    data = bytearray()
    while b"\r\n\r\n" not in data and b"\n\n" not in data:
        chunk = await stream.receive_some(4096)
        if not chunk:
            return None
        data += chunk
        if len(data) > _MAX_HEAD:
            await _answer(stream, 431, b"request head too large\n", "text/plain")
            return None
    return data.split(b"\n", 1)[0].decode("latin-1").strip()


_REASONS = {
    500: "Internal Server Error",
    200: "OK",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Too Large",
    503: "Service Unavailable",
}


async def _answer(
    stream: trio.SocketStream, status: int, body: bytes, content_type: str, head_only: bool = False
) -> None:
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode("latin-1")
    await stream.send_all(head if head_only else head + body)
