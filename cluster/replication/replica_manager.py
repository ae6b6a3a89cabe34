"""ReplicaManager: this broker's replicas in a ZooKeeper cluster (Kafka's ReplicaManager).

    LeaderAndIsr  -> become_leader_or_follower: fence the controller epoch and each
                     partition's leader epoch, create missing logs (configs from
                     /config/topics/<t>), then make each partition a leader or a follower
    Fetch from a follower -> follower_fetched: its log end offset and caught-up time, the
                     high watermark, ISR expansion; wakes the purgatories
    run           -> the produce purgatory (acks=all), the replica fetchers, ISR shrink
                     every replica.lag.time.max.ms / 2, HW checkpoints

ISR changes are the leader's conditional writes of the partition's state znode at the
version it holds (Kafka before AlterPartition), followed by a sequential
/isr_change_notification/isr_change_ znode for the controller. Changes written while
one notification is on its way gather into the next, as Kafka's leaders gather theirs:
a broker rejoining thousands of ISRs makes a handful of notifications, not thousands. A write that finds the znode
changed re-reads it: if the leader epoch moved on, the controller decided and this leader
stops; otherwise it adopts what is there and tries again on the next round.

Only a broker with `zookeeper.connect` has one (`broker.replica_manager`); a lone broker
keeps its fast path and never imports this module.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from trio_broker.cluster.replication.partition import Partition
from trio_broker.cluster.replication.purgatory import Purgatory
from trio_broker.cluster.replication.replica_fetcher import ReplicaFetcherManager
from trio_broker.cluster.zookeeper import zk_data
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.checkpoints import PendingSyncs

if TYPE_CHECKING:
    from trio_broker.broker import Broker

logger = logging.getLogger(__name__)

__all__ = ["ReplicaManager"]

# Partitions named in one ISR change notification at most (~40 bytes each: far below a
# znode's 1 MB). Kafka's leaders gather theirs for 2.5 s; here a notification goes at
# once, and what changes while it is written goes in the next.
_ISR_CHANGES_PER_NOTIFICATION = 1000

TopicPartition = tuple[str, int]


# Partitions of one LeaderAndIsr applied between two turns of the event loop.
_APPLY_CHUNK = 200
# A LeaderAndIsr naming more partitions than this gets one line of what it changed rather
# than a line per partition. Those lines are rate-limited by the controller's address
# (server/log_safe.py), so all but the first few were dropped anyway, but each cost its
# record and filter: half the time a broker took to apply a failover of 3,000
# leaderships (session 21, py-spy).
_LINE_PER_PARTITION = 1000


def _now_ms() -> int:
    return int(trio.current_time() * 1000)


class ReplicaManager:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.config = broker.config
        self.node_id = broker.node_id
        self.partitions: dict[TopicPartition, Partition] = {}
        # What LeaderAndIsr said about the topics of this broker's replicas: their ids
        # and their configs (/config/topics/<t>). The metadata cache is UpdateMetadata's.
        self.topic_ids: dict[str, Any] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        # Set by the broker's controlled shutdown: leaderships the controller moved away
        # are resigned (the controller sends this broker no LeaderAndIsr for them).
        self.shutting_down = False
        self.produce_purgatory = Purgatory("produce")
        # Replication quotas (KIP-73): the leader's on follower fetches, the follower's on
        # its replica fetchers.
        self.quotas = broker.replication_quotas
        self.fetchers = ReplicaFetcherManager(self)
        self._nursery: trio.Nursery | None = None
        # Set once the purgatory and the fetchers run: the broker may be registered (and
        # get the controller's LeaderAndIsr) a moment before this service has started.
        self.started = trio.Event()
        # Serializes LeaderAndIsr / StopReplica: each is applied whole before the next.
        self._state_lock = trio.Lock()
        self.isr_shrinks = 0
        # A broker that did not run for half its ZooKeeper session or more (SIGSTOP, a
        # stalled VM) has most likely lost that session: ZooKeeper counts from the last
        # ping, sent up to a third of a session before the stall. `_last_tick` is when the
        # event loop last ran the ticker, checked before acting as a leader or
        # coordinator (`check_stalled`).
        zk = getattr(broker, "zk", None)
        self._stall_s = zk.session_timeout_ms / 2000 if zk is not None else float("inf")
        self._last_tick = float("inf")  # no stall is counted before the ticker runs
        # The ZooKeeper session id when leaderships were resigned without the controller
        # saying so (a presumed deposition, a stall); if that session is found alive, it
        # is ended so that the controller treats the broker as the bounced one it was.
        self._resigned_in_session: int | None = None
        # Leaderships this broker gave up without the controller saying so (presumed
        # deposed, its session expired, its log dir failed or full), by the leader epoch
        # it gave them up in: its next registration waits until the controller has
        # decided them anew (`wait_until_decided_anew`), so that it is not made their
        # leader again in that epoch. Dropped by a LeaderAndIsr of a newer epoch.
        self.given_up: dict[TopicPartition, int] = {}
        membership = getattr(broker, "membership", None)
        if membership is not None and getattr(broker, "zk", None) is not None:
            membership.before_registering.append(self.wait_until_decided_anew)
        self._unsure = False  # see `_on_stall`
        self.isr_expands = 0
        # Heartbeats to the controller and the ISR lease they give (heartbeats.py); the
        # ISRs this broker leads that it could not shrink without the lease, whose state
        # znodes it reads until it may (`_watch_held_isrs`).
        self.heartbeats: Any = None
        if getattr(broker, "zk", None) is not None:
            from trio_broker.cluster.replication.heartbeats import BrokerHeartbeats

            self.heartbeats = BrokerHeartbeats(broker)
        self.held_isrs: set[TopicPartition] = set()
        # Leaderships given up presuming this broker fenced (`_watch_held_isrs`).
        self.presumed_fenced: set[TopicPartition] = set()
        self._lease_lost_logged = False
        # ISR changes written but not yet announced to the controller, and whether a task
        # is about to announce them (`_announce_isr_changes`).
        self._isr_changes: set[TopicPartition] = set()
        self._isr_announcing = False
        # Callbacks (topic, partition, leader_epoch) on leadership gained / lost; the
        # group and transaction coordinators load and unload their partitions.
        self.on_become_leader: list[Any] = [self._coordinator_elected]
        self.on_resign: list[Any] = [self._coordinator_resigned]
        broker.log_manager.dir_failure_listeners.append(self._on_log_dir_failure)
        broker.log_manager.dir_full_listeners.append(self._on_log_dir_full)

    # -- lifecycle -------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self.produce_purgatory.run)
                await nursery.start(self.fetchers.run)
                nursery.start_soon(self._isr_expiration)
                nursery.start_soon(self._checkpoint_high_watermarks)
                nursery.start_soon(self._watch_full_dirs)
                if getattr(self.broker, "zk", None) is not None:
                    nursery.start_soon(self._watch_for_deposition)
                    nursery.start_soon(self._tick)
                if self.heartbeats is not None:
                    await nursery.start(self.heartbeats.run)
                    nursery.start_soon(self._watch_held_isrs)
                self.started.set()
                task_status.started()
        finally:
            from trio_broker.server.sendfile import SENDFILE_STATS

            logger.info(
                "replica manager stopped: %d ISR shrinks, %d expansions; fetched %d times, "
                "%d bytes appended as a follower; sendfile: %d calls, %d bytes",
                self.isr_shrinks,
                self.isr_expands,
                self.fetchers.fetches,
                self.fetchers.bytes_appended,
                *SENDFILE_STATS,
            )

    def spawn(self, fn: Any, *args: Any) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(fn, *args)

    # -- coordinators move with leadership ------------------------------------------------

    def _coordinator(self, topic: str) -> Any:
        if topic == "__consumer_offsets":
            return getattr(self.broker, "group_coordinator", None)
        if topic == "__transaction_state":
            return getattr(self.broker, "transaction_coordinator", None)
        return None

    def _coordinator_elected(self, topic: str, partition: int, _epoch: int) -> None:
        coordinator = self._coordinator(topic)
        if coordinator is not None:
            coordinator.load_partition(partition)

    def _coordinator_resigned(self, topic: str, partition: int, _epoch: int) -> None:
        coordinator = self._coordinator(topic)
        if coordinator is not None:
            coordinator.unload_partition(partition)

    # -- lookups ---------------------------------------------------------------------------

    def partition(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def leader_partition(self, topic: str, partition: int) -> Partition | None:
        self.check_stalled()
        part = self.partitions.get((topic, partition))
        return part if part is not None and self.leads(part) else None

    def leads(self, part: Partition) -> bool:
        """Whether this broker serves `part`, one of its replicas, as its leader now: not
        while unsure after a stall (`check_stalled` first: a walk over many partitions
        calls it once)."""
        return part.is_leader and not self._unsure

    def consumer_readable(self, topic: str, index: int, followers_too: bool) -> Partition | None:
        part = self.partitions.get((topic, index))
        return part if part is not None and self.consumer_may_read(part, followers_too) else None

    @staticmethod
    def consumer_may_read(part: Partition, followers_too: bool) -> bool:
        """Whether a consumer's fetch may read the replica `part` here: the leader's, or
        with `followers_too` (fetch v11+, KIP-392) a follower's whose log dir is online. A
        follower serves up to its own high watermark."""
        return part.is_leader or (followers_too and not part.log.offline)

    def preferred_read_replica(self, part: Partition, client_rack: str, fetch_offset: int) -> int:
        """Kafka's RackAwareReplicaSelector, on the leader `part`: the broker a consumer in
        `client_rack` should read from, or -1 for this leader. Candidates are the ISR
        followers that hold `fetch_offset`, in the consumer's rack; the leader itself
        wins when it is in that rack; else the candidate furthest ahead, then the one
        caught up most recently."""
        brokers = self.broker.metadata.brokers
        mine = brokers.get(self.node_id)
        if mine is not None and mine.rack == client_rack:
            return -1
        best: tuple[int, int, int] | None = None
        for replica_id, state in part.remote.items():
            node = brokers.get(replica_id)
            if (
                node is None
                or node.rack != client_rack
                or replica_id not in part.isr
                or state.log_end_offset < fetch_offset
                or part.log.log_start_offset > fetch_offset
            ):
                continue
            rank = (state.log_end_offset, state.last_caught_up_ms, -replica_id)
            if best is None or rank > best:
                best = rank
        return -1 if best is None else -best[2]

    def leader_of(self, topic: str, partition: int) -> tuple[int, int]:
        """(leader id, leader epoch) as this broker knows them, the newer of the metadata
        cache's and its own replica's; (-1, -1) when unknown."""
        state = self.broker.metadata.topics.get(topic)
        pstate = state.partitions.get(partition) if state is not None else None
        part = self.partitions.get((topic, partition))
        if part is not None and (
            pstate is None
            or part.leader_epoch > pstate.leader_epoch
            or (pstate.leader == self.node_id and not part.is_leader)
        ):
            return part.leader_id, part.leader_epoch
        if pstate is None:
            return -1, -1
        return pstate.leader, pstate.leader_epoch

    def topic_name(self, topic_id: Any) -> str | None:
        """The name of a topic this broker holds replicas of, by id (the metadata cache may
        not know it yet: UpdateMetadata follows LeaderAndIsr)."""
        for name, known in self.topic_ids.items():
            if known == topic_id:
                return name
        return None

    # -- LeaderAndIsr ----------------------------------------------------------------------

    async def become_leader_or_follower(self, body: Any, version: int) -> Any:
        from trio_broker.protocol._generated.leader_and_isr_response import (
            LeaderAndIsrPartitionError,
            LeaderAndIsrResponse,
            LeaderAndIsrTopicError,
        )

        metadata = self.broker.metadata
        states: list[tuple[Any, Any]] = []  # (partition state, topic id)
        if version < 2:
            states = [(s, None) for s in body.ungrouped_partition_states]
        else:
            for t in body.topic_states:
                for s in t.partition_states:
                    s.topic_name = t.topic_name
                    states.append((s, t.topic_id if version >= 5 else None))
        if body.controller_epoch < metadata.controller_epoch:
            logger.warning(
                "LeaderAndIsr from controller %s with epoch %s refused: epoch %s is current",
                body.controller_id,
                body.controller_epoch,
                metadata.controller_epoch,
            )
            return LeaderAndIsrResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
        for leader in body.live_leaders:
            self.fetchers.leader_addresses[leader.broker_id] = (leader.host_name, leader.port)
        errors: dict[TopicPartition, int] = {}
        topic_ids: dict[str, Any] = {}
        await self.started.wait()
        # New logs' directories and partition.metadata files are fsynced together, after
        # all are written and before the controller hears back (checkpoints.PendingSyncs).
        pending = PendingSyncs()
        # Each topic's configs, read and resolved once per request, not once per partition.
        resolved: dict[str, tuple[bool, dict[str, str], Any]] = {}
        # Partitions this request makes (or keeps) this broker leader and follower of: counted
        # for a large one's line.
        began = [0, 0] if len(states) > _LINE_PER_PARTITION else None
        started = trio.current_time()
        async with self._state_lock:
            metadata.controller_epoch = body.controller_epoch
            for i, (state, topic_id) in enumerate(states):
                if i and i % _APPLY_CHUNK == 0:
                    # Thousands of partitions (a broker failure at scale) are seconds of
                    # work: let the loop serve fetches and run the stall check meanwhile,
                    # rather than stall it past half a ZooKeeper session.
                    await trio.lowlevel.checkpoint()
                key = (state.topic_name, state.partition_index)
                if topic_id is not None:
                    topic_ids[key[0]] = topic_id
                try:
                    errors[key] = await self._apply(state, topic_id, pending, resolved, began)
                except KafkaError as exc:
                    logger.error("LeaderAndIsr for %s-%s failed: %s", key[0], key[1], exc)
                    errors[key] = exc.code
            try:
                # In a worker thread: a hundred new logs' fsyncs on a busy disk are seconds
                # the event loop would not run (fetches unserved, the stall check firing).
                if pending.files or pending.dirs:
                    await trio.to_thread.run_sync(pending.sync)
            except OSError as exc:
                # Those partitions answer KAFKA_STORAGE_ERROR, as when creating one fails.
                manager = self.broker.log_manager
                log_dir = manager.new_logs_not_durable(exc)
                for key in errors:
                    log = manager.get_log(*key)
                    if log is not None and log.dir.parent == log_dir:
                        errors[key] = ErrorCode.KAFKA_STORAGE_ERROR
        if began is not None:
            logger.info(
                "broker %s: LeaderAndIsr from controller %s (epoch %s) of %d partitions"
                " applied in %.2f s: leader of %d, follower of %d, %d errors",
                self.node_id,
                body.controller_id,
                body.controller_epoch,
                len(states),
                trio.current_time() - started,
                began[0],
                began[1],
                sum(1 for code in errors.values() if code),
            )
        if version >= 5:
            by_topic: dict[str, list[Any]] = {}
            for (topic, p), code in errors.items():
                by_topic.setdefault(topic, []).append(
                    LeaderAndIsrPartitionError(partition_index=p, error_code=code)
                )
            return LeaderAndIsrResponse(
                error_code=ErrorCode.NONE,
                topics=[
                    LeaderAndIsrTopicError(topic_id=topic_ids[t], partition_errors=errs)
                    for t, errs in by_topic.items()
                ],
            )
        return LeaderAndIsrResponse(
            error_code=ErrorCode.NONE,
            partition_errors=[
                LeaderAndIsrPartitionError(topic_name=t, partition_index=p, error_code=code)
                for (t, p), code in errors.items()
            ],
        )

    async def _apply(
        self,
        state: Any,
        topic_id: Any,
        pending: PendingSyncs,
        resolved: dict[str, Any],
        began: list[int] | None = None,
    ) -> int:
        """Apply one partition's state. `began`: None to log what it begins here, else
        [leaderships, followings] to count it in (a large request's one line)."""
        topic, index = state.topic_name, state.partition_index
        key = (topic, index)
        if self.node_id not in state.replicas:
            logger.warning(
                "LeaderAndIsr for %s-%s does not name this broker (%s) among replicas %s",
                topic,
                index,
                self.node_id,
                state.replicas,
            )
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        existing = self.broker.log_manager.get_log(topic, index)
        if existing is not None and (existing.offline or self.broker.log_manager.is_full(existing)):
            # Its log dir failed (offline until a restart) or is full (until it has room
            # again): this answer is how the controller learns it (Kafka's
            # HostedPartition.Offline).
            return ErrorCode.KAFKA_STORAGE_ERROR
        part = self.partitions.get(key)
        given_up_in = self.given_up.get(key)
        if given_up_in is not None and state.leader_epoch > given_up_in:
            del self.given_up[key]
        elif given_up_in is not None and state.leader == self.node_id:
            # Only when nobody else could be elected (`wait_until_decided_anew` gave up
            # waiting): leading is better than no leader at all.
            logger.warning(
                "broker %s is made leader of %s-%s again in leader epoch %s, which it gave "
                "up on its own",
                self.node_id,
                topic,
                index,
                state.leader_epoch,
            )
        if part is not None:
            if state.leader_epoch < part.leader_epoch:
                logger.warning(
                    "LeaderAndIsr for %s-%s with leader epoch %s refused: epoch %s is current",
                    topic,
                    index,
                    state.leader_epoch,
                    part.leader_epoch,
                )
                return ErrorCode.FENCED_LEADER_EPOCH
            if state.leader_epoch == part.leader_epoch and state.leader == part.leader_id:
                # A resend, or the controller's own ISR change in this epoch: take the
                # newer ISR only.
                if state.partition_epoch > part.zk_version:
                    part.isr = list(state.isr)
                    part.replicas = list(state.replicas)
                    part.zk_version = state.partition_epoch
                fetching = self.fetchers.fetch_state(key)
                if (
                    not part.is_leader
                    and part.leader_id >= 0
                    and (fetching is None or fetching.failed)
                ):
                    # A follower not fetching (an earlier attempt of this request failed
                    # half-way, or its fetcher gave up on it): fetch now.
                    self.fetchers.add_partition(part)
                return ErrorCode.NONE
        log = await self._ensure_log(topic, index, topic_id, pending, resolved)
        if part is None:
            part = self.partitions[key] = Partition(topic, index, log, self.node_id)
        was_leader = part.is_leader
        fields = dict(
            leader_epoch=state.leader_epoch,
            isr=list(state.isr),
            replicas=list(state.replicas),
            zk_version=state.partition_epoch,
            controller_epoch=state.controller_epoch,
        )
        if state.leader == self.node_id:
            self.fetchers.remove_partition(key)
            part.make_leader(now_ms=_now_ms(), **fields)
            if began is not None:
                began[0] += 1
            else:
                logger.info(
                    "broker %s leads %s-%s in epoch %s (ISR %s, log end %s, HW %s)",
                    self.node_id,
                    topic,
                    index,
                    part.leader_epoch,
                    part.isr,
                    log.log_end_offset,
                    log.high_watermark,
                )
            for callback in self.on_become_leader:
                callback(topic, index, part.leader_epoch)
        else:
            self.fetchers.remove_partition(key)
            part.make_follower(leader=state.leader, **fields)
            if began is not None:
                began[1] += 1
            else:
                logger.info(
                    "broker %s follows %s in %s-%s, epoch %s (log end %s, HW %s)",
                    self.node_id,
                    state.leader,
                    topic,
                    index,
                    part.leader_epoch,
                    log.log_end_offset,
                    log.high_watermark,
                )
            if state.leader >= 0:
                self.fetchers.add_partition(part)
            if was_leader:
                for callback in self.on_resign:
                    callback(topic, index, part.leader_epoch)
        self._wake(key)
        return ErrorCode.NONE

    async def _ensure_log(
        self,
        topic: str,
        index: int,
        topic_id: Any,
        pending: PendingSyncs,
        resolved: dict[str, tuple[bool, dict[str, str], Any]],
    ) -> Any:
        """The partition's log, made if new; `resolved` holds the topic configs this
        request has read (from ZooKeeper for a new log) and resolved so far."""
        from trio_broker.cluster.topic_config import resolve_log_config
        from trio_broker.protocol.primitives import ZERO_UUID

        read = (topic, index) not in self.partitions
        known = resolved.get(topic)
        if known is None or (read and not known[0]):
            # Not the metadata cache: only UpdateMetadata puts topics there (a topic made
            # here would be answered in Metadata with only this broker's partitions).
            tstate = self.broker.metadata.topics.get(topic)
            configs = tstate.configs if tstate is not None else None
            read = read or configs is None
            if read:
                configs = await self._topic_configs(topic)
            known = resolved[topic] = (read, configs, resolve_log_config(configs, self.config))
            self.topic_configs[topic] = dict(configs)
        log_config = known[2]
        if topic_id is not None and topic_id == ZERO_UUID:
            topic_id = None
        if topic_id is not None:
            self.topic_ids[topic] = topic_id
        log = self.broker.log_manager.get_log(topic, index)
        if log is None:
            # Writes partition.metadata when topic_id is given (load_log).
            log = self.broker.log_manager.create_log(
                topic, index, topic_id, log_config, pending=pending
            )
        else:
            log.update_config(log_config)
            if log.topic_id is None and topic_id is not None:
                log.topic_id = topic_id
                log.write_partition_metadata()
        return log

    async def _topic_configs(self, topic: str) -> dict[str, str]:
        from kazoo.exceptions import NoNodeError

        zk = self.broker.zk
        if zk is None:
            return {}
        try:
            data, _ = await zk.get(zk_data.topic_config_path(topic))
        except NoNodeError:
            return {}
        return zk_data.decode_topic_config(data)

    def _update_metadata(self, part: Partition) -> None:
        """A leader's own ISR change goes into the metadata cache (as Kafka's leader does),
        for a partition the cache has in the same leader epoch; nothing else is written
        there outside UpdateMetadata."""
        tstate = self.broker.metadata.topics.get(part.topic)
        cached = tstate.partitions.get(part.partition) if tstate is not None else None
        if (
            cached is None
            or cached.leader != self.node_id
            or cached.leader_epoch != part.leader_epoch
            or cached.zk_version >= part.zk_version
        ):
            return
        cached.isr = list(part.isr)
        cached.zk_version = part.zk_version

    # -- a failed log dir ------------------------------------------------------------------

    def _on_log_dir_failure(self, log_dir: Any, logs: list[Any]) -> None:
        """Kafka's handleLogDirFailure, called on the event loop by the LogManager when
        `log_dir` goes offline: its replicas stop fetching and stop leading (waiting acks=all
        produces are answered, the coordinators unload what they loaded from them), and
        the controller is told through /log_dir_event_notification. It sends this broker
        LeaderAndIsr for all its replicas; the answers name the offline ones
        (KAFKA_STORAGE_ERROR), whose leaderships it then moves and which it reports as
        offline replicas."""
        keys = sorted((log.topic, log.partition) for log in logs)
        resigned = []
        for key in keys:
            self.fetchers.remove_partition(key)
            part = self.partitions.get(key)
            if part is None:
                continue
            if part.is_leader:
                self._lead_nothing(key, part)
                resigned.append(key)
            self._wake(key)
        logger.error(
            "broker %s: stopped serving the %d replica(s) in failed log dir %s (leader of %s); "
            "telling the controller",
            self.node_id,
            len(keys),
            log_dir,
            ", ".join(f"{t}-{p}" for t, p in resigned) or "none",
        )
        self.spawn(self._notify_log_dir_failure)

    def _on_log_dir_full(self, log_dir: Any) -> None:
        """A write in `log_dir` failed for want of space. Alone, a broker keeps such a dir
        online and answers KAFKA_STORAGE_ERROR until space is freed; in a cluster that
        would leave its partitions without acknowledgements while other replicas in the
        ISR could lead them. So its replicas there stop (leading and fetching) and the
        controller is told, as for a failed dir: the answers to its LeaderAndIsr name them
        (KAFKA_STORAGE_ERROR) and it moves their leaderships (Kafka takes such a dir
        offline until a restart). Once the dir has room again (`_watch_full_dirs`) the
        controller is told again, and they come back as followers without a restart."""
        from pathlib import Path

        log_dir = Path(log_dir)
        keys = sorted(
            key
            for key in self.partitions
            if (log := self.broker.log_manager.get_log(*key)) is not None
            and log.dir.parent == log_dir
        )
        resigned = []
        for key in keys:
            self.fetchers.remove_partition(key)
            part = self.partitions[key]
            if part.is_leader:
                self._lead_nothing(key, part)
                resigned.append(key)
            self._wake(key)
        logger.error(
            "broker %s: log dir %s is full; its %d replica(s) stop (leader of %s) until it "
            "has room; telling the controller",
            self.node_id,
            log_dir,
            len(keys),
            ", ".join(f"{t}-{p}" for t, p in resigned) or "none",
        )
        self.spawn(self._notify_log_dir_failure)

    async def _watch_full_dirs(self) -> None:
        min_free = max(2 * self.config.message_max_bytes, 4 << 20)
        while True:
            await trio.sleep(1)
            if not self.broker.log_manager.full_dirs:
                continue
            if self.broker.log_manager.dirs_with_space(min_free):
                # The controller's LeaderAndIsr for every replica here follows, and those
                # in the dir now answer without an error: followers again.
                await self._notify_log_dir_failure()

    async def _notify_log_dir_failure(self) -> None:
        """/log_dir_event_notification/log_dir_event_<seq>, until ZooKeeper takes it: the
        controller has no other way to learn of the failure."""
        while True:
            try:
                await self.broker.zk.create(
                    f"{zk_data.LOG_DIR_EVENT_NOTIFICATION_PATH}/{zk_data.LOG_DIR_EVENT_PREFIX}",
                    zk_data.encode_log_dir_event(self.node_id),
                    sequence=True,
                )
                return
            except Exception as exc:
                logger.warning("cannot write the log dir failure notification (%s); again", exc)
                await trio.sleep(1)

    # -- controlled shutdown ---------------------------------------------------------------

    def resign_moved_leaderships(
        self, *, everything: bool = False, why: str = "stopping"
    ) -> list[TopicPartition]:
        """While this broker stops: give up the leaderships the controller moved elsewhere
        (the metadata cache, fed by UpdateMetadata, names another leader in a newer epoch)
        or, with `everything` (the controlled shutdown succeeded), every leadership of a
        partition with other replicas. Waiting acks=all produces then answer
        NOT_LEADER_OR_FOLLOWER at once and new ones are refused, so clients move to the
        new leaders instead of waiting for this broker to stop. Returns what it resigned."""
        metadata = self.broker.metadata
        resigned = []
        for key, part in list(self.partitions.items()):
            if not part.is_leader:
                continue
            tstate = metadata.topics.get(key[0])
            cached = tstate.partitions.get(key[1]) if tstate is not None else None
            moved = (
                cached is not None
                and cached.leader != self.node_id
                and cached.leader_epoch > part.leader_epoch
            )
            if not moved and not (everything and len(part.replicas) > 1):
                continue
            self.fetchers.remove_partition(key)
            part.make_follower(
                leader=cached.leader if moved else -1,
                leader_epoch=cached.leader_epoch if moved else part.leader_epoch,
                isr=list(cached.isr) if moved else list(part.isr),
                replicas=list(part.replicas),
                zk_version=cached.zk_version if moved else part.zk_version,
                controller_epoch=part.controller_epoch,
            )
            for callback in self.on_resign:
                callback(key[0], key[1], part.leader_epoch)
            self._wake(key)
            resigned.append(key)
        if resigned:
            logger.info(
                "broker %s %s: resigned the leadership of %s",
                self.node_id,
                why,
                ", ".join(f"{t}-{p}" for t, p in resigned),
            )
        return resigned

    def _lead_nothing(self, key: TopicPartition, part: Partition) -> None:
        """The leader `part` becomes a follower of nobody in its own epoch (until the
        controller says otherwise), and the coordinators hear of the resignation."""
        self.given_up[key] = part.leader_epoch
        part.make_follower(
            leader=-1,
            leader_epoch=part.leader_epoch,
            isr=list(part.isr),
            replicas=list(part.replicas),
            zk_version=part.zk_version,
            controller_epoch=part.controller_epoch,
        )
        for callback in self.on_resign:
            callback(key[0], key[1], part.leader_epoch)

    def resign_after_session_expired(self) -> list[TopicPartition]:
        """This broker's ZooKeeper session expired (it learns so as its next session opens,
        before it registers again): the controller has taken it for dead and may have
        moved every leadership it held, so it leads nothing until LeaderAndIsr for its new
        registration says what it leads. Produces answer NOT_LEADER_OR_FOLLOWER meanwhile
        (clients refresh their metadata and find the new leaders), and waiting acks=all
        produces are answered so at once. Kafka's broker goes on leading until the
        controller's LeaderAndIsr reaches it, which after a partition that dropped packets
        can take as long as TCP's retransmission backoff."""
        resigned = []
        for key, part in list(self.partitions.items()):
            if not part.is_leader:
                continue
            self.fetchers.remove_partition(key)
            self._lead_nothing(key, part)
            self._wake(key)
            resigned.append(key)
        if resigned:
            logger.warning(
                "broker %s: ZooKeeper session expired; leads none of %s until the controller "
                "says so",
                self.node_id,
                ", ".join(f"{t}-{p}" for t, p in resigned),
            )
        return resigned

    async def wait_until_decided_anew(self) -> None:
        """Before this broker registers in a new session: until the controller has decided
        anew every leadership the broker gave up on its own (`given_up`), i.e. its state
        znode names another leader or a newer leader epoch, unless no other broker of its
        ISR is registered (nobody else could be elected); at most a session timeout.

        Registered at once, the broker could be made leader again in the very epoch it
        gave up: a controller that never saw it gone finds it registered and leading in
        ZooKeeper and tells it so (a new controller's failover, when the broker that ended
        its session was the controller; Kafka's controller misses such a bounce too, but
        Kafka's broker never gives a leadership up on its own, and ignores a LeaderAndIsr
        of the leader epoch it has). The metadata kept naming it meanwhile, so a producer
        retried at it, was refused (NOT_LEADER_OR_FOLLOWER) and, a moment later, had the
        next request of the same pipelined round taken by it as leader: a gap in the
        sequence (OUT_OF_ORDER_SEQUENCE_NUMBER), for which librdkafka bumps its producer
        epoch and numbers anew every record not yet acknowledged (KIP-360), including a
        batch this broker had appended and then answered NOT_LEADER_OR_FOLLOWER when it
        gave the leadership up, which is appended again. Once another leader is elected,
        clients go to it; this broker follows."""
        from trio_broker.cluster.zookeeper.membership import registered_brokers

        given_up = dict(self.given_up)
        if not given_up:
            return
        zk = self.broker.zk
        waited = trio.current_time()
        deadline = waited + zk.session_timeout_ms / 1000
        waiting = sorted(given_up)
        while True:
            live = await registered_brokers(zk) - {self.node_id}
            states = await self._read_states(waiting)
            still = []
            for tp in waiting:
                if tp not in states:
                    continue  # deleted
                read = states[tp]
                if read is None:
                    still.append(tp)
                    continue
                state = read[0]
                if (
                    state.leader == self.node_id
                    and state.leader_epoch <= given_up[tp]
                    and live.intersection(state.isr)
                ):
                    still.append(tp)
            waiting = still
            if not waiting or trio.current_time() >= deadline:
                break
            await trio.sleep(0.2)
        logger.log(
            logging.WARNING if waiting else logging.INFO,
            "broker %s: %s of the %d leadership(s) it gave up on its own decided anew by the "
            "controller after %.1f s%s; registering",
            self.node_id,
            "not all" if waiting else "all",
            len(given_up),
            trio.current_time() - waited,
            f" ({', '.join(f'{t}-{p}' for t, p in waiting[:10])} still its own)" if waiting else "",
        )

    # -- a leader cut off from ZooKeeper -----------------------------------------------------

    async def _watch_for_deposition(self) -> None:
        """Resign leaderships this broker has most likely lost without being told.

        A leader cut off from ZooKeeper (but not from its clients) cannot hear that its
        session expired, nor get the controller's LeaderAndIsr: Kafka's broker goes on
        leading, acknowledging acks=1 produces that the new leader never sees and serving
        group offsets the new coordinator has moved past. Two signs together say it is
        being deposed: ZooKeeper has not answered it for a while (below), and the
        followers in its ISR stopped fetching from it (cut off from it, or following the
        new leader). ZooKeeper down for everyone leaves the followers fetching, and the
        leaders leading.

        "A while" is the earlier of two bounds, both strictly inside the session:

        - half a session timeout since the latest request ZooKeeper answered was sent
          (`ZooKeeperSession.silent_for`; `keep_heard` asks every sixth of a session).
          ZooKeeper expires the session no sooner than a session timeout after it last
          heard from it, which is after that send, and the controller elects only after
          the expiry: the old leader and coordinator has stopped at least half a session
          before a new one can start. This bound holds whatever kazoo's state says:
          kazoo finds a connection lost only when a ping goes unanswered through a whole
          select timeout, and every request it sends meanwhile restarts that timeout, so
          a broker cut one way (its packets dropped) can stay "connected" until ZooKeeper
          closes the expired session's socket.
        - a fifth of a session after kazoo found the connection lost (timed on kazoo's
          thread), as before: kazoo's read timeout is two thirds of a session.

        Such a partition leads nothing (NOT_LEADER_OR_FOLLOWER; clients refresh and find
        the new leader; its coordinators unload). If the session then turns out alive,
        the broker ends it and registers anew, so the controller hands out leaderships
        afresh, as to a bounced broker."""
        zk = self.broker.zk
        async with trio.open_nursery() as nursery:
            nursery.start_soon(zk.keep_heard)
            await self._depose_when_cut_off(zk)

    async def _depose_when_cut_off(self, zk: Any) -> None:
        session_s = zk.session_timeout_ms / 1000
        quiet_ms = max(int(zk.session_timeout_ms / 3), 4 * self.config.replica_fetch_wait_max_ms)
        checking = False

        async def check_alive(resigned_in: int) -> None:
            # A round trip in the session proves it alive (an expired one is found so by
            # kazoo first, and the call finishes in the next session). Asked as soon as
            # the broker has resigned, on a task of its own: the answer comes as soon as
            # ZooKeeper is reached again (TCP retransmits the request), and the loop
            # below goes on deposing meanwhile. Not waited on for ever (a third of a
            # session, generous on a busy machine): asked again after.
            nonlocal checking
            try:
                with trio.move_on_after(session_s / 3):
                    try:
                        await zk.exists(zk_data.BROKER_IDS_PATH)
                    except Exception as exc:  # noqa: BLE001 - asked again next round
                        logger.info("ZooKeeper check after resigning: %s", exc)
                        return
                    if self._resigned_in_session != resigned_in:
                        return
                    self._resigned_in_session = None
                    if zk.session_id == resigned_in:
                        await self._end_live_session(zk, resigned_in)
            finally:
                checking = False

        async with trio.open_nursery() as nursery:
            while True:
                await trio.sleep(0.1)
                since = zk.disconnected_since
                silent = zk.silent_for()
                lost_for = trio.current_time() - since if since is not None else 0.0
                resigned_in = self._resigned_in_session
                if since is None and resigned_in is not None and zk.connected and not checking:
                    checking = True
                    nursery.start_soon(check_alive, resigned_in)
                if lost_for < session_s / 5 and silent < session_s / 2:
                    continue
                self._depose_unfetched(zk, quiet_ms, silent, since, lost_for)

    async def _end_live_session(self, zk: Any, resigned_in: int) -> None:
        """The session this broker resigned in is alive after all: end it, so that the
        controller elects away whatever it led (given up first: a LeaderAndIsr may have
        come since the presumption), as for a bounced broker."""
        again = []
        for key, part in list(self.partitions.items()):
            if part.is_leader:
                self.fetchers.remove_partition(key)
                self._lead_nothing(key, part)
                self._wake(key)
                again.append(key)
        logger.warning(
            "broker %s: ZooKeeper session 0x%x is alive after all; starting a new one, so "
            "that the controller says what this broker leads; leads none of %s until the "
            "controller says so",
            self.node_id,
            resigned_in,
            ", ".join(f"{t}-{p}" for t, p in again) or "nothing",
        )
        await zk.renew()

    def _depose_unfetched(
        self, zk: Any, quiet_ms: int, silent: float, since: float | None, lost_for: float
    ) -> None:
        """Cut off from ZooKeeper: give up every leadership whose ISR followers have not
        fetched for `quiet_ms` (see `_watch_for_deposition`)."""
        resigned = self._give_up_unfetched(quiet_ms)
        if resigned:
            if self._resigned_in_session is None:
                self._resigned_in_session = zk.session_id if zk.session_id else -1
            logger.warning(
                "broker %s: no answer from ZooKeeper for %.1f s (connection %s) and no "
                "fetch from the ISR for %d ms: presumed deposed, leads none of %s until "
                "the controller says so",
                self.node_id,
                silent,
                f"lost {lost_for:.1f} s ago" if since is not None else "not yet found lost",
                quiet_ms,
                ", ".join(f"{t}-{p}" for t, p in resigned),
            )

    def _give_up_unfetched(self, quiet_ms: int) -> list[TopicPartition]:
        """Give up every leadership whose ISR followers have not fetched for `quiet_ms`
        (nobody else could have been elected where there are none); returns them."""
        now = _now_ms()
        resigned = []
        for key, part in list(self.partitions.items()):
            if not part.is_leader:
                continue
            followers = [r for r in part.isr if r != self.node_id]
            if not followers:
                continue  # nobody else could have been elected
            heard = max(
                (
                    max(st.last_fetch_ms, st.last_caught_up_ms)
                    for r, st in part.remote.items()
                    if r in followers
                ),
                default=0,
            )
            if now - heard < quiet_ms:
                continue
            self.fetchers.remove_partition(key)
            self._lead_nothing(key, part)
            self._wake(key)
            resigned.append(key)
        return resigned

    async def _tick(self) -> None:
        self._last_tick = trio.current_time()
        while True:
            if trio.current_time() - self._last_tick > self._stall_s:
                self._on_stall()
            self._last_tick = trio.current_time()
            await trio.sleep(0.1)

    def check_stalled(self) -> None:
        """Before acting as a coordinator: notice a stall (see `_on_stall`)."""
        if trio.current_time() - self._last_tick > self._stall_s:
            self._on_stall()

    @property
    def unsure(self) -> bool:
        """After a stall, until ZooKeeper says whether the session lived: lead nothing."""
        return self._unsure

    def _on_stall(self) -> None:
        """The event loop did not run for half the ZooKeeper session or more. If the
        process was stopped (SIGSTOP, a frozen VM), ZooKeeper has most likely expired the
        session and the controller moved the leaderships; if only the loop was busy,
        kazoo's thread kept the session alive. Until a round trip to ZooKeeper tells
        which, this broker acts as leader and coordinator of nothing (retriable
        NOT_LEADER_OR_FOLLOWER and NOT_COORDINATOR), so requests that waited in its
        sockets meanwhile are not answered as by the leader it may no longer be. The
        ticker, or the first request path to notice, calls this; once per stall."""
        stalled_s = trio.current_time() - self._last_tick
        self._last_tick = trio.current_time()
        if self._unsure:
            return
        logger.warning(
            "broker %s did not run for %.1f s, half its ZooKeeper session or more: leads "
            "nothing until ZooKeeper says whether the session lived",
            self.node_id,
            stalled_s,
        )
        self._unsure = True
        self.spawn(self._confirm_session)

    async def _confirm_session(self) -> None:
        zk = self.broker.zk
        before = zk.session_id
        try:
            with trio.move_on_after(self._stall_s * 2) as waited:
                await zk.exists(zk_data.BROKER_IDS_PATH)
            if waited.cancelled_caught:
                # ZooKeeper out of reach: the followers' fetches decide, as for any leader
                # cut off from it (`_watch_for_deposition`).
                logger.warning("broker %s: no answer from ZooKeeper after a stall", self.node_id)
            elif zk.session_id != before:
                # Expired while stopped: what the next session's registration does anyway.
                self.resign_after_session_expired()
            else:
                logger.info("broker %s: its ZooKeeper session lived through the stall",
                            self.node_id)  # fmt: skip
        finally:
            self._unsure = False

    # -- StopReplica -----------------------------------------------------------------------

    async def stop_replica(
        self, topic: str, index: int, leader_epoch: int, delete: bool
    ) -> ErrorCode:
        """Stop fetching (and leading) `topic-index`; with `delete`, delete its log."""
        key = (topic, index)
        await self.started.wait()
        async with self._state_lock:
            part = self.partitions.get(key)
            if part is not None and 0 <= leader_epoch < part.leader_epoch:
                return ErrorCode.FENCED_LEADER_EPOCH
            log = self.broker.log_manager.get_log(topic, index)
            if log is not None and log.offline:
                # In a failed log dir: nothing to stop, nothing that may be touched until
                # a restart (a deletion is sent again once the broker registers anew).
                return ErrorCode.KAFKA_STORAGE_ERROR
            self.fetchers.remove_partition(key)
            self.given_up.pop(key, None)
            was_leader = part is not None and part.is_leader
            if part is not None:
                del self.partitions[key]
            # The metadata cache is left to UpdateMetadata (the controller sends it too).
            if delete and self.broker.log_manager.get_log(topic, index) is not None:
                self.broker.log_manager.delete_log(topic, index)
            if was_leader:
                for callback in self.on_resign:
                    callback(topic, index, leader_epoch)
            self._wake(key)
        return ErrorCode.NONE

    # -- leader side of replication --------------------------------------------------------

    def not_led_here(self, topic: str, index: int) -> ErrorCode:
        """Why this broker does not serve `topic-index` as its leader: its replica's log dir
        is offline (KAFKA_STORAGE_ERROR, as Kafka answers for an offline partition), or
        another broker leads it."""
        log = self.broker.log_manager.get_log(topic, index)
        if log is not None and log.offline:
            return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.NOT_LEADER_OR_FOLLOWER

    # The clock of `follower_fetched`, read once per fetch by its caller.
    now_ms = staticmethod(_now_ms)

    def follower_fetch_error(
        self, replica_id: int, part: Partition | None, topic: str, index: int
    ) -> int | None:
        """Why follower `replica_id` may not fetch `topic-index` here; `part` is this
        broker's replica of it (`self.partitions`), looked up once by the caller for this
        check, the epoch's and `follower_fetched` (one lookup per partition per fetch)."""
        if part is None or not part.is_leader:
            return self.not_led_here(topic, index)
        if replica_id not in part.replicas:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return None

    def follower_fetched(
        self, replica_id: int, part: Partition, fetch_offset: int, now_ms: int
    ) -> None:
        """A follower's fetch asked for `fetch_offset` of `part` (led here, checked by
        `follower_fetch_error`): its log end offset, at `now_ms` (`now_ms()`, once per
        fetch)."""
        if fetch_offset > part.log.log_end_offset:
            return  # beyond our log: the read answers OFFSET_OUT_OF_RANGE
        if part.update_follower(replica_id, fetch_offset, now_ms):
            self._hw_moved(part)
        if (
            replica_id not in part.isr
            and not part.isr_change_in_flight
            and part.caught_up_to_join(replica_id)
        ):
            new_isr = [*part.isr, replica_id]
            logger.info(
                "expanding the ISR of %s-%s from %s to %s",
                part.topic,
                part.partition,
                part.isr,
                new_isr,
            )
            part.pending_isr = new_isr
            self.isr_expands += 1
            self.spawn(self._write_isr, part, new_isr)

    def after_leader_append(self, part: Partition) -> None:
        """The leader appended: with an ISR of one the HW moves at once."""
        if part.maybe_increment_high_watermark():
            self._hw_moved(part, fetch=False)

    def _hw_moved(self, part: Partition, *, fetch: bool = True) -> None:
        keys = (part.key,)
        self.produce_purgatory.wake(keys)
        if fetch:
            self.broker.fetch_purgatory.wake(keys)

    def _wake(self, key: TopicPartition) -> None:
        self.produce_purgatory.wake((key,))
        self.broker.fetch_purgatory.wake((key,))

    # -- ISR -------------------------------------------------------------------------------

    async def _isr_expiration(self) -> None:
        lag_ms = self.config.replica_lag_time_max_ms
        while True:
            await trio.sleep(lag_ms / 2000)
            now = _now_ms()
            lease: bool | None = None  # asked once per round, when needed
            for part in list(self.partitions.values()):
                if not part.is_leader or part.isr_change_in_flight:
                    continue
                out = part.out_of_sync_replicas(now, lag_ms)
                if not out:
                    continue
                if lease is None:
                    lease = self.heartbeats is None or self.heartbeats.lease()
                    if lease:
                        self._lease_lost_logged = False
                if not lease:
                    self._hold_isr(part, out)
                    continue
                new_isr = [r for r in part.isr if r not in out]
                logger.info(
                    "shrinking the ISR of %s-%s from %s to %s: %s not caught up for %s ms",
                    part.topic,
                    part.partition,
                    part.isr,
                    new_isr,
                    out,
                    lag_ms,
                )
                part.pending_isr = new_isr
                self.isr_shrinks += 1
                self.spawn(self._write_isr, part, new_isr)

    def _hold_isr(self, part: Partition, out: list[int]) -> None:
        """No ISR lease (heartbeats.py): this leader may be the one cut off, about to be
        fenced, so the ISR stays as it is (acks=all waits, as in Kafka when AlterIsr
        cannot reach the controller) and its state znode is watched for a new leader."""
        self.held_isrs.add(part.key)
        if not self._lease_lost_logged:
            self._lease_lost_logged = True
            logger.warning(
                "broker %s: no heartbeat answered by the controller for %.1f s: the ISR of "
                "%s-%s (and any other) is not shrunk (%s not caught up) until one is",
                self.node_id,
                self.heartbeats.lease_s,
                part.topic,
                part.partition,
                out,
            )

    async def _watch_held_isrs(self) -> None:
        """Every quarter second, a leader without its ISR lease (heartbeats.py):

        - presumed fenced: with no heartbeat answered for half `broker.session.timeout.ms`
          (since the latest answered one was sent; the controller counts from when it got
          the latest, which is later) it gives up the leaderships whose ISR followers have
          not fetched for as long (or 3 fetch waits): the controller fences it no sooner
          than a session timeout after that, so the old leader has stopped before a new
          one is elected, as a leader cut from ZooKeeper stops before its session expires
          (`_watch_for_deposition`). Should the controller answer again without having
          fenced it, and those partitions still be its own in their state znodes, it ends
          its session, as there, so that the controller decides them anew.
        - every half second, the state znodes of the partitions whose ISRs it holds
          (`_hold_isr`) or which it presumed fenced: a newer leader epoch there means the
          controller fenced it and elected another leader. It stops leading a held one at
          once (produces and fetches answer NOT_LEADER_OR_FOLLOWER, waiting acks=all
          produces too), and its metadata cache names the new leader, so that clients
          asking it go there; the controller's LeaderAndIsr makes it a follower when it
          gets through."""
        heartbeats = self.heartbeats
        session_s = self.config.broker_session_timeout_ms / 1000
        quiet_ms = max(int(session_s * 500), 3 * self.config.replica_fetch_wait_max_ms)
        rounds = 0
        while True:
            await trio.sleep(0.25)
            rounds += 1
            if heartbeats.lease():
                self.held_isrs.clear()
                if self.presumed_fenced and not heartbeats.fenced:
                    await self._after_presumed_fencing()
                continue
            if not heartbeats.is_controller() and heartbeats.silent_for() >= session_s / 2:
                resigned = self._give_up_unfetched(quiet_ms)
                if resigned:
                    self.presumed_fenced.update(resigned)
                    logger.warning(
                        "broker %s: no heartbeat answered by the controller for %.1f s and no "
                        "fetch from the ISR for %d ms: presumed fenced, leads none of %s "
                        "until the controller says so",
                        self.node_id,
                        heartbeats.silent_for(),
                        quiet_ms,
                        ", ".join(f"{t}-{p}" for t, p in resigned),
                    )
            if rounds % 2:
                continue
            held = sorted(
                key
                for key in self.held_isrs
                if (part := self.partitions.get(key)) is not None and part.is_leader
            )
            self.held_isrs = set(held)
            watched = sorted({*held, *self.presumed_fenced})
            if watched:
                await self._read_new_leaders(watched)

    async def _read_new_leaders(self, watched: list[TopicPartition]) -> None:
        """The state znodes of `watched`: newer leaderships into the metadata cache; the
        held ones among them resigned, the presumed fenced ones no longer watched."""
        states = None
        # Bounded: cut from ZooKeeper too, the presumptions above must go on meanwhile.
        with trio.move_on_after(1):
            try:
                states = await self._read_states(watched)
            except Exception as exc:  # noqa: BLE001 - read again next round
                logger.info("reading the states of partitions led here failed: %r", exc)
        if states is None:
            return
        moved = 0
        for tp in watched:
            part = self.partitions.get(tp)
            read = states.get(tp)
            if read is None or part is None:
                continue
            state, zk_version = read
            if state.leader_epoch <= part.leader_epoch or state.leader == self.node_id:
                continue
            moved += self._cache_leadership(tp, state, zk_version)
            self.presumed_fenced.discard(tp)
        if moved:
            for key in self.resign_moved_leaderships(why="fenced by the controller"):
                self.held_isrs.discard(key)

    async def _after_presumed_fencing(self) -> None:
        """Heartbeats answered again, and this broker not fenced: the leaderships it gave up
        presuming it would be that are still its own in their state znodes (no other
        leader, no newer epoch) have no leader; it ends its session so that the controller
        elects them anew (`_end_live_session`, as after a presumed deposition)."""
        zk = self.broker.zk
        presumed = sorted(self.presumed_fenced)
        self.presumed_fenced.clear()
        try:
            states = await self._read_states(presumed)
        except Exception as exc:  # noqa: BLE001 - the leaderships stay given up
            logger.warning("reading the states of partitions given up failed: %r", exc)
            return
        still = []
        for tp in presumed:
            read = states.get(tp)
            if read is None:
                continue
            state = read[0]
            given_up = self.given_up.get(tp)
            if (
                state.leader == self.node_id
                and given_up is not None
                and state.leader_epoch <= given_up
            ):
                still.append(tp)
        if still and zk.session_id is not None:
            logger.warning(
                "broker %s: heard by the controller again, not fenced; %s still its own",
                self.node_id,
                ", ".join(f"{t}-{p}" for t, p in still),
            )
            await self._end_live_session(zk, zk.session_id)

    async def _read_states(
        self, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, tuple[zk_data.LeaderIsrState, int] | None]:
        """The state znodes of `partitions`, read pipelined: (decoded state, znode
        version) by partition, None where that znode's read failed; a partition whose
        znode is missing is left out. The whole read failing raises."""
        from kazoo.exceptions import NoNodeError

        read = await self.broker.zk.get_many(
            [zk_data.partition_state_path(*tp) for tp in partitions]
        )
        states: dict[TopicPartition, tuple[zk_data.LeaderIsrState, int] | None] = {}
        for tp, result in zip(partitions, read, strict=True):
            if isinstance(result, NoNodeError):
                continue
            states[tp] = (
                None
                if isinstance(result, Exception)
                else (zk_data.LeaderIsrState.decode(result[0]), result[1].version)
            )
        return states

    def _cache_leadership(self, tp: TopicPartition, state: Any, zk_version: int) -> int:
        """The state znode's newer leadership of `tp` into the metadata cache; 1 if done."""
        tstate = self.broker.metadata.topics.get(tp[0])
        cached = tstate.partitions.get(tp[1]) if tstate is not None else None
        if cached is None or cached.leader_epoch >= state.leader_epoch:
            return 1 if cached is not None else 0
        cached.leader = state.leader
        cached.leader_epoch = state.leader_epoch
        cached.isr = list(state.isr)
        cached.zk_version = zk_version
        return 1

    async def _write_isr(self, part: Partition, new_isr: list[int]) -> None:
        from kazoo.exceptions import BadVersionError, NoNodeError

        zk = self.broker.zk
        epoch = part.leader_epoch
        path = zk_data.partition_state_path(part.topic, part.partition)
        wanted = zk_data.LeaderIsrState(
            leader=self.node_id,
            leader_epoch=epoch,
            isr=tuple(new_isr),
            controller_epoch=part.controller_epoch,
        )

        def current() -> bool:
            return part.is_leader and part.leader_epoch == epoch

        try:
            try:
                stat = await zk.set(path, wanted.encode(), version=part.zk_version)
            except BadVersionError:
                data, stat = await zk.get(path)
                found = zk_data.LeaderIsrState.decode(data)
                if not current():
                    return
                if found.leader != self.node_id or found.leader_epoch != epoch:
                    logger.info(
                        "ISR change of %s-%s not written: the state moved on to leader %s "
                        "epoch %s; waiting for the controller",
                        part.topic,
                        part.partition,
                        found.leader,
                        found.leader_epoch,
                    )
                    return
                if found != wanted:
                    # Changed in this epoch by someone else: take it, try again next round.
                    part.isr = list(found.isr)
                    part.zk_version = stat.version
                    self._update_metadata(part)
                    return
            if not current():
                return
            part.isr = list(new_isr)
            part.zk_version = stat.version
            self._update_metadata(part)
            logger.info(
                "ISR of %s-%s is now %s (zk version %s)",
                part.topic,
                part.partition,
                part.isr,
                part.zk_version,
            )
            if part.maybe_increment_high_watermark():
                self._hw_moved(part)
            # Answer delayed produces that may now complete (or fail: min.insync).
            self.produce_purgatory.wake((part.key,))
            self._isr_changes.add(part.key)
            if not self._isr_announcing:
                self._isr_announcing = True
                self.spawn(self._announce_isr_changes)
        except NoNodeError:
            logger.warning("no state znode %s: ISR change dropped", path)
        except Exception:
            logger.exception("ISR change of %s-%s failed", part.topic, part.partition)
        finally:
            if part.leader_epoch == epoch:
                part.pending_isr = None
                # An expansion not taken no longer holds the HW back.
                if part.is_leader and part.maybe_increment_high_watermark():
                    self._hw_moved(part)

    async def _announce_isr_changes(self) -> None:
        """The ISR changes written so far, in one sequential
        /isr_change_notification/isr_change_ znode (or a few) for the controller; again
        for those written meanwhile."""
        changed: list[TopicPartition] = []
        try:
            while self._isr_changes:
                changed = sorted(self._isr_changes)
                self._isr_changes.clear()
                for i in range(0, len(changed), _ISR_CHANGES_PER_NOTIFICATION):
                    await self.broker.zk.create(
                        f"{zk_data.ISR_CHANGE_NOTIFICATION_PATH}/{zk_data.ISR_CHANGE_PREFIX}",
                        zk_data.encode_isr_change(changed[i : i + _ISR_CHANGES_PER_NOTIFICATION]),
                        sequence=True,
                    )
        except Exception:
            logger.exception("ISR change notification of %d partitions failed", len(changed))
        finally:
            self._isr_announcing = False

    # -- checkpoints -----------------------------------------------------------------------

    async def _checkpoint_high_watermarks(self) -> None:
        """replication-offset-checkpoint in every online log dir, every
        replica.high.watermark.checkpoint.interval.ms. The offsets are taken on the event
        loop (LeaderAndIsr adds logs meanwhile); only the file writes go to a thread."""
        from trio_broker.log.checkpoints import (
            REPLICATION_OFFSET_CHECKPOINT,
            write_offset_checkpoint,
        )

        manager = self.broker.log_manager
        interval = self.config.replica_high_watermark_checkpoint_interval_ms / 1000
        while True:
            await trio.sleep(interval)
            by_dir: dict[Any, dict[TopicPartition, int]] = {d: {} for d in manager.online_dirs()}
            for log in manager.all_logs():
                offsets = by_dir.get(log.dir.parent)
                if offsets is not None and not log.closed:
                    offsets[(log.topic, log.partition)] = log.high_watermark

            def write(by_dir: dict = by_dir) -> None:
                for log_dir, offsets in by_dir.items():
                    write_offset_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT, offsets)

            try:
                await trio.to_thread.run_sync(write)
            except OSError as exc:
                logger.error("cannot write the high watermark checkpoints: %s", exc)
