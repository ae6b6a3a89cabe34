"""ShareFetch and ShareAcknowledge: share sessions, acquisition, acknowledgement and the
acquisition locks (Kafka's SharePartitionManager, ShareSessionCache and the lock timers of
SharePartition).

A share session is keyed by (group, member) and numbered by its epoch: 0 opens it with the
full list of partitions, each later request carries the next epoch and only the partitions
it adds or forgets, -1 closes it (a final fetch or acknowledgement: nothing more is
acquired, and what the member still holds is released).

A fetch first applies the acknowledgements it carries, then, partition by partition,
acquires: records released or timed out (redeliveries, their delivery count one higher),
then whole batches fresh from the log at the share-partition's end offset, while the
partition's in-flight records stay under `group.share.partition.max.record.locks`. The
record batches go out as file regions, as a Fetch's do; the client keeps the records inside
the AcquiredRecords ranges, so the broker never looks inside a batch, only at its header.
With nothing to acquire the fetch waits in the fetch purgatory (up to MaxWaitMs) for a
produce, a release or an expired lock on one of its partitions.

Each acquired range is locked for `share.record.lock.duration.ms`; one task sleeps until
the earliest lock and releases what ran out. A released record is archived instead once it
has been delivered `share.delivery.count.limit` times.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import attrs
import trio

from trio_broker.cluster.groups.group_config import (
    SHARE_AUTO_OFFSET_RESET,
    SHARE_DELIVERY_COUNT_LIMIT,
    SHARE_ISOLATION_LEVEL,
    SHARE_RECORD_LOCK_DURATION,
    duration_ms,
)
from trio_broker.cluster.groups.group_metadata import GroupState
from trio_broker.cluster.groups.share.persister import SharePersister
from trio_broker.cluster.groups.share.share_partition import AckType, SharePartition
from trio_broker.cluster.groups.share.share_reader import Selection, acquire_new, redeliver
from trio_broker.cluster.groups.share.share_state import ShareStateStore
from trio_broker.cluster.replication.purgatory import DelayedOperation
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.share_acknowledge_response import (
    PartitionData as AckPartitionData,
)
from trio_broker.protocol._generated.share_acknowledge_response import (
    ShareAcknowledgeResponse,
    ShareAcknowledgeTopicResponse,
)
from trio_broker.protocol._generated.share_fetch_response import (
    AcquiredRecords,
    PartitionData,
    ShareFetchableTopicResponse,
    ShareFetchResponse,
)
from trio_broker.server.requests import DELAYED

if TYPE_CHECKING:
    from trio_broker.cluster.groups.group_coordinator import GroupCoordinator
    from trio_broker.server.requests import Request

logger = logging.getLogger(__name__)

__all__ = ["SharePartitionManager", "ShareSession"]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1

TopicPartition = tuple[str, int]


@attrs.define(eq=False)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # the epoch the next request must carry
    partitions: dict[TopicPartition, uuid.UUID] = attrs.Factory(dict)  # -> topic id
    rotate: int = 0  # where the next fetch starts, so every partition gets its turn


@attrs.define(eq=False)
class _Acks:
    """One request's acknowledgements, grouped by partition."""

    by_partition: dict[TopicPartition, list[tuple[int, int, list[int]]]]
    topic_ids: dict[TopicPartition, uuid.UUID]
    errors: dict[TopicPartition, int] = attrs.Factory(dict)


