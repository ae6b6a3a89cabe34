"""The test acts as the controller: it writes a topic's znodes (Kafka's layout, with the
cluster/zk_data codecs) and sends LeaderAndIsr to the replicas itself, the way the
controller does, so that the replica side can be tested on its own."""

from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path
from typing import Any

import trio
from wire import request_of, roundtrip

from trio_broker.client.config import ClientConfig
from trio_broker.client.network_client import NetworkClient
from trio_broker.cluster import zk_data
from trio_broker.protocol._generated.leader_and_isr_request import (
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrTopicState,
)
from trio_broker.protocol.record_codec import build_batch, iter_records
from trio_broker.protocol.records import iter_batches


class ControllerStub:
    """Writes znodes under the cluster's chroot and sends LeaderAndIsr like a controller."""

    def __init__(self, cluster: Any, zk_view: Any) -> None:
        self.cluster = cluster
        self.zk = zk_view
        self.topic_ids: dict[str, uuid.UUID] = {}
        # (topic, partition) -> dict(leader, leader_epoch, isr, replicas, zk_version)
        self.states: dict[tuple[str, int], dict[str, Any]] = {}

    @property
    def epoch(self) -> int:
        return self.zk.controller_epoch()

    def path(self, p: str) -> str:
        return self.zk.root + p

    def create_topic(
        self, topic: str, assignment: dict[int, list[int]], configs: dict[str, str] | None = None
    ) -> uuid.UUID:
        client = self.zk.client
        topic_id = uuid.uuid4()
        self.topic_ids[topic] = topic_id
        client.create(
            self.path(zk_data.topic_config_path(topic)),
            zk_data.encode_topic_config(configs or {}),
            makepath=True,
        )
        client.create(
            self.path(zk_data.topic_path(topic)),
            zk_data.TopicAssignment(
                topic_id=topic_id, partitions={p: tuple(r) for p, r in assignment.items()}
            ).encode(),
            makepath=True,
        )
        for p, replicas in assignment.items():
            state = zk_data.LeaderIsrState(
                leader=replicas[0],
                leader_epoch=0,
                isr=tuple(replicas),
                controller_epoch=self.epoch,
            )
            client.create(
                self.path(zk_data.partition_state_path(topic, p)), state.encode(), makepath=True
            )
            _, stat = client.get(self.path(zk_data.partition_state_path(topic, p)))
            self.states[(topic, p)] = dict(
                leader=replicas[0],
                leader_epoch=0,
                isr=list(replicas),
                replicas=list(replicas),
                zk_version=stat.version,
            )
        return topic_id

    def state_znode(self, topic: str, p: int) -> tuple[zk_data.LeaderIsrState, int]:
        data, stat = self.zk.client.get(self.path(zk_data.partition_state_path(topic, p)))
        return zk_data.LeaderIsrState.decode(data), stat.version

    def elect(self, topic: str, p: int, leader: int, isr: list[int]) -> None:
        """A new leader: epoch + 1, written to the state znode as the controller would."""
        current, version = self.state_znode(topic, p)
        state = zk_data.LeaderIsrState(
            leader=leader,
            leader_epoch=current.leader_epoch + 1,
            isr=tuple(isr),
            controller_epoch=self.epoch,
        )
        stat = self.zk.client.set(
            self.path(zk_data.partition_state_path(topic, p)), state.encode(), version=version
        )
        self.states[(topic, p)].update(
            leader=leader, leader_epoch=state.leader_epoch, isr=list(isr), zk_version=stat.version
        )

    def refresh(self, topic: str, p: int) -> None:
        """Take the state znode as it is now (a leader may have changed the ISR)."""
        current, version = self.state_znode(topic, p)
        self.states[(topic, p)].update(
            leader=current.leader,
            leader_epoch=current.leader_epoch,
            isr=list(current.isr),
            zk_version=version,
        )

    def request(self, keys: list[tuple[str, int]], controller_epoch: int | None = None) -> Any:
        by_topic: dict[str, list[LeaderAndIsrPartitionState]] = {}
        leaders = set()
        epoch = self.epoch if controller_epoch is None else controller_epoch
        for topic, p in keys:
            s = self.states[(topic, p)]
            leaders.add(s["leader"])
            by_topic.setdefault(topic, []).append(
                LeaderAndIsrPartitionState(
                    partition_index=p,
                    controller_epoch=epoch,
                    leader=s["leader"],
                    leader_epoch=s["leader_epoch"],
                    isr=list(s["isr"]),
                    partition_epoch=s["zk_version"],
                    replicas=list(s["replicas"]),
                    is_new=False,
                )
            )
        brokers = self.cluster.brokers
        return LeaderAndIsrRequest(
            controller_id=self.zk.controller() or 1,
            controller_epoch=epoch,
            broker_epoch=-1,
            topic_states=[
                LeaderAndIsrTopicState(
                    topic_name=t, topic_id=self.topic_ids[t], partition_states=states
                )
                for t, states in by_topic.items()
            ],
            live_leaders=[
                LeaderAndIsrLiveLeader(broker_id=n, host_name=brokers[n].host, port=brokers[n].port)
                for n in sorted(leaders)
                if n in brokers
            ],
        )

    def send(
        self,
        keys: list[tuple[str, int]],
        to: list[int] | None = None,
        controller_epoch: int | None = None,
    ) -> dict[int, Any]:
        """LeaderAndIsr for `keys` to `to` (default: every replica of them); the answers."""
        if to is None:
            to = sorted({r for k in keys for r in self.states[k]["replicas"]})
        request = self.request(keys, controller_epoch)
        brokers = self.cluster.brokers
        answers: dict[int, Any] = {}

        async def main() -> None:
            config = ClientConfig.build(bootstrap_servers=self.cluster.bootstrap)
            async with NetworkClient(config) as client:
                client.set_nodes({n: (b.host, b.port) for n, b in brokers.items()})
                for node in to:
                    answers[node] = await client.send(node, request)

        trio.run(main)
        return answers


