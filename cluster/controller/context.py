"""What the controller knows (Kafka's ControllerContext): live brokers, every topic's
replica assignment and id, every partition's leader, epoch and ISR with the version of its
state znode, and the brokers shutting down and topics being deleted.

Filled from ZooKeeper when a broker becomes controller, then kept current by the
controller's own writes and its watches. Plain data, no I/O.
"""

from __future__ import annotations

import uuid

import attrs

from trio_broker.cluster.zookeeper import zk_data

__all__ = ["ControllerContext", "LiveBroker", "PartitionLeadership"]


@attrs.frozen(kw_only=True)
class LiveBroker:
    broker_id: int
    host: str  # of the listener the brokers talk to each other on (the first one)
    port: int
    rack: str | None
    endpoints: tuple[zk_data.EndPoint, ...]
    epoch: int  # Kafka's broker epoch: the czxid of its /brokers/ids znode


@attrs.frozen(kw_only=True)
class PartitionLeadership:
    """A partition's state znode as last read or written, with its version."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int
    # The znode's mzxid as read from ZooKeeper (0 once this controller wrote it): a leader
    # whose registration (its broker epoch, a czxid) is newer registered again after its
    # leadership was decided (see `bounced_leaders`).
    zxid: int = 0

    @classmethod
    def of(
        cls, state: zk_data.LeaderIsrState, zk_version: int, zxid: int = 0
    ) -> PartitionLeadership:
        return cls(
            leader=state.leader,
            leader_epoch=state.leader_epoch,
            isr=tuple(state.isr),
            controller_epoch=state.controller_epoch,
            zk_version=zk_version,
            zxid=zxid,
        )

    def succeeded_by(
        self, leader: int, isr: tuple[int, ...], controller_epoch: int
    ) -> PartitionLeadership:
        """The state a controller writes over this one: the next leader epoch, conditional
        on this znode version (so the written one is the next)."""
        return PartitionLeadership(
            leader=leader,
            leader_epoch=self.leader_epoch + 1,
            isr=isr,
            controller_epoch=controller_epoch,
            zk_version=self.zk_version + 1,
        )

    def znode(self) -> zk_data.LeaderIsrState:
        return zk_data.LeaderIsrState(
            leader=self.leader,
            leader_epoch=self.leader_epoch,
            isr=self.isr,
            controller_epoch=self.controller_epoch,
        )


@attrs.define
class ControllerContext:
    controller_id: int
    epoch: int
    epoch_zk_version: int  # of /controller_epoch; every controller write checks it
    live_brokers: dict[int, LiveBroker] = attrs.Factory(dict)
    assignments: dict[str, zk_data.TopicAssignment] = attrs.Factory(dict)
    topic_ids: dict[str, uuid.UUID] = attrs.Factory(dict)
    states: dict[tuple[str, int], PartitionLeadership] = attrs.Factory(dict)
    shutting_down: set[int] = attrs.Factory(set)
    topics_being_deleted: set[str] = attrs.Factory(set)
    # topic -> (broker, partition) replicas not yet deleted by StopReplica(delete)
    deletion_pending: dict[str, set[tuple[int, int]]] = attrs.Factory(dict)
    # broker -> its replicas in a failed log dir, as its LeaderAndIsr answers said
    # (KAFKA_STORAGE_ERROR); forgotten when the broker registers again (Kafka's
    # replicasOnOfflineDirs).
    replicas_on_offline_dirs: dict[int, set[tuple[str, int]]] = attrs.Factory(dict)

    def replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        assignment = self.assignments.get(topic)
        if assignment is None:
            return ()
        return assignment.partitions.get(partition, ())

    def partitions(self) -> list[tuple[str, int]]:
        return [(t, p) for t, a in sorted(self.assignments.items()) for p in sorted(a.partitions)]

    def partitions_of(self, topic: str) -> list[tuple[str, int]]:
        assignment = self.assignments.get(topic)
        return [] if assignment is None else [(topic, p) for p in sorted(assignment.partitions)]

    def partitions_on(self, broker_id: int) -> list[tuple[str, int]]:
        return [tp for tp in self.partitions() if broker_id in self.replicas(*tp)]

    def is_live(self, broker_id: int) -> bool:
        """Alive and not shutting down: may lead and stay in an ISR."""
        return broker_id in self.live_brokers and broker_id not in self.shutting_down

    def is_replica_online(self, broker_id: int, tp: tuple[str, int]) -> bool:
        """The broker is live and its replica of `tp` is not in a failed log dir: it may
        lead `tp` and stay in its ISR (Kafka's isReplicaOnline)."""
        return self.is_live(broker_id) and tp not in self.replicas_on_offline_dirs.get(
            broker_id, ()
        )

    def bounced_leaders(self) -> list[tuple[str, int]]:
        """Partitions whose leader, as their state znode last read says, registered after
        that state was written (its broker epoch is newer than the znode's mzxid): it
        restarted, or its session ended, since it was made leader, and no controller saw
        its registration change (it went with the controller, or while ZooKeeper was
        down). A controller watching would have elected another leader (Kafka's
        onBrokerFailure on a bounced broker), and the clients of the partition may not
        reach it again for a while (librdkafka backs its reconnects off up to 10 s)."""
        out = []
        for tp, state in self.states.items():
            broker = self.live_brokers.get(state.leader)
            if broker is not None and state.zxid and broker.epoch > state.zxid:
                out.append(tp)
        return out

    def remove_topic(self, topic: str) -> None:
        for tp in self.partitions_of(topic):
            self.states.pop(tp, None)
        self.assignments.pop(topic, None)
        self.topic_ids.pop(topic, None)
        self.topics_being_deleted.discard(topic)
        self.deletion_pending.pop(topic, None)
        for offline in self.replicas_on_offline_dirs.values():
            offline.difference_update([tp for tp in offline if tp[0] == topic])
