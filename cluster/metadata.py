"""The cluster's metadata: brokers, topics, partitions with leader epoch, ISR and replicas.

A single broker is a cluster of one, described exactly as a cluster of many would be, so
that replication slots in later: every partition has a leader and a leader epoch, a
replica set and an ISR, and its high watermark lives on its log.

Topics and their configs, and the GROUP resources' configs, outlive restarts in `trio-broker-metadata.json` in the first log
directory (Kafka keeps them in its metadata log; a single broker needs only a file,
written atomically on every change).

In a cluster (`zookeeper.connect`, `zk_mode`), ZooKeeper holds the topics (Kafka's znodes,
cluster/zookeeper/zk_data.py) and this is each broker's cache of them, as Kafka's MetadataCache is:
filled by the controller's UpdateMetadata (every partition) and LeaderAndIsr (the
partitions this broker hosts), and by a leader's own ISR changes. Nothing about topics is
read from or written to the metadata file then; the GROUP configs still are. The live
brokers and the controller id come from ZooKeeper (cluster/zookeeper/membership.py calls
`set_live_brokers` and `set_controller`) until UpdateMetadata brings them.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path

import attrs

logger = logging.getLogger(__name__)

__all__ = ["BrokerNode", "ClusterMetadata", "PartitionState", "TopicState"]

METADATA_FILE = "trio-broker-metadata.json"


@attrs.frozen(kw_only=True)
class BrokerNode:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    # Every listener's (name, host, port), from the broker's registration: a client is
    # told the address of the listener it came in on (apis/endpoints.py).
    endpoints: tuple[tuple[str, str, int], ...] = ()


@attrs.define(kw_only=True)
class PartitionState:
    topic: str
    partition: int
    leader: int
    leader_epoch: int = 0
    replicas: list[int] = attrs.Factory(list)
    isr: list[int] = attrs.Factory(list)
    # In a cluster: replicas on brokers that are down or whose log dir is offline, the
    # version of the partition's state znode (Kafka's zkVersion, LeaderAndIsr's
    # partition_epoch; a leader's ISR write is conditional on it) and the epoch of the
    # controller that wrote the state.
    offline_replicas: list[int] = attrs.Factory(list)
    zk_version: int = 0
    controller_epoch: int = -1


@attrs.define(kw_only=True)
class TopicState:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionState] = attrs.Factory(dict)
    configs: dict[str, str] = attrs.Factory(dict)  # topic-level overrides, Kafka key names
    internal: bool = False


@attrs.define(kw_only=True)
class ClusterMetadata:
    cluster_id: str
    controller_id: int
    brokers: dict[int, BrokerNode] = attrs.Factory(dict)
    topics: dict[str, TopicState] = attrs.Factory(dict)
    # GROUP config overrides by group id (Kafka keeps them beside topic configs too).
    group_configs: dict[str, dict[str, str]] = attrs.Factory(dict)
    path: Path | None = None
    # A broker of a ZooKeeper cluster: topics are a cache of ZooKeeper's, never persisted here.
    zk_mode: bool = False
    # The highest controller epoch seen in a controller request (LeaderAndIsr, UpdateMetadata,
    # StopReplica); a request from an older epoch is STALE_CONTROLLER_EPOCH.
    controller_epoch: int = -1

    def set_live_brokers(self, brokers: dict[int, BrokerNode]) -> None:
        """The registered brokers, replaced as a whole (handlers may be iterating the old)."""
        if brokers != self.brokers:
            logger.info("live brokers: %s", sorted(brokers) or "none")
        self.brokers = dict(brokers)

    def set_controller(self, controller_id: int) -> None:
        """The controller's node id, or -1 while there is none."""
        if controller_id != self.controller_id:
            logger.info("controller is now %s", controller_id if controller_id >= 0 else "none")
        self.controller_id = controller_id

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicState | None:
        for topic in self.topics.values():
            if topic.topic_id == topic_id:
                return topic
        return None

    # --- persistence -----------------------------------------------------------------

    @classmethod
    def load(
        cls, path: Path, *, cluster_id: str, controller_id: int, zk_mode: bool = False
    ) -> ClusterMetadata:
        meta = cls(cluster_id=cluster_id, controller_id=controller_id, path=path, zk_mode=zk_mode)
        if not path.exists():
            return meta
        data = json.loads(path.read_text())
        for t in [] if zk_mode else data.get("topics", []):
            topic = TopicState(
                name=t["name"],
                topic_id=uuid.UUID(t["topic_id"]),
                configs=dict(t.get("configs", {})),
                internal=bool(t.get("internal", False)),
            )
            for p in t["partitions"]:
                topic.partitions[p["partition"]] = PartitionState(
                    topic=topic.name,
                    partition=p["partition"],
                    leader=p["leader"],
                    leader_epoch=p["leader_epoch"],
                    replicas=list(p["replicas"]),
                    isr=list(p["isr"]),
                )
            meta.topics[topic.name] = topic
        for group, configs in data.get("group_configs", {}).items():
            meta.group_configs[group] = dict(configs)
        return meta

    def save(self) -> None:
        if self.path is None:
            return
        data = {
            "version": 1,
            "cluster_id": self.cluster_id,
            "topics": [
                {
                    "name": t.name,
                    "topic_id": str(t.topic_id),
                    "internal": t.internal,
                    "configs": t.configs,
                    "partitions": [
                        {
                            "partition": p.partition,
                            "leader": p.leader,
                            "leader_epoch": p.leader_epoch,
                            "replicas": p.replicas,
                            "isr": p.isr,
                        }
                        for p in sorted(t.partitions.values(), key=lambda p: p.partition)
                    ],
                }
                for t in sorted(self.topics.values(), key=lambda t: t.name)
                if not self.zk_mode
            ],
            "group_configs": {g: c for g, c in sorted(self.group_configs.items()) if c},
        }
        tmp = self.path.with_suffix(".tmp")
        try:
            with open(tmp, "w") as f:
                json.dump(data, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            # A full disk: the old file stays whole; the partial new one goes.
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, self.path)
