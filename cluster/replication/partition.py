"""Partition: one replicated partition on this broker, leader or follower (Kafka's Partition).

A leader tracks what each follower has (its log end offset from its last fetch, and when it
was last caught up), decides the ISR changes (shrink after replica.lag.time.max.ms, expand
once a follower has the high watermark) and moves the high watermark to the smallest log
end offset over the ISR. A follower only holds the leader's identity and epoch; its replica
fetcher (cluster/replication/replica_fetcher.py) copies the log. Everything here is synchronous and
runs on the Trio thread; the ZooKeeper writes an ISR change needs are the ReplicaManager's.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from trio_broker.log import PartitionLog

logger = logging.getLogger(__name__)

__all__ = ["Partition", "ReplicaState"]


@attrs.define
class ReplicaState:
    """What the leader knows of one follower (Kafka's Replica)."""

    broker_id: int
    log_end_offset: int = -1  # unknown until its first fetch in this leader epoch
    last_caught_up_ms: int = 0
    # The leader's log end offset and the time of this follower's previous fetch: a fetch
    # that reaches what the leader had then proves the follower was caught up then.
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0

    def reset(self, now_ms: int, in_isr: bool) -> None:
        self.log_end_offset = -1
        self.last_caught_up_ms = now_ms if in_isr else 0
        self.last_fetch_leader_leo = -1
        self.last_fetch_ms = 0

    def update(self, fetch_offset: int, leader_leo: int, now_ms: int) -> None:
        if fetch_offset >= leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_leo >= 0:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_leo = leader_leo
        self.last_fetch_ms = now_ms

    def is_caught_up(self, leader_leo: int, now_ms: int, lag_ms: int) -> bool:
        return self.log_end_offset == leader_leo or now_ms - self.last_caught_up_ms <= lag_ms


class Partition:
    """Leader or follower state of (topic, partition) on broker `node_id`."""

    def __init__(self, topic: str, partition: int, log: PartitionLog, node_id: int) -> None:
        self.topic = topic
        self.partition = partition
        self.log = log
        self.node_id = node_id
        self.leader_id = -1
        self.leader_epoch = -1
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.zk_version = -1
        self.controller_epoch = -1
        self.remote: dict[int, ReplicaState] = {}
        # The ISR being written to ZooKeeper (replica_manager._write_isr), None when no
        # write is in flight: no other change starts until it is done. Until then the
        # high watermark waits for every replica of the old ISR and of the new one (Kafka's
        # maximal ISR, KIP-497): the znode may name a joining follower before the write's
        # answer is here, and the controller may elect any replica the znode names, so a
        # record the joining follower lacks may not count as committed meanwhile.
        self.pending_isr: list[int] | None = None
        # Counts the times this broker became the leader: a delayed produce waits only as
        # long as the leadership it was appended under lasts (new epochs included).
        self.leader_generation = 0

    @property
    def isr_change_in_flight(self) -> bool:
        return self.pending_isr is not None

    @property
    def maximal_isr(self) -> list[int]:
        """The ISR, and while a change is being written, the replicas it adds (on a shrink,
        the ISR as it was): what the high watermark and acks=all wait for."""
        pending = self.pending_isr
        if pending is None:
            return self.isr
        return self.isr + [r for r in pending if r not in self.isr]

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader_id}"
        return f"<Partition {self.topic}-{self.partition} {role} epoch {self.leader_epoch} isr {self.isr}>"

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    def _set_state(
        self,
        *,
        leader: int,
        leader_epoch: int,
        isr: list[int],
        replicas: list[int],
        zk_version: int,
        controller_epoch: int,
    ) -> None:
        self.leader_id = leader
        self.leader_epoch = leader_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.zk_version = zk_version
        self.controller_epoch = controller_epoch

    # -- leader ------------------------------------------------------------------------------

    def make_leader(
        self,
        *,
        leader_epoch: int,
        isr: list[int],
        replicas: list[int],
        zk_version: int,
        controller_epoch: int,
        now_ms: int,
    ) -> bool:
        """Become (or stay) the leader; True when this starts a new leader epoch here."""
        new_leader = not self.is_leader
        new_epoch = new_leader or leader_epoch != self.leader_epoch
        if new_leader:
            self.leader_generation += 1
        self._set_state(
            leader=self.node_id,
            leader_epoch=leader_epoch,
            isr=isr,
            replicas=replicas,
            zk_version=zk_version,
            controller_epoch=controller_epoch,
        )
        self.pending_isr = None
        log = self.log
        if new_epoch:
            # The epoch starts where this log ends: a follower of an older epoch truncates
            # what lies beyond it (OffsetForLeaderEpoch answers from this entry).
            latest = log.latest_epoch()
            if latest is None or leader_epoch > latest:
                try:
                    log.leader_epoch_cache.assign(leader_epoch, log.log_end_offset)
                except OSError as exc:
                    logger.warning("leader epoch checkpoint of %s not written: %s", log.name, exc)
        if new_leader:
            # What followers had is unknown until they fetch from this leader.
            self.remote = {
                r: ReplicaState(r, last_caught_up_ms=now_ms if r in isr else 0)
                for r in replicas
                if r != self.node_id
            }
        else:
            # Still the leader (a new epoch, or a resend): what followers fetched stands.
            for r in replicas:
                if r != self.node_id and r not in self.remote:
                    self.remote[r] = ReplicaState(r, last_caught_up_ms=now_ms if r in isr else 0)
            for r in list(self.remote):
                if r not in replicas:
                    del self.remote[r]
        self.maybe_increment_high_watermark()
        return new_epoch

    def update_follower(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """A follower fetched from `fetch_offset`; True when the high watermark moved."""
        replica = self.remote.get(replica_id)
        if replica is None:
            return False
        replica.update(fetch_offset, self.log.log_end_offset, now_ms)
        return self.maybe_increment_high_watermark()

    def maybe_increment_high_watermark(self) -> bool:
        """HW = the smallest log end offset over the ISR (the maximal ISR while a change
        is written); True when it moved forward."""
        log = self.log
        new_hw = log.log_end_offset
        if log.high_watermark == new_hw:
            return False  # at the log end already (every idle partition, each fetch)
        for r in self.isr if self.pending_isr is None else self.maximal_isr:
            if r == self.node_id:
                continue
            replica = self.remote.get(r)
            leo = replica.log_end_offset if replica is not None else -1
            if leo < new_hw:
                new_hw = leo
        if new_hw > log.high_watermark:
            log.high_watermark = new_hw
            return True
        return False

    def out_of_sync_replicas(self, now_ms: int, lag_ms: int) -> list[int]:
        """Followers in the ISR that have not been caught up for `lag_ms` (Kafka's
        getOutOfSyncReplicas): a follower with nothing to fetch never falls behind."""
        leo = self.log.log_end_offset
        out = []
        for r in self.isr:
            if r == self.node_id:
                continue
            replica = self.remote.get(r)
            if replica is None or not replica.is_caught_up(leo, now_ms, lag_ms):
                out.append(r)
        return out

    def caught_up_to_join(self, replica_id: int) -> bool:
        """A follower outside the ISR may join once it has the high watermark and
        everything of this leader epoch's start (Kafka's isFollowerInSync)."""
        replica = self.remote.get(replica_id)
        if replica is None or replica_id in self.isr or replica_id not in self.replicas:
            return False
        log = self.log
        cache = log.leader_epoch_cache
        epoch_start = cache.start_offsets[-1] if cache.latest_epoch == self.leader_epoch else 0
        return replica.log_end_offset >= max(log.high_watermark, epoch_start)

    # -- follower ----------------------------------------------------------------------------

    def make_follower(
        self,
        *,
        leader: int,
        leader_epoch: int,
        isr: list[int],
        replicas: list[int],
        zk_version: int,
        controller_epoch: int,
    ) -> bool:
        """Follow `leader`; True when the leader or its epoch changed (fetching restarts)."""
        changed = self.leader_id != leader or self.leader_epoch != leader_epoch
        self._set_state(
            leader=leader,
            leader_epoch=leader_epoch,
            isr=isr,
            replicas=replicas,
            zk_version=zk_version,
            controller_epoch=controller_epoch,
        )
        self.remote = {}
        self.pending_isr = None
        return changed