class SharePartitionManager:
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator
        self.broker = coordinator.broker
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self.partitions: dict[tuple[str, str, int], SharePartition] = {}
        self._rearm = trio.Event()
        self._sleeping_until = math.inf
        self.store = ShareStateStore(self.broker)
        # A lone broker keeps the state itself; a cluster's partition leaders keep it at
        # the share coordinators (the leaders of __share_group_state's partitions).
        clustered = getattr(self.broker, "zk", None) is not None
        self.state: ShareStateStore | None = None if clustered else self.store
        self.persister: SharePersister | None = SharePersister(self.broker) if clustered else None
        if self.persister is not None:
            self.persister.on_fenced = self._fenced
        self._loading: dict[tuple[str, str, int], trio.Event] = {}

    # -- the lock timer ------------------------------------------------------------------

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            if self.persister is not None:
                nursery.start_soon(self.persister.run)
            await self._expire_locks()

    async def _expire_locks(self) -> None:
        while True:
            deadlines = [
                d for sp in self.partitions.values() if (d := sp.next_deadline()) is not None
            ]
            self._sleeping_until = min(deadlines, default=math.inf)
            with trio.move_on_at(self._sleeping_until):
                await self._rearm.wait()
            self._rearm = trio.Event()
            now = trio.current_time()
            woken = []
            for (group_id, topic, partition), sp in list(self.partitions.items()):
                limit = self._config(group_id)[SHARE_DELIVERY_COUNT_LIMIT]
                released = sp.expire_locks(now, limit)
                if released:
                    logger.debug(
                        "share group %s: %d record(s) of %s-%d back after their lock ran out",
                        group_id,
                        released,
                        topic,
                        partition,
                    )
                    woken.append((topic, partition))
                    self._changed(group_id, sp)
            if woken:
                self.broker.fetch_purgatory.wake(woken)

    def _locked_until(self, deadline: float) -> None:
        if deadline < self._sleeping_until:
            self._rearm.set()

    # -- share-partitions ---------------------------------------------------------------

    def _config(self, group_id: str) -> dict[str, Any]:
        return self.coordinator.share.config_values(group_id)

    def share_partition(self, group_id: str, topic: str, partition: int) -> SharePartition | None:
        """The share-partition, made (at `share.auto.offset.reset`, or where its durable
        state says) on first use; None when this broker has no log for it."""
        key = (group_id, topic, partition)
        sp = self.partitions.get(key)
        log = self.broker.topics.get_log(topic, partition)
        if log is None:
            return None
        if sp is None and self.persister is not None:
            return None  # not read from its share coordinator yet (`prepare`)
        if sp is None:
            sp = self.state.load(group_id, topic, partition) if self.state is not None else None
            if sp is None:
                sp = SharePartition(topic, partition, self._reset_offset(group_id, log))
                sp.dirty = True
                self._changed(group_id, sp)  # where it starts (Kafka's InitializeShareGroupState)
            self.partitions[key] = sp
        if sp.start_offset < log.log_start_offset:
            sp.reset_to(log.log_start_offset)
        return sp

    def _reset_offset(self, group_id: str, log: Any) -> int:
        reset = str(self._config(group_id)[SHARE_AUTO_OFFSET_RESET])
        if reset == "earliest":
            return log.log_start_offset
        if reset.startswith("by_duration:"):
            ms = duration_ms(reset.split(":", 1)[1]) or 0
            found = log.offset_for_timestamp(self.coordinator.now_ms() - ms)
            return found[0] if found is not None else log.high_watermark
        return log.high_watermark

    def _changed(self, group_id: str, sp: SharePartition) -> None:
        if self.persister is not None:
            self.persister.mark(group_id, sp)
            return
        if self.state is not None and sp.dirty:
            try:
                self.state.changed(group_id, sp)
            except (KafkaError, OSError) as exc:
                # The state stays in memory (and dirty): the next change writes it again.
                logger.warning(
                    "share group %s: state of %s-%d not written: %s",
                    group_id,
                    sp.topic,
                    sp.partition,
                    exc,
                )

    def member_gone(self, group_id: str, member_id: str) -> None:
        """A member left or timed out: its share session ends and its records go back."""
        self._close_session(group_id, member_id)

    def _close_session(self, group_id: str, member_id: str) -> None:
        self.sessions.pop((group_id, member_id), None)
        limit = self._config(group_id)[SHARE_DELIVERY_COUNT_LIMIT]
        woken = []
        for (g, topic, partition), sp in self.partitions.items():
            if g == group_id and sp.release_member(member_id, limit):
                woken.append((topic, partition))
                self._changed(group_id, sp)
        if woken:
            self.broker.fetch_purgatory.wake(woken)

    def group_partitions(self, group_id: str) -> dict[tuple[str, int], SharePartition]:
        """Every share-partition of a group this broker has state of, durable ones included."""
        if self.state is not None:
            for sp in self.state.take_group(group_id):
                self.partitions.setdefault((group_id, sp.topic, sp.partition), sp)
        return {(t, p): sp for (g, t, p), sp in self.partitions.items() if g == group_id}

    def replace(self, group_id: str, sp: SharePartition) -> None:
        """AlterShareGroupOffsets: the share-partition starts over as `sp` says."""
        self.group_partitions(group_id)
        self.partitions[(group_id, sp.topic, sp.partition)] = sp
        sp.state_epoch += 1
        sp.dirty = True
        self._changed(group_id, sp)

    def forget(self, group_id: str, topic: str, partition: int) -> None:
        """DeleteShareGroupOffsets: the share-partition's state goes."""
        if self.persister is not None:
            self.persister.forget((group_id, topic, partition))
        sp = self.partitions.pop((group_id, topic, partition), None)
        if sp is not None and self.state is not None:
            self.state.delete(group_id, sp)

    async def delete_state(self, group_id: str, topics: list[str] | None) -> dict[str, int]:
        """A cluster: DeleteShareGroupState at the share coordinators for every partition
        of these topics (None: every topic, as which share-partitions a group has is known
        only to their leaders); the error code of each topic that has one."""
        if self.persister is None:
            return {}
        meta = self.broker.metadata.topics
        names = [t for t, state in meta.items() if not state.internal] if topics is None else topics
        keys = [
            (meta[t].topic_id, p) for t in names if t in meta for p in sorted(meta[t].partitions)
        ]
        codes = await self.persister.delete(group_id, keys)
        by_id = {meta[t].topic_id: t for t in names if t in meta}
        failed: dict[str, int] = {}
        for (topic_id, _), code in codes.items():
            if code and by_id[topic_id] not in failed:
                failed[by_id[topic_id]] = code
        return failed

    async def delete_groups_state(self, names: list[str]) -> dict[str, int]:
        """A cluster, DeleteGroups: the state of each empty share group among `names` that
        this broker coordinates, deleted at the share coordinators; the groups whose state
        could not be, with the error."""
        failed: dict[str, int] = {}
        if self.persister is None:
            return failed
        for group_id in names:
            group = self.coordinator.groups.get(group_id)
            if (
                group is None
                or group.share is None
                or self.coordinator.check_group(group_id)
                or not group.is_(GroupState.EMPTY)
                or group.has_consumer_members()
            ):
                continue  # DeleteGroups answers it
            errors = await self.delete_state(group_id, None)
            if errors:
                failed[group_id] = next(iter(errors.values()))
        return failed

    async def initialize_state(
        self, group_id: str, topic: str, partition: int, start_offset: int
    ) -> int:
        """A cluster: AlterShareGroupOffsets at the share-partition's share coordinator."""
        assert self.persister is not None
        state = self.broker.metadata.topics.get(topic)
        if state is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        self.persister.forget((group_id, topic, partition))
        self.partitions.pop((group_id, topic, partition), None)
        return await self.persister.initialize(group_id, state.topic_id, partition, start_offset)

    def forget_group(self, group_id: str) -> None:
        """DeleteGroups: the group's share-partitions and sessions go."""
        for key in self.group_partitions(group_id):
            sp = self.partitions.pop((group_id, *key))
            if self.state is not None:
                self.state.delete(group_id, sp)
        for key in [k for k in self.sessions if k[0] == group_id]:
            del self.sessions[key]

    # -- a cluster: the share-partitions read from their share coordinators ---------------

    def _fenced(self, key: tuple[str, str, int], sp: SharePartition) -> None:
        """A write of this share-partition was refused FENCED_STATE_EPOCH: its state was
        altered or deleted at the share coordinator; the next fetch reads it again."""
        if self.partitions.get(key) is sp:
            del self.partitions[key]

    async def prepare(self, body: Any) -> None:
        """Before a ShareFetch in a cluster: every share-partition it may touch (the
        request's and its session's) that this broker leads is read from its share
        coordinator, unless it is in memory from this leadership (its leader epoch). A new
        share session (epoch 0) also asks whether the state moved on (AlterShareGroupOffsets,
        DeleteGroups: a newer state epoch) where no record of it is acquired."""
        if self.persister is None or not body.group_id:
            return
        group_id = body.group_id
        keys = set()
        for t in body.topics:
            name = self._names(t.topic_id)
            if name is not None:
                keys.update((name, p.partition_index) for p in t.partitions)
        session = self.sessions.get((group_id, body.member_id or ""))
        if session is not None:
            keys.update(session.partitions)
        replicas = self.broker.replica_manager
        check = body.share_session_epoch == INITIAL_EPOCH
        for topic, partition in sorted(keys):
            own = replicas.leader_partition(topic, partition)
            if own is None:
                continue
            await self._load(group_id, topic, partition, own, check=check)

    async def _load(
        self, group_id: str, topic: str, partition: int, own: Any, *, check: bool = False
    ) -> None:
        key = (group_id, topic, partition)
        while (loading := self._loading.get(key)) is not None:
            await loading.wait()
        sp = self.partitions.get(key)
        held = sp is not None and sp.generation == own.leader_generation
        if held and not (check and sp.acquired_count() == 0):
            return
        epoch = own.leader_epoch
        self._loading[key] = done = trio.Event()
        try:
            assert self.persister is not None
            try:
                loaded, state_epoch = await self.persister.read(group_id, topic, partition, epoch)
            except KafkaError as exc:
                if held:
                    return  # asked only whether it moved on: carry on with what is held
                logger.info(
                    "share group %s: state of %s-%d not read: %s", group_id, topic, partition, exc
                )
                self.partitions.pop(key, None)  # nothing served from it until it is read
                return
            if held and sp is not None and state_epoch <= sp.state_epoch:
                # Not moved on. (This broker's own changes raise the state epoch as the
                # start offset advances, and may not be written yet: only a higher one
                # comes from elsewhere.)
                return
            log = self.broker.topics.get_log(topic, partition)
            if log is None:
                return
            if loaded is None:
                loaded = SharePartition(
                    topic,
                    partition,
                    self._reset_offset(group_id, log),
                    state_epoch=state_epoch,
                )
                self.persister.mark(group_id, loaded)
            loaded.leader_epoch = epoch
            loaded.generation = own.leader_generation
            self.partitions[key] = loaded
        finally:
            del self._loading[key]
            done.set()

    async def flush(self, body: Any) -> None:
        """After a request carrying acknowledgements in a cluster: wait (up to the request
        timeout) until the share coordinators have them."""
        if self.persister is None or not body.group_id:
            return
        keys = []
        for t in body.topics:
            name = self._names(t.topic_id)
            if name is not None:
                keys += [
                    (body.group_id, name, p.partition_index)
                    for p in t.partitions
                    if p.acknowledgement_batches
                ]
        if keys:
            await self.persister.flush(keys, self.broker.config.request_timeout_ms / 1000)

    # -- sessions ----------------------------------------------------------------------

    def _session(self, group_id: str, member_id: str, epoch: int, *, fetch: bool) -> ShareSession:
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            if not fetch:
                raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
            old = self.sessions.pop(key, None)
            if old is not None:
                # A new session replaces the old one: what it held is released (Kafka).
                self._close_session(group_id, member_id)
            session = self.sessions[key] = ShareSession(group_id, member_id, 1)
            return session
        session = self.sessions.get(key)
        if session is None:
            raise KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND)
        if epoch == FINAL_EPOCH:
            return session
        if epoch != session.epoch:
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        session.epoch += 1
        return session

    def _names(self, topic_id: uuid.UUID) -> str | None:
        state = self.broker.metadata.topic_by_id(topic_id)
        return state.name if state is not None else None

    def _acks(self, topics: list[Any]) -> _Acks:
        acks = _Acks({}, {})
        for t in topics:
            name = self._names(t.topic_id)
            for p in t.partitions:
                key = (name or f"<unknown {t.topic_id}>", p.partition_index)
                acks.topic_ids[key] = t.topic_id
                if name is None:
                    acks.errors[key] = ErrorCode.UNKNOWN_TOPIC_ID
                for b in p.acknowledgement_batches:
                    acks.by_partition.setdefault(key, []).append(
                        (b.first_offset, b.last_offset, list(b.acknowledge_types))
                    )
        return acks

    def _readable(self, request: Request) -> Callable[[str], bool]:
        """Whether the request's principal may READ a topic (Kafka's per-partition check
        of ShareFetch and ShareAcknowledge; the group's is security/authorize_share.py's).
        Made here because a share session fetches partitions named in earlier requests."""
        az = getattr(self.broker, "authorizer", None)
        if az is None:
            return _anything
        # Only with an authorizer: a plaintext broker loads no security module.
        from trio_broker.security.acl import Op, Resource

        return lambda topic: az.allows(request, Op.READ, Resource.TOPIC, topic)

    @staticmethod
    def _refuse_acks(acks: _Acks, readable: Callable[[str], bool]) -> None:
        for key in acks.topic_ids:
            if key not in acks.errors and not readable(key[0]):
                acks.errors[key] = ErrorCode.TOPIC_AUTHORIZATION_FAILED

    def _apply_acks(self, group_id: str, member_id: str, acks: _Acks) -> None:
        limit = self._config(group_id)[SHARE_DELIVERY_COUNT_LIMIT]
        woken = []
        for key, batches in acks.by_partition.items():
            if key in acks.errors:
                continue
            sp = self.partitions.get((group_id, *key))
            if sp is None:
                acks.errors[key] = ErrorCode.INVALID_RECORD_STATE
                continue
            error = ErrorCode.NONE
            previous_last = -1
            for first, last, types in batches:
                if last < first or first <= previous_last or not types:
                    error = ErrorCode.INVALID_REQUEST
                    continue
                previous_last = last
                if len(types) == 1:
                    pieces = [(first, last, types[0])]
                elif len(types) == last - first + 1:
                    pieces = list(_runs(first, types))
                else:
                    error = ErrorCode.INVALID_REQUEST
                    continue
                for lo, hi, kind in pieces:
                    if kind not in (0, 1, 2, 3):
                        error = ErrorCode.INVALID_REQUEST
                    elif not sp.acknowledge(member_id, lo, hi, AckType(kind), limit):
                        error = ErrorCode.INVALID_RECORD_STATE
                    elif kind == AckType.RELEASE:
                        woken.append(key)
            if error:
                acks.errors[key] = error
            self._changed(group_id, sp)
        if woken:
            self.broker.fetch_purgatory.wake(woken)

    # -- ShareFetch ----------------------------------------------------------------------

    def fetch(self, request: Request) -> Any:
        body = request.body
        group_id, member_id, epoch = (
            body.group_id or "",
            body.member_id or "",
            body.share_session_epoch,
        )
        error = self.coordinator.check_group(group_id) if group_id else ErrorCode.INVALID_GROUP_ID
        if error == ErrorCode.NOT_COORDINATOR:
            error = ErrorCode.NONE  # the share-partitions live with the partition leaders
        if not error and not member_id:
            error = ErrorCode.INVALID_REQUEST
        acks = self._acks(body.topics)
        if not error and epoch == INITIAL_EPOCH and acks.by_partition:
            error = ErrorCode.INVALID_REQUEST
        if not error and epoch == FINAL_EPOCH and body.forgotten_topics_data:
            error = ErrorCode.INVALID_REQUEST
        session = None
        if not error:
            try:
                session = self._session(group_id, member_id, epoch, fetch=True)
            except KafkaError as exc:
                error = exc.code
        if error or session is None:
            return ShareFetchResponse(error_code=error)
        for t in body.topics:
            name = self._names(t.topic_id)
            for p in t.partitions:
                if name is not None:
                    session.partitions[(name, p.partition_index)] = t.topic_id
        readable = self._readable(request)
        self._refuse_acks(acks, readable)
        self._apply_acks(group_id, member_id, acks)
        for f in body.forgotten_topics_data:
            name = self._names(f.topic_id)
            for p in f.partitions:
                key = (name, p) if name is not None else None
                if key is not None and session.partitions.pop(key, None) is not None:
                    sp = self.partitions.get((group_id, *key))
                    limit = self._config(group_id)[SHARE_DELIVERY_COUNT_LIMIT]
                    if sp is not None and sp.release_member(member_id, limit):
                        self._changed(group_id, sp)
                        self.broker.fetch_purgatory.wake([key])
        lock_ms = self._config(group_id)[SHARE_RECORD_LOCK_DURATION]
        if epoch == FINAL_EPOCH:
            answer = self._answer(session, acks, {}, lock_ms)
            self._close_session(group_id, member_id)
            return answer
        denied = {key for key in session.partitions if not readable(key[0])}
        fetch = _ShareFetch(self, session, acks, body, lock_ms, denied)
        if fetch.build() or body.max_wait_ms <= 0 or len(session.partitions) == len(denied):
            return fetch.response
        self.broker.fetch_purgatory.park(
            DelayedOperation(
                keys=tuple(session.partitions),
                deadline=trio.current_time() + body.max_wait_ms / 1000,
                try_complete=fetch.build,
                complete=lambda: fetch.answer(request),
            )
        )
        return DELAYED

    def _answer(
        self,
        session: ShareSession,
        acks: _Acks,
        acquired: dict[TopicPartition, tuple[Any, list[tuple[int, int, int]], int]],
        lock_ms: int,
    ) -> ShareFetchResponse:
        topics: dict[uuid.UUID, list[PartitionData]] = {}
        keys = list(session.partitions) + [k for k in acks.topic_ids if k not in session.partitions]
        for key in keys:
            topic_id = session.partitions.get(key) or acks.topic_ids[key]
            records, ranges, error = acquired.get(key, (b"", [], ErrorCode.NONE))
            data = PartitionData(
                partition_index=key[1],
                error_code=error,
                records=records,
                acquired_records=[
                    AcquiredRecords(first_offset=a, last_offset=b, delivery_count=c)
                    for a, b, c in ranges
                ],
            )
            data.current_leader.leader_id = -1
            data.current_leader.leader_epoch = -1
            if key in acks.by_partition or key in acks.errors:
                data.acknowledge_error_code = acks.errors.get(key, ErrorCode.NONE)
            topics.setdefault(topic_id, []).append(data)
        return ShareFetchResponse(
            acquisition_lock_timeout_ms=lock_ms,
            responses=[
                ShareFetchableTopicResponse(topic_id=t, partitions=ps) for t, ps in topics.items()
            ],
        )

    # -- acquiring -----------------------------------------------------------------------

    def acquire(
        self,
        group_id: str,
        member_id: str,
        key: TopicPartition,
        max_records: int,
        max_bytes: int,
        lock_ms: int,
    ) -> tuple[Any, list[tuple[int, int, int]], int]:
        """Acquire records of one partition for a member: (records, acquired ranges, error)."""
        topic, partition = key
        replicas = getattr(self.broker, "replica_manager", None)
        if replicas is not None and replicas.consumer_readable(topic, partition, False) is None:
            return b"", [], replicas.not_led_here(topic, partition)
        sp = self.share_partition(group_id, topic, partition)
        if sp is None and self.persister is not None:
            return b"", [], ErrorCode.NONE  # its state is not read yet: nothing from it now
        if sp is None:
            return b"", [], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        log = self.broker.topics.get_log(topic, partition)
        config = self._config(group_id)
        read_committed = config[SHARE_ISOLATION_LEVEL] == "read_committed"
        limit = log.last_stable_offset if read_committed else log.high_watermark
        deadline = trio.current_time() + lock_ms / 1000
        selection = Selection()
        ranges: list[tuple[int, int, int]] = []
        budget = max_records
        try:
            if sp.has_available():
                budget = redeliver(
                    sp, member_id, log, budget, max_bytes, deadline, selection, ranges
                )
            max_locks = self.coordinator.config.value("group.share.partition.max.record.locks")
            room = max_locks - sp.in_flight()
            if budget > 0 and room > 0 and sp.end_offset < limit:
                acquire_new(
                    sp,
                    member_id,
                    log,
                    min(budget, room),
                    max_bytes,
                    limit,
                    deadline,
                    selection,
                    ranges,
                    read_committed,
                )
        except KafkaError as exc:
            return b"", ranges, exc.code
        if ranges:
            self._locked_until(deadline)
            self._changed(group_id, sp)
        return selection.records(), ranges, ErrorCode.NONE

    # -- ShareAcknowledge ------------------------------------------------------------------

    def acknowledge(self, request: Request) -> ShareAcknowledgeResponse:
        body = request.body
        group_id, member_id, epoch = (
            body.group_id or "",
            body.member_id or "",
            body.share_session_epoch,
        )
        error = self.coordinator.check_group(group_id) if group_id else ErrorCode.INVALID_GROUP_ID
        if error == ErrorCode.NOT_COORDINATOR:
            error = ErrorCode.NONE
        if not error and not member_id:
            error = ErrorCode.INVALID_REQUEST
        if not error:
            try:
                self._session(group_id, member_id, epoch, fetch=False)
            except KafkaError as exc:
                error = exc.code
        if error:
            return ShareAcknowledgeResponse(error_code=error)
        acks = self._acks(body.topics)
        self._refuse_acks(acks, self._readable(request))
        self._apply_acks(group_id, member_id, acks)
        if epoch == FINAL_EPOCH:
            self._close_session(group_id, member_id)
        topics: dict[uuid.UUID, list[AckPartitionData]] = {}
        for key, topic_id in acks.topic_ids.items():
            data = AckPartitionData(
                partition_index=key[1], error_code=acks.errors.get(key, ErrorCode.NONE)
            )
            data.current_leader.leader_id = -1
            data.current_leader.leader_epoch = -1
            topics.setdefault(topic_id, []).append(data)
        return ShareAcknowledgeResponse(
            responses=[
                ShareAcknowledgeTopicResponse(topic_id=t, partitions=ps) for t, ps in topics.items()
            ]
        )