def eventually(check: Any, *, budget_s: float, what: str) -> Any:
    deadline = time.monotonic() + budget_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {budget_s} s (last: {last!r})")


def raw(bootstrap: str, request: Any, version: int, timeout_s: float = 60) -> Any:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        return roundtrip(sock, request, version)


def produce(
    bootstrap: str,
    topic: str,
    partition: int,
    values: list[bytes],
    *,
    acks: int = -1,
    timeout_ms: int = 30000,
    version: int = 9,
) -> Any:
    """One Produce of one batch; the partition's answer."""
    batch = build_batch([(None, v, (), int(time.time() * 1000)) for v in values])
    request = request_of(
        0,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[_topic_data(topic, partition, batch)],
    )
    response = raw(bootstrap, request, version, timeout_s=timeout_ms / 1000 + 30)
    return response.responses[0].partition_responses[0]


def _topic_data(topic: str, partition: int, batch: bytes) -> Any:
    from trio_broker.protocol._generated.produce_request import (
        PartitionProduceData,
        TopicProduceData,
    )

    return TopicProduceData(
        name=topic, partition_data=[PartitionProduceData(index=partition, records=batch)]
    )


def segment_bytes(log_dir: Path, topic: str, partition: int) -> bytes:
    """Every `.log` file of the partition, in offset order, concatenated."""
    directory = log_dir / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def values_by_offset(data: bytes) -> dict[int, bytes | None]:
    out = {}
    for pos, header in iter_batches(data):
        for record in iter_records(memoryview(data)[pos : pos + header.size]):
            out[record.offset] = None if record.value is None else bytes(record.value)
    return out


def list_offset(bootstrap: str, topic: str, partition: int, timestamp: int = -1) -> Any:
    """ListOffsets v7 for one partition (-1: the latest, i.e. the high watermark)."""
    from trio_broker.protocol._generated.list_offsets_request import (
        ListOffsetsPartition,
        ListOffsetsTopic,
    )

    request = request_of(
        2,
        replica_id=-1,
        topics=[
            ListOffsetsTopic(
                name=topic,
                partitions=[ListOffsetsPartition(partition_index=partition, timestamp=timestamp)],
            )
        ],
    )
    return raw(bootstrap, request, 7).topics[0].partitions[0]
