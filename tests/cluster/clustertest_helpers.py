"""Shared by the cluster tests: what ZooKeeper and each broker say about the cluster."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from wire import request_of, roundtrip

T = TypeVar("T")

# Sessions short enough that a killed broker is gone within seconds (ZooKeeper's tick in
# the test server is 500 ms, so sessions may be this short). Imported from here, not from
# conftest: `from conftest import` finds whichever test folder's conftest came first.
FAST_SESSION = {"zookeeper.session.timeout.ms": "4000"}
# Kafka's own controlled-shutdown retries (three more, 5 s apart): for tests that show a
# stopping broker does not sit through them when nothing could move.
KAFKA_SHUTDOWN_RETRIES = {
    **FAST_SESSION,
    "controlled.shutdown.retry.backoff.ms": "5000",
    "controlled.shutdown.max.retries": "3",
}


def eventually(check: Callable[[], T], *, budget_s: float, what: str) -> T:
    """Poll `check` until it returns something truthy, within a budget (not a timing claim:
    the budget is only how long a broken cluster may take to show it is broken)."""
    deadline = time.monotonic() + budget_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (OSError, NoNodeError) as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {budget_s} s (last: {last!r})")


def metadata(bootstrap: str) -> Any:
    """This one broker's Metadata answer (v12, all topics), over a raw connection."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        return roundtrip(sock, request_of(3, topics=None, allow_auto_topic_creation=False), 12)


def isr_held(bootstrap: str, topic: str, partition: int) -> list[int]:
    """The ISR of `topic-partition` in this broker's Metadata answer, sorted. On its
    leader that is the ISR it holds: the state znode shows a leader's ISR write before the
    leader has ZooKeeper's answer and takes it, so a test that needs the leader to act on
    a new ISR waits for this, not the znode alone."""
    topics = {t.name: t for t in metadata(bootstrap).topics}
    parts = {p.partition_index: p for p in topics[topic].partitions} if topic in topics else {}
    return sorted(parts[partition].isr_nodes) if partition in parts else []


def view(bootstrap: str) -> tuple[str, int, list[tuple[int, str, int]]]:
    """(cluster id, controller id, [(node id, host, port)]) as this broker reports them."""
    m = metadata(bootstrap)
    return m.cluster_id, m.controller_id, sorted((b.node_id, b.host, b.port) for b in m.brokers)


def all_see(brokers: dict[int, Any], live: list[int] | None = None, budget_s: float = 15) -> None:
    """Wait until every broker in `brokers` lists `live` (default: exactly them) as the
    cluster's brokers: a broker learns of another a moment after it registers."""
    want = sorted(brokers) if live is None else sorted(live)
    for broker in brokers.values():
        eventually(
            lambda b=broker: [n for n, _, _ in view(b.bootstrap)[2]] == want,
            budget_s=budget_s,
            what=f"{broker.bootstrap} sees brokers {want}",
        )


class ZooKeeperView:
    """A plain kazoo client for the test to read what the brokers wrote under `root`."""

    def __init__(self, connect: str, root: str = "/kafka") -> None:
        self.root = root
        self.client = KazooClient(hosts=connect, timeout=10)
        self.client.start(timeout=10)

    def get(self, path: str) -> tuple[bytes, Any]:
        return self.client.get(self.root + path)

    def exists(self, path: str) -> Any:
        return self.client.exists(self.root + path)

    def json(self, path: str) -> Any:
        return json.loads(self.get(path)[0])

    def controller_epoch(self) -> int:
        return int(self.get("/controller_epoch")[0])

    def controller(self) -> int | None:
        try:
            return self.json("/controller")["brokerid"]
        except NoNodeError:
            return None

    def broker_ids(self) -> list[int]:
        return sorted(int(c) for c in self.client.get_children(self.root + "/brokers/ids"))

    def owner(self, path: str) -> int | None:
        stat = self.exists(path)
        return None if stat is None else stat.ephemeralOwner

    def close(self) -> None:
        self.client.stop()
        self.client.close()