def _anything(_topic: str) -> bool:
    return True


def _runs(first: int, types: list[int]) -> Iterator[tuple[int, int, int]]:
    """Per-offset acknowledge types as (first, last, type) runs."""
    start = 0
    for i in range(1, len(types) + 1):
        if i == len(types) or types[i] != types[start]:
            yield first + start, first + i - 1, types[start]
            start = i


@attrs.define(eq=False)
class _ShareFetch:
    manager: SharePartitionManager
    session: ShareSession
    acks: _Acks
    body: Any
    lock_ms: int
    denied: set[TopicPartition]  # partitions of topics the principal may not READ
    response: ShareFetchResponse | None = None

    def build(self) -> bool:
        """Acquire what there is now; returns whether the answer can go."""
        m = self.manager
        session = self.session
        keys = list(session.partitions)
        if keys:
            start = session.rotate % len(keys)
            keys = keys[start:] + keys[:start]
            session.rotate += 1
        max_records = self.body.max_records if self.body.max_records > 0 else 500
        max_bytes = self.body.max_bytes if self.body.max_bytes > 0 else 2**31 - 1
        acquired: dict[TopicPartition, tuple[Any, list[tuple[int, int, int]], int]] = {
            key: (b"", [], ErrorCode.TOPIC_AUTHORIZATION_FAILED) for key in self.denied
        }
        total = 0
        ready = bool(self.acks.errors)
        for key in keys:
            if max_records <= 0:
                break
            if key in self.denied:
                continue
            records, ranges, error = m.acquire(
                session.group_id,
                session.member_id,
                key,
                max_records,
                max_bytes - total,
                self.lock_ms,
            )
            if ranges or error:
                acquired[key] = (records, ranges, error)
                ready = True
            max_records -= sum(b - a + 1 for a, b, _ in ranges)
            size = getattr(records, "size", None)
            total += size if isinstance(size, int) else len(records)
            if total >= max_bytes:
                break
        if ready or self.response is None:
            self.response = m._answer(session, self.acks, acquired, self.lock_ms)
        return ready

    async def answer(self, request: Request) -> None:
        assert self.response is not None
        await request.respond(self.response)
