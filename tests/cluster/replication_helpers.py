"""The test acts as the controller, the Kafka way: before any broker starts, the test's own
ZooKeeper session holds the ephemeral /controller znode (for a broker id that never
registers) with a bumped /controller_epoch, so no broker wins the election; the test then
writes a topic's znodes (Kafka's layout, with the cluster/zk_data codecs) and sends
LeaderAndIsr and UpdateMetadata itself with that epoch, so that the replica side can be
tested on its own."""

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
from trio_broker.cluster.zookeeper import zk_data
from trio_broker.protocol._generated.leader_and_isr_request import (
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrTopicState,
)
from trio_broker.protocol._generated.update_metadata_request import (
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicState,
)
from trio_broker.protocol.record_codec import build_batch, iter_records
from trio_broker.protocol.records import iter_batches

# The stub's controller id: a broker id no test broker registers.
STUB_CONTROLLER_ID = 99

# For clusters whose controller is the test: a stopping broker has no controller to ask.
NO_CONTROLLED_SHUTDOWN = {"controlled.shutdown.enable": "false"}


def take_controller(zk_view: Any, broker_id: int = STUB_CONTROLLER_ID) -> int:
    """Win the controller election before any broker runs: the ephemeral /controller znode
    on the test's session and /controller_epoch + 1 in one transaction, as a controller
    does. Returns the epoch. Brokers then see a controller and never elect one."""
    client = zk_view.client
    epoch_path = zk_view.root + zk_data.CONTROLLER_EPOCH_PATH
    client.ensure_path(zk_view.root)
    if client.exists(epoch_path) is None:
        client.create(epoch_path, zk_data.encode_controller_epoch(zk_data.INITIAL_CONTROLLER_EPOCH))
    data, stat = client.get(epoch_path)
    epoch = zk_data.decode_controller_epoch(data) + 1
    tx = client.transaction()
    tx.create(
        zk_view.root + zk_data.CONTROLLER_PATH,
        zk_data.encode_controller(broker_id),
        ephemeral=True,
    )
    tx.set_data(epoch_path, zk_data.encode_controller_epoch(epoch), version=stat.version)
    results = tx.commit()
    failed = [r for r in results if isinstance(r, Exception)]
    assert not failed, f"the test could not become the controller: {failed!r}"
    return epoch


class ControllerStub:
    """Writes znodes under the cluster's chroot and sends LeaderAndIsr and UpdateMetadata
    like a controller (the test must have called take_controller before the brokers
    started)."""

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
            controller_id=STUB_CONTROLLER_ID,
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

    def live_brokers(self) -> dict[int, zk_data.BrokerInfo]:
        """The registered brokers, as the controller reads them from /brokers/ids."""
        out = {}
        for node in self.zk.broker_ids():
            try:
                data, _ = self.zk.get(zk_data.broker_path(node))
            except Exception:  # gone meanwhile
                continue
            out[node] = zk_data.BrokerInfo.decode(node, data)
        return out

    def update_metadata_request(self, controller_epoch: int | None = None) -> Any:
        """A full UpdateMetadata: every live broker and every partition the stub knows."""
        epoch = self.epoch if controller_epoch is None else controller_epoch
        live = self.live_brokers()
        by_topic: dict[str, list[UpdateMetadataPartitionState]] = {}
        for (topic, p), s in sorted(self.states.items()):
            by_topic.setdefault(topic, []).append(
                UpdateMetadataPartitionState(
                    topic_name=topic,
                    partition_index=p,
                    controller_epoch=epoch,
                    leader=s["leader"],
                    leader_epoch=s["leader_epoch"],
                    isr=list(s["isr"]),
                    zk_version=s["zk_version"],
                    replicas=list(s["replicas"]),
                    offline_replicas=[r for r in s["replicas"] if r not in live],
                )
            )
        return UpdateMetadataRequest(
            controller_id=STUB_CONTROLLER_ID,
            controller_epoch=epoch,
            type=2,  # FULL: every topic is named
            topic_states=[
                UpdateMetadataTopicState(
                    topic_name=t, topic_id=self.topic_ids[t], partition_states=states
                )
                for t, states in by_topic.items()
            ],
            live_brokers=[
                UpdateMetadataBroker(
                    id=node,
                    endpoints=[
                        UpdateMetadataEndpoint(
                            port=e.port, host=e.host, listener=e.listener, security_protocol=0
                        )
                        for e in info.endpoints
                    ],
                    rack=info.rack,
                )
                for node, info in sorted(live.items())
            ],
        )

    def send(
        self,
        keys: list[tuple[str, int]],
        to: list[int] | None = None,
        controller_epoch: int | None = None,
        *,
        update_metadata: bool = True,
    ) -> dict[int, Any]:
        """LeaderAndIsr for `keys` to `to` (default: every replica of them), then (as the
        controller does) UpdateMetadata with every partition to every live broker; the
        LeaderAndIsr answers."""
        if to is None:
            to = sorted({r for k in keys for r in self.states[k]["replicas"]})
        request = self.request(keys, controller_epoch)
        answers: dict[int, Any] = {}

        async def main() -> None:
            config = ClientConfig.build(bootstrap_servers=self.cluster.bootstrap)
            async with NetworkClient(config) as client:
                live = self.live_brokers()
                client.set_nodes(
                    {n: (i.endpoints[0].host, i.endpoints[0].port) for n, i in live.items()}
                    | {n: (b.host, b.port) for n, b in self.cluster.brokers.items() if n in to}
                )
                for node in to:
                    answers[node] = await client.send(node, request)
                if update_metadata:
                    await _update_all(client, live, self.update_metadata_request(controller_epoch))

        trio.run(main)
        return answers

    def update_metadata(self) -> None:
        """UpdateMetadata alone to every live broker (after a broker restarted)."""

        async def main() -> None:
            config = ClientConfig.build(bootstrap_servers=self.cluster.bootstrap)
            async with NetworkClient(config) as client:
                live = self.live_brokers()
                client.set_nodes(
                    {n: (i.endpoints[0].host, i.endpoints[0].port) for n, i in live.items()}
                )
                await _update_all(client, live, self.update_metadata_request())

        trio.run(main)


async def _update_all(client: Any, live: dict[int, Any], request: Any) -> None:
    """UpdateMetadata to every registered broker; one that went away meanwhile (its znode
    not yet gone) is skipped, as the controller's channel would drop it."""
    from trio_broker.errors import KafkaError

    for node in sorted(live):
        try:
            answer = await client.send(node, request)
        except KafkaError:
            continue
        assert answer.error_code == 0, (node, answer)


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
