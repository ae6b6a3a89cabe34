"""Fetch (key 1): file regions out of the segments, with sessions and waits.

The response's record data is never read into Python: each partition's `records` is a
file region that the connection sends with os.sendfile. A fetch that finds fewer than
min_bytes waits in the fetch purgatory (up to max_wait_ms) without holding a handler
task, and is answered when a produce to one of its partitions wakes it. Fetch v0-v3
cannot read format 2: their records are converted (apis/old_formats.py), and only theirs.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import attrs
import trio

from trio_broker.cluster.replication.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    CachedPartition,
    FetchSession,
    FetchSessionCache,
)
from trio_broker.cluster.replication.purgatory import DelayedOperation
from trio_broker.config import RACK_AWARE_REPLICA_SELECTOR
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.fetch_response import (
    AbortedTransaction,
    EpochEndOffset,
    FetchableTopicResponse,
    FetchResponse,
    LeaderIdAndEpoch,
    PartitionData,
    SnapshotId,
)
from trio_broker.server.requests import DELAYED

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.log import PartitionLog
    from trio_broker.server.requests import Request

READ_COMMITTED = 1
ZERO_UUID = uuid.UUID(int=0)
# A partition's answer names no diverging epoch, current leader or snapshot: the same
# default objects for every answer (never changed in place: an answer that names one gets
# its own), rather than three new ones per partition per fetch.
_NO_DIVERGING_EPOCH = EpochEndOffset()
_NO_LEADER = LeaderIdAndEpoch()
_NO_SNAPSHOT = SnapshotId()
# `_Fetch._resolve` finds the partition's replica itself.
_LOOK_UP: Any = object()


@attrs.frozen
class FileRegions:
    """Several file regions sent back to back as one `records` field."""

    regions: tuple[Any, ...]
    size: int


@attrs.define
class _Fetch:
    broker: Broker
    request: Request
    partitions: list[CachedPartition]  # what to read, in order
    errors: dict[tuple[str, int], int]  # partitions answered with an error instead
    session: FetchSession | None
    incremental: bool
    min_bytes: int
    max_bytes: int
    read_committed: bool
    # A follower's fetch (replica_id >= 0): read up to the log end, not the HW.
    follower: bool = False
    replica_id: int = -1
    # A consumer's rack (fetch v11+) when replica.selector.class is rack-aware (KIP-392):
    # a leader may send it to a replica in its rack instead of answering with records.
    client_rack: str = ""
    # In a cluster, the broker's ReplicaManager (None on a lone broker).
    replicas: Any = None
    response: FetchResponse | None = None
    total_bytes: int = 0
    # The last build could answer (min_bytes reached, or an error): `answer` sends that
    # response rather than reading every partition again.
    ready: bool = False
    # What the last build puts in the response, for the session's cached offsets: they
    # change only when a response goes out (`take_response`), so that a build whose
    # answer is dropped (a woken fetch that must wait on) does not hide its news.
    _news: list[tuple[CachedPartition, PartitionData]] = attrs.Factory(list)

    def build(self) -> bool:
        """Read every partition; returns whether the answer can go now (min_bytes reached)."""
        topics: dict[tuple[str, uuid.UUID], list[PartitionData]] = {}
        remaining = self.max_bytes
        total = 0
        any_error = bool(self.errors)
        version = self.request.api_version
        replicas = self.replicas
        # A follower's fetch counts against this leader's replication quota (KIP-73).
        quota = replicas.quotas.leader if self.follower else None
        if self.follower:
            replicas.check_stalled()  # once for every partition's `leads`
        news = []
        for p in self.partitions:
            error, log, part = self._resolve(p)
            idle = False
            if error is None:
                hw = log.high_watermark
                lso = log.last_stable_offset
                log_start = log.log_start_offset
                bound = self._bound(log)
                idle = _nothing_to_read(log, p.fetch_offset, bound)
                if (
                    self.incremental
                    and idle
                    and not self.client_rack
                    and _told(p, hw, log_start, lso)
                ):
                    # An idle partition of a session: nothing to read, and the client was
                    # told these offsets already, so the answer leaves it out (what the
                    # general path below would find). Most of a follower's session, every
                    # fetch: at 10,000 partitions, a third of a broker's idle CPU was this walk.
                    continue
            # Empty, never null: librdkafka refuses a null record set (MessageSetSize -1).
            data = PartitionData(
                partition_index=p.partition,
                records=b"",
                aborted_transactions=[] if self.read_committed else None,
                diverging_epoch=_NO_DIVERGING_EPOCH,
                current_leader=_NO_LEADER,
                snapshot_id=_NO_SNAPSHOT,
            )
            if (
                self.client_rack
                and part is not None
                and part.is_leader
                and (
                    read_replica := replicas.preferred_read_replica(
                        part, self.client_rack, p.fetch_offset
                    )
                )
                >= 0
            ):
                # Read from that replica instead (no records), as Kafka's leader answers.
                data.preferred_read_replica = read_replica
                data.high_watermark = log.high_watermark
                data.last_stable_offset = log.last_stable_offset
                data.log_start_offset = log.log_start_offset
                any_error = True  # answered at once, like an error
            elif error is None:
                data.high_watermark = hw
                data.last_stable_offset = lso
                data.log_start_offset = log_start
                result = None
                if idle:
                    # Nothing to read (what log.read would find): the common case of every
                    # idle partition of a follower's session, each fetch.
                    pass
                elif (
                    quota is not None
                    and quota.is_throttled(p.topic, p.partition)
                    and self.replica_id not in part.isr
                    and quota.is_exceeded()
                ):
                    pass  # throttled: no records for this out-of-sync follower for now
                else:
                    try:
                        result = log.read(
                            p.fetch_offset,
                            min(p.partition_max_bytes, remaining),
                            max_offset=bound,
                            min_one_message=total == 0,
                        )
                    except KafkaError as exc:
                        error = exc.code
                if result is not None and result.size:
                    regions = result.regions
                    data.records = (
                        regions[0]
                        if len(regions) == 1
                        else FileRegions(tuple(regions), result.size)
                    )
                    total += result.size
                    remaining = max(remaining - result.size, 0)
                    if self.read_committed:
                        data.aborted_transactions = [
                            AbortedTransaction(
                                producer_id=a.producer_id, first_offset=a.first_offset
                            )
                            for a in log.collect_aborted_transactions(
                                p.fetch_offset, result.next_offset
                            )
                        ]
            if error:
                any_error = True
                data.error_code = error
                data.high_watermark = -1 if log is None else log.high_watermark
                data.log_start_offset = -1 if log is None else log.log_start_offset
                if error in _LEADER_MOVED and version >= 12 and replicas:
                    # KIP-951: where the leader is now (Kafka fills it for both errors).
                    leader, epoch = replicas.leader_of(p.topic, p.partition)
                    data.current_leader = LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch)
            if self.incremental and not _changed(p, data):
                continue
            news.append((p, data))
            topics.setdefault((p.topic, p.topic_id), []).append(data)
        self._news = news
        self.total_bytes = total
        self.response = FetchResponse(
            error_code=ErrorCode.NONE,
            session_id=self.session.id if self.session is not None else 0,
            responses=[
                FetchableTopicResponse(topic=name, topic_id=topic_id, partitions=parts)
                for (name, topic_id), parts in topics.items()
            ],
        )
        self.ready = any_error or total >= self.min_bytes
        return self.ready

    def _resolve(
        self, p: CachedPartition, part: Any = _LOOK_UP
    ) -> tuple[int | None, PartitionLog | None, Any]:
        """(error, log, replica) of one partition, checked again at every build (a fetch
        that waited may outlive leadership): with no error, its log and, in a cluster, the
        replica that serves this fetch (the leader's for a follower). What a build reads
        and what `nothing_to_answer` decides from, so that the two cannot disagree. In a
        cluster, `part` is this broker's replica of `p` when the caller has looked it up
        already in the same step (a follower's fetch, on arrival): one lookup per
        partition per fetch. A follower's fetch calls `check_stalled` first."""
        if self.errors and (error := self.errors.get((p.topic, p.partition))) is not None:
            return error, None, None
        replicas = self.replicas
        if replicas is not None:
            if part is _LOOK_UP:
                part = replicas.partitions.get((p.topic, p.partition))
            if part is not None:
                # Its log is the log manager's (the same object for as long as the replica
                # is there; a log dir move swaps the files under it).
                error = _epoch_error(p.current_leader_epoch, part.leader_epoch)
                if error is None and not (
                    replicas.leads(part)
                    if self.follower
                    else replicas.consumer_may_read(part, self.request.api_version >= 11)
                ):
                    error = replicas.not_led_here(p.topic, p.partition)
                return error, part.log, None if error is not None else part
        log = self.broker.topics.get_log(p.topic, p.partition)
        if log is None:
            version = self.request.api_version
            unknown = (
                ErrorCode.UNKNOWN_TOPIC_ID
                if version >= 13
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            return unknown, None, None
        if replicas is not None:  # a log here, but no replica
            return replicas.not_led_here(p.topic, p.partition), log, None
        return _lone_epoch_error(self.broker, p), log, None

    def nothing_to_answer(self, every_idle: bool | None = None) -> bool:
        """Whether a build now would find nothing to answer with (so the fetch may park
        without one): no partition with an error, and nothing to read in any (`_idle`).
        A build would then be not ready and read nothing; the session offsets it might
        tell are told by the build at the wake or deadline. `every_idle`: whether `_idle`
        held for every partition, as a follower's fetch has just found on arrival
        (`_follower_fetched`)."""
        if not self.partitions or self.errors or self.client_rack:
            return False
        if every_idle is None:
            every_idle = all(map(self._idle, self.partitions))
        return every_idle

    def _idle(self, p: CachedPartition, part: Any = _LOOK_UP) -> bool:
        """Whether partition `p` has nothing to answer with now: no error (`_resolve`,
        with `part` as there) and nothing to read at this fetch's bound."""
        error, log, _ = self._resolve(p, part)
        return error is None and _nothing_to_read(log, p.fetch_offset, self._bound(log))

    def _bound(self, log: PartitionLog) -> int:
        """The offset this fetch reads up to: a follower's the log end, a consumer's the
        high watermark (the LSO for read_committed: nothing undecided is returned)."""
        if self.follower:
            return log.log_end_offset
        return log.last_stable_offset if self.read_committed else log.high_watermark

    def take_response(self) -> FetchResponse:
        """The response of the last build, going out now: the session remembers what the
        client was told (Kafka's CachedPartition.maybeUpdateResponseData)."""
        cached = self.session.partitions if self.session is not None else None
        for p, data in self._news:
            p.high_watermark = data.high_watermark
            p.log_start_offset = data.log_start_offset
            p.last_stable_offset = data.last_stable_offset
            if data.records and cached is not None:
                # To the end of the session: when max_bytes cuts a fetch short, the
                # partitions that had nothing come first next time (Kafka rotates so).
                key = (p.topic, p.partition)
                if cached.get(key) is p:
                    del cached[key]
                    cached[key] = p
        if self.follower and self.total_bytes:
            # Every throttled partition's bytes count, in sync or not (Kafka's
            # sizeOfThrottledPartitions), so that the total keeps to the rate.
            quota = self.broker.replica_manager.quotas.leader
            for p, data in self._news:
                if data.records and quota.is_throttled(p.topic, p.partition):
                    quota.record(_records_size(data.records))
        self._news = []
        assert self.response is not None
        if self.request.api_version < 4:
            # Fetch v0-v3 reads message formats 0 and 1: converted, never zero-copy.
            from trio_broker.apis.old_formats import down_convert_fetch

            down_convert_fetch(self.response, self.request.api_version)
        return self.response

    async def answer(self) -> None:
        if not self.ready:  # its wait ran out: what there is now
            self.build()
        response = self.take_response()
        if self.broker.metrics is not None:
            _count_bytes_out(self.broker.metrics, response)
        await self.request.respond(response)


_LEADER_MOVED = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)


def _records_size(records: Any) -> int:
    """Bytes of a `records` field: a file region (or several) or bytes."""
    return getattr(records, "size", None) or len(records)


def _count_bytes_out(metrics: Any, response: FetchResponse) -> None:
    for t in response.responses:
        for p in t.partitions:
            if p.records:
                metrics.fetched(t.topic, _records_size(p.records))


def _nothing_to_read(log: PartitionLog, fetch_offset: int, bound: int) -> bool:
    """Whether reading `log` from `fetch_offset` up to `bound` (a follower's log end, a
    consumer's high watermark or LSO) finds nothing and no error, as log.read would, without
    its call: the offset at the bound and in the log, the log open and online. The one
    test behind a fetch's park without a build, an incremental session's skip of an idle
    partition and the build's own decision to read."""
    return (
        fetch_offset == bound
        and log.log_start_offset <= fetch_offset
        and not (log.offline or log.closed)
    )


def _told(p: CachedPartition, high_watermark: int, log_start: int, last_stable: int) -> bool:
    """Whether the session's client was told these offsets of `p` already."""
    return (
        high_watermark == p.high_watermark
        and log_start == p.log_start_offset
        and last_stable == p.last_stable_offset
    )


def _changed(p: CachedPartition, data: PartitionData) -> bool:
    # Kafka's CachedPartition.maybeUpdateResponseData: being named in the request is not
    # enough; only news is sent.
    return (
        bool(data.records)
        or data.error_code != 0
        or data.preferred_read_replica >= 0
        or not _told(p, data.high_watermark, data.log_start_offset, data.last_stable_offset)
    )


def _epoch_error(requested: int, current: int) -> int | None:
    """The error for a fetch naming leader epoch `requested` (-1: none) of a partition in
    epoch `current`. In a cluster, `current` is this broker's own replica's (not the
    metadata cache's)."""
    if requested < 0 or requested == current:
        return None
    return ErrorCode.FENCED_LEADER_EPOCH if requested < current else ErrorCode.UNKNOWN_LEADER_EPOCH


def _lone_epoch_error(broker: Broker, p: CachedPartition) -> int | None:
    if p.current_leader_epoch < 0:
        return None
    topic = broker.metadata.topics.get(p.topic)
    state = topic.partitions.get(p.partition) if topic else None
    return None if state is None else _epoch_error(p.current_leader_epoch, state.leader_epoch)


def _sessions(broker: Broker) -> FetchSessionCache:
    cache = getattr(broker, "fetch_sessions", None)
    if cache is None:
        slots = broker.config.max_incremental_fetch_session_cache_slots
        cache = broker.fetch_sessions = FetchSessionCache(max_sessions=slots)
    return cache


def _requested(broker: Broker, request: Request) -> tuple[list[CachedPartition], dict, list]:
    """The request's partitions with their topic names resolved (by id from v13)."""
    body = request.body
    by_id = request.api_version >= 13
    replicas = getattr(broker, "replica_manager", None)
    out: list[CachedPartition] = []
    errors: dict[tuple[str, int], int] = {}
    for t in body.topics:
        name, topic_id = t.topic, t.topic_id
        if by_id:
            state = broker.metadata.topic_by_id(t.topic_id)
            name = state.name if state is not None else f"<unknown {t.topic_id}>"
        else:
            state = broker.metadata.topics.get(name)
            topic_id = state.topic_id if state is not None else ZERO_UUID
        if state is None and replicas is not None:
            # A topic of this broker's replicas that UpdateMetadata has not named yet
            # (it follows LeaderAndIsr): followers may fetch already.
            if by_id:
                known = replicas.topic_name(t.topic_id)
                name = known or name
            else:
                known = name if name in replicas.topic_ids else None
                topic_id = replicas.topic_ids.get(name, ZERO_UUID)
            state = known
        for fp in t.partitions:
            cached = CachedPartition(
                topic=name,
                partition=fp.partition,
                topic_id=topic_id,
                fetch_offset=fp.fetch_offset,
                partition_max_bytes=fp.partition_max_bytes,
                current_leader_epoch=fp.current_leader_epoch,
            )
            out.append(cached)
            if state is None:
                errors[(name, fp.partition)] = (
                    ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
    forgotten = []
    for f in body.forgotten_topics_data or []:
        name = f.topic
        if by_id:
            state = broker.metadata.topic_by_id(f.topic_id)
            name = state.name if state is not None else None
        if name is not None:
            forgotten.extend((name, p) for p in f.partitions)
    return out, errors, forgotten


def _leadership_errors(
    broker: Broker, requested: list[CachedPartition], errors: dict, version: int
) -> None:
    """A consumer's fetch in a cluster: a partition not led here is NOT_LEADER_OR_FOLLOWER
    (a consumer's fetch v11+ may read a follower, KIP-392)."""
    replicas = broker.replica_manager
    for p in requested:
        key = (p.topic, p.partition)
        if (
            key not in errors
            and replicas.consumer_readable(p.topic, p.partition, version >= 11) is None
        ):
            errors[key] = replicas.not_led_here(p.topic, p.partition)


def _follower_fetched(fetch: _Fetch) -> bool:
    """A follower's fetch: each partition checked (led here, the follower one of its
    replicas, its leader epoch) and the follower's log end offset recorded before the
    read (which may move the HW and the ISR). Returns whether every partition is idle
    (`_Fetch._idle`): one lookup of each partition's replica per fetch serves these
    checks, the record and the park check (`_Fetch.nothing_to_answer`)."""
    replicas = fetch.replicas
    replicas.check_stalled()  # once for every partition's `leads`
    led = replicas.partitions
    errors = fetch.errors
    replica_id = fetch.replica_id
    now_ms = replicas.now_ms()
    idle = True
    for p in fetch.partitions:
        key = (p.topic, p.partition)
        if key in errors:
            idle = False
            continue
        part = led.get(key)
        error = replicas.follower_fetch_error(replica_id, part, p.topic, p.partition)
        if error is None:
            error = _epoch_error(p.current_leader_epoch, part.leader_epoch)
        if error is None:
            replicas.follower_fetched(replica_id, part, p.fetch_offset, now_ms)
            idle = idle and fetch._idle(p, part)
        else:
            errors[key] = error
            idle = False
    return idle


def _add_node_endpoints(broker: Broker, version: int, response: FetchResponse) -> None:
    if version < 16:
        return
    from trio_broker.cluster.replication.delayed_produce import moved_leader_endpoints
    from trio_broker.protocol._generated.fetch_response import NodeEndpoint

    answers = (d for t in response.responses for d in t.partitions)
    if endpoints := moved_leader_endpoints(broker, answers, NodeEndpoint, _LEADER_MOVED):
        response.node_endpoints = endpoints


async def handle(broker: Broker, request: Request) -> Any:
    body = request.body
    version = request.api_version
    replica_id = body.replica_state.replica_id if version >= 15 else body.replica_id
    replicas = getattr(broker, "replica_manager", None)
    if replica_id >= 0 and replicas is None:
        # A lone broker has no followers: no broker may fetch as one.
        return FetchResponse(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    requested, errors, forgotten = _requested(broker, request)
    session = None
    incremental = False
    partitions = requested
    if version >= 7:
        cache = _sessions(broker)
        sid, epoch = body.session_id, body.session_epoch
        try:
            if epoch == FINAL_EPOCH:
                if sid:
                    cache.close(sid)
            elif epoch == INITIAL_EPOCH:
                if sid:
                    cache.close(sid)
                session = cache.new_session(requested, privileged=replica_id >= 0)
            else:
                session = cache.incremental(sid, epoch)
                incremental = True
                for key in forgotten:
                    session.partitions.pop(key, None)
                for p in requested:
                    old = session.partitions.get((p.topic, p.partition))
                    if old is not None:
                        p.high_watermark = old.high_watermark
                        p.log_start_offset = old.log_start_offset
                        p.last_stable_offset = old.last_stable_offset
                    session.partitions[(p.topic, p.partition)] = p
                partitions = list(session.partitions.values())
        except KafkaError as exc:
            return FetchResponse(error_code=exc.code, session_id=0)
    client_rack = ""
    if replica_id < 0 and replicas is not None:
        # A consumer's unnamed partitions are checked when they are read.
        _leadership_errors(broker, requested, errors, version)
        if (
            version >= 11
            and body.rack_id
            and broker.config.replica_selector_class == RACK_AWARE_REPLICA_SELECTOR
        ):
            client_rack = body.rack_id
    fetch = _Fetch(
        broker=broker,
        request=request,
        partitions=partitions,
        errors=errors,
        session=session,
        incremental=incremental,
        min_bytes=body.min_bytes,
        max_bytes=body.max_bytes,
        read_committed=body.isolation_level == READ_COMMITTED and replica_id < 0,
        follower=replica_id >= 0,
        replica_id=replica_id,
        client_rack=client_rack,
        replicas=replicas,
    )
    every_idle = None
    if replica_id >= 0:
        # A follower's fetch in a session fetches every partition of the session at the
        # offset it last named: each is checked and counts as fetched there (its ISR),
        # named in this request or not, as Kafka's leader reads a session's partitions.
        every_idle = _follower_fetched(fetch)
    if body.max_wait_ms > 0 and body.min_bytes > 0 and fetch.nothing_to_answer(every_idle):
        # A tailing consumer's fetch at the high watermark (the LSO for read_committed) of
        # every partition, or an idle follower's at the log end of every partition of its
        # session: a build would read nothing and find it may not answer yet (min_bytes
        # not reached, no error). It parks without one; its wake or its deadline builds
        # the answer (_Fetch.answer builds when not ready).
        ready = False
    else:
        ready = fetch.build()
    if ready or body.max_wait_ms <= 0 or not partitions:
        response = fetch.take_response()
        if replicas is not None:
            _add_node_endpoints(broker, version, response)
        if broker.metrics is not None:
            _count_bytes_out(broker.metrics, response)
        return response
    broker.fetch_purgatory.park(
        DelayedOperation(
            # A session's keys are its partitions' (no new tuple per partition per park).
            keys=tuple(session.partitions)
            if incremental
            else tuple((p.topic, p.partition) for p in partitions),
            deadline=trio.current_time() + body.max_wait_ms / 1000,
            try_complete=fetch.build,
            complete=fetch.answer,
        )
    )
    return DELAYED
