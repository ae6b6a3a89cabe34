"""Replication quotas (Kafka's KIP-73 ReplicationQuotaManager): what keeps a reassignment's
copying from taking the cluster's network and disks.

Three quotas per broker, each a byte rate from the dynamic broker configs (per broker,
else the cluster default, else unlimited):

    leader    leader.replication.throttled.rate    bytes this leader sends followers
    follower  follower.replication.throttled.rate  bytes this follower fetches
    log dirs  replica.alter.log.dirs.io.max.bytes.per.second   bytes a log dir move copies

A partition is throttled by the leader (follower) quota on this broker when its topic's
`leader.replication.throttled.replicas` (`follower...`) names `<partition>:<this broker>`,
or is `*`. `kafka-reassign-partitions --throttle` names the current replicas in the
leader list and the new ones in the follower list, sets both rates on every broker the
reassignment touches, and `--verify` clears it all once the reassignment is done.

As in Kafka, a throttle only ever holds back a replica that is out of sync, so a
throttle cannot push a replica out of the ISR:

- the leader leaves a throttled partition out of a follower's fetch answer (its high
  watermark still goes) while that follower is not in the ISR and the leader quota is
  exceeded;
- the follower leaves a throttled partition out of its fetch request while it has not
  caught up with the leader's high watermark and the follower quota is exceeded;
- both count every throttled partition's bytes, in sync or not, so the total stays
  within the rate.

The rate is measured as Kafka's SimpleRate: bytes over `replication.quota.window.num`
windows of `replication.quota.window.size.seconds`, over the time they span (at least one
window).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from trio_broker.config import UNLIMITED_RATE
from trio_broker.security.rate import Rate

__all__ = ["ALL_PARTITIONS", "ReplicationQuota", "ReplicationQuotas"]

LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
# "*": every partition of the topic.
ALL_PARTITIONS: frozenset[int] = frozenset({-1})


def throttled_partitions(text: str, node_id: int) -> frozenset[int]:
    """The partitions a throttled-replicas value names for broker `node_id` (Kafka's
    ConfigHandler.parseThrottledPartitions): ALL_PARTITIONS for "*"."""
    text = text.strip()
    if text == "*":
        return ALL_PARTITIONS
    out = set()
    for item in text.split(","):
        partition, _, broker = item.strip().partition(":")
        if broker and int(broker) == node_id:
            out.add(int(partition))
    return frozenset(out)


class ReplicationQuota:
    """One quota: its rate, and which partitions it throttles on this broker."""

    def __init__(self, broker: Any, rate_attr: str, replicas_key: str | None) -> None:
        self.broker = broker
        self.config = broker.config
        self.rate_attr = rate_attr
        self.replicas_key = replicas_key
        self.rate = Rate(
            self.config.replication_quota_window_num,
            float(self.config.replication_quota_window_size_seconds),
        )
        self.recorded = 0  # bytes counted against this quota since the broker started
        # A log dir move counts its bytes from a worker thread.
        self._lock = threading.Lock()
        self._parsed: dict[str, frozenset[int]] = {}  # a list's text -> its partitions

    @property
    def bound(self) -> int:
        """Bytes per second (UNLIMITED_RATE: none)."""
        return getattr(self.config, self.rate_attr)

    def is_throttled(self, topic: str, partition: int) -> bool:
        state = self.broker.metadata.topics.get(topic)
        if state is None or self.replicas_key is None:
            return False
        text = state.configs.get(self.replicas_key)
        if not text:
            return False
        partitions = self._parsed.get(text)
        if partitions is None:
            if len(self._parsed) > 1000:
                self._parsed.clear()
            partitions = self._parsed[text] = throttled_partitions(text, self.broker.node_id)
        return partitions is ALL_PARTITIONS or partition in partitions

    def is_exceeded(self) -> bool:
        bound = self.bound
        if bound >= UNLIMITED_RATE:
            return False
        with self._lock:
            rate, _ = self.rate.measure(time.monotonic())
        return rate > bound

    def measured_rate(self) -> float:
        """Bytes per second over the quota's windows (the metrics' byte-rate)."""
        with self._lock:
            rate, _ = self.rate.measure(time.monotonic())
        return rate

    def record(self, nbytes: int) -> None:
        if nbytes:
            with self._lock:
                self.recorded += nbytes
                self.rate.record(nbytes, time.monotonic())

    def delay(self) -> float:
        """Seconds until the measured rate is back within the bound (0 when it is)."""
        bound = self.bound
        if bound >= UNLIMITED_RATE:
            return 0.0
        with self._lock:
            rate, elapsed = self.rate.measure(time.monotonic())
        if rate <= bound:
            return 0.0
        if bound == 0:
            return self.rate.window_s
        # The bytes already counted are within the bound once they span rate * elapsed /
        # bound seconds; capped at one window, after which the caller looks again.
        return min(rate * elapsed / bound - elapsed, self.rate.window_s)


class ReplicationQuotas:
    """A broker's three replication quotas (Kafka's QuotaManagers.leader/follower/
    alterLogDirs)."""

    def __init__(self, broker: Any) -> None:
        self.leader = ReplicationQuota(broker, "leader_replication_throttled_rate", LEADER_REPLICAS)
        self.follower = ReplicationQuota(
            broker, "follower_replication_throttled_rate", FOLLOWER_REPLICAS
        )
        # A log dir move is throttled whenever the rate is set (Kafka's alterLogDirs
        # quota marks no partitions: every move counts).
        self.alter_log_dirs = ReplicationQuota(
            broker, "replica_alter_log_dirs_io_max_bytes_per_second", None
        )
