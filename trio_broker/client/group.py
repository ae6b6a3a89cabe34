"""Group membership for the consumer (Kafka's ConsumerCoordinator, classic protocol).

FindCoordinator finds the group's coordinator; JoinGroup (with a MEMBER_ID_REQUIRED round
trip the first time) and SyncGroup make this consumer a member of a generation; the
leader runs the assignor over every member's subscription. Heartbeats go from a
background task; when one answers REBALANCE_IN_PROGRESS (or the generation or member id
became stale) the member is marked to rejoin, and the consumer rejoins in its next
`getmany`/`__anext__`, the way Kafka's poll() does: a rebalance never lands between
the records a user got and the commit of those records.

Group requests go on a connection of their own (a second NetworkClient), as Kafka's
client opens one to the coordinator: a JoinGroup that the broker parks until every
member has rejoined must not hold up fetches pipelined behind it.

With the eager protocol (any assignor but cooperative-sticky in the list) every
partition is revoked before a join; with cooperative-sticky alone, only the partitions
that move are revoked, after the join, and the member rejoins once more to let them go
to their new owner (KIP-429).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

import trio

from trio_broker.client.assignors import ASSIGNORS
from trio_broker.client.config import ConsumerConfig
from trio_broker.client.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from trio_broker.client.errors import KafkaConnectionError, RequestTimedOutError, error_for
from trio_broker.client.metadata import ClusterMetadata, find_group_coordinator
from trio_broker.client.network_client import NetworkClient
from trio_broker.client.subscription import SubscriptionState, TopicPartition
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.heartbeat_request import HeartbeatRequest
from trio_broker.protocol._generated.join_group_request import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
)
from trio_broker.protocol._generated.leave_group_request import LeaveGroupRequest, MemberIdentity
from trio_broker.protocol._generated.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from trio_broker.protocol._generated.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
)
from trio_broker.protocol._generated.sync_group_request import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)

__all__ = [
    "CommitFailedError",
    "ConsumerRebalanceListener",
    "GroupMember",
]

log = logging.getLogger(__name__)

_COORDINATOR_ERRORS = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR)
_REJOIN_ERRORS = (
    ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.ILLEGAL_GENERATION,
    ErrorCode.UNKNOWN_MEMBER_ID,
)
PROTOCOL_TYPE = "consumer"


class CommitFailedError(KafkaError):
    """The group rebalanced (or this member left it): the commit was refused."""


class ConsumerRebalanceListener:
    """Rebalance callbacks (async); subclass and override what you need.

    `on_partitions_revoked` runs before partitions go away (commit what you processed);
    `on_partitions_lost` when they were taken already (a commit would be refused); by
    default it calls `on_partitions_revoked`, as in Kafka.
    """

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        pass

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        await self.on_partitions_revoked(lost)


class GroupMember:
    """This consumer's membership of `group_id`; see the module docstring."""

    def __init__(
        self,
        client: NetworkClient,
        group_client: NetworkClient,
        metadata: ClusterMetadata,
        subscriptions: SubscriptionState,
        config: ConsumerConfig,
        *,
        wake: Callable[[], None],
    ) -> None:
        assert config.group_id is not None
        self.group_id: str = config.group_id
        self.client = client
        self.group_client = group_client
        self.metadata = metadata
        self.subscriptions = subscriptions
        self.config = config
        self.listener: ConsumerRebalanceListener = ConsumerRebalanceListener()
        self.coordinator: tuple[str, int] | None = None
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.leader_id = ""
        self.stable = False
        self.need_rejoin = False
        self.lost = False
        self.fatal: BaseException | None = None
        self.joined_partition_counts: dict[str, int] = {}
        self.rebalances = 0
        self.joining = False  # a JoinGroup/SyncGroup task is running
        self._ready: set[TopicPartition] | None = None  # its answer, for the next poll
        self._wake = wake
        self._backoff_s = config.retry_backoff_ms / 1000
        self.cooperative = all(
            s == "cooperative-sticky" for s in config.partition_assignment_strategy
        )

    @property
    def instance_id(self) -> str | None:
        return self.config.group_instance_id

    # -- the coordinator ----------------------------------------------------------------

    async def ensure_coordinator(self) -> tuple[str, int]:
        while self.coordinator is None:
            node = self.client.least_loaded_node()
            try:
                code, host, port = await find_group_coordinator(self.client, node, self.group_id)
            except (KafkaConnectionError, RequestTimedOutError) as exc:
                log.info("FindCoordinator for %r: %s", self.group_id, exc)
                await trio.sleep(self._backoff_s)
                continue
            if code:
                error = error_for(code, f"FindCoordinator for group {self.group_id!r}")
                if not error.retriable:
                    raise error
                await trio.sleep(self._backoff_s)
                continue
            self.coordinator = (host, port)
        return self.coordinator

    def coordinator_dead(self) -> None:
        if self.coordinator is not None:
            log.info("group %r: coordinator %s:%s is gone", self.group_id, *self.coordinator)
        self.coordinator = None

    async def send(self, request, timeout_s: float | None = None):  # noqa: ANN001, ANN201
        """Send to the coordinator; a broken connection forgets it and raises."""
        coordinator = await self.ensure_coordinator()
        try:
            return await self.group_client.send(coordinator, request, timeout_s=timeout_s)
        except (KafkaConnectionError, RequestTimedOutError):
            self.coordinator_dead()
            raise

    # -- joining ------------------------------------------------------------------------

    @property
    def settled(self) -> bool:
        """Nothing for a poll to do: stable, no rejoin asked, no assignment to apply."""
        return self.stable and not self.need_rejoin and self._ready is None and not self.fatal

    def request_rejoin(self) -> None:
        self.need_rejoin = True
        self._wake()

    def metadata_changed(self) -> bool:
        topics = self.metadata.cluster.topics
        for topic in self.subscriptions.topics:
            meta = topics.get(topic)
            count = meta.partition_count if meta is not None and not meta.error_code else 0
            if count != self.joined_partition_counts.get(topic, 0):
                return True
        return False

    async def ensure_active(self) -> None:
        """Poll calls this: run due rebalance callbacks, and start a join if one is needed.

        It does not wait for the join: JoinGroup waits at the broker until every member
        has rejoined, and a poll must keep its timeout meanwhile (other members may be
        polled by the same task). Callbacks run here, in the polling task: revocations
        before the join (eager) or once the new assignment is known (cooperative), and
        the new assignment once SyncGroup has answered.
        """
        if self.fatal is not None:
            raise self.fatal
        if self.stable and not self.need_rejoin and not self.joining and self.metadata_changed():
            self.need_rejoin = True
        while True:
            ready, self._ready = self._ready, None
            if ready is not None:
                await self._apply_assignment(ready)
                continue
            if self.joining or (self.stable and not self.need_rejoin):
                return
            if self.lost:
                lost = set(self.subscriptions.assignment)
                self.subscriptions.assign([])
                self.lost = False
                if lost:
                    await self.listener.on_partitions_lost(lost)
            elif not self.cooperative and self.subscriptions.assignment:
                await self._revoke(set(self.subscriptions.assignment))
            self.joining = True
            self.stable = False
            self.need_rejoin = False
            self.client.nursery.start_soon(self._join_task)
            return

    async def _join_task(self) -> None:
        try:
            while True:
                try:
                    self._ready = await self._join_and_sync()
                    return
                except (KafkaConnectionError, RequestTimedOutError) as exc:
                    log.info("group %r: join failed: %s", self.group_id, exc)
                    await trio.sleep(self._backoff_s)
                except KafkaError as exc:
                    if exc.retriable:
                        await trio.sleep(self._backoff_s)
                        continue
                    self.fatal = exc
                    return
        finally:
            self.joining = False
            self._wake()

    async def _revoke(self, revoked: set[TopicPartition]) -> None:
        if self.config.enable_auto_commit:
            await self.commit_quietly(self.positions(revoked))
        await self.listener.on_partitions_revoked(revoked)
        self.subscriptions.remove(revoked)

    def positions(self, partitions: Iterable[TopicPartition] | None = None) -> dict:
        assignment = self.subscriptions.assignment
        chosen = assignment if partitions is None else partitions
        return {
            tp: assignment[tp].position
            for tp in chosen
            if tp in assignment and assignment[tp].position is not None
        }

    async def _partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        counts = {}
        for topic in topics:
            try:
                meta = await self.metadata.wait_for_topic(topic, timeout_s=5)
            except KafkaError as exc:
                log.info("group %r: topic %r has no metadata: %s", self.group_id, topic, exc)
                continue
            counts[topic] = meta.partition_count
        return counts

    async def _join_and_sync(self) -> set[TopicPartition]:
        topics = sorted(self.subscriptions.topics)
        self.joined_partition_counts = await self._partition_counts(topics)
        owned = list(self.subscriptions.assignment) if self.cooperative else []
        metadata = encode_subscription(topics, owned)
        cfg = self.config
        join_timeout = cfg.max_poll_interval_ms / 1000 + 5
        while True:
            request = JoinGroupRequest(
                group_id=self.group_id,
                session_timeout_ms=cfg.session_timeout_ms,
                rebalance_timeout_ms=cfg.max_poll_interval_ms,
                member_id=self.member_id,
                group_instance_id=self.instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocols=[
                    JoinGroupRequestProtocol(name=name, metadata=metadata)
                    for name in cfg.partition_assignment_strategy
                ],
            )
            response = await self.send(request, timeout_s=join_timeout)
            code = response.error_code
            if code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = response.member_id
                continue
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if code in _COORDINATOR_ERRORS:
                self.coordinator_dead()
                continue
            if code in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.REBALANCE_IN_PROGRESS):
                await trio.sleep(self._backoff_s)
                continue
            if code:
                error = error_for(code, f"JoinGroup {self.group_id!r}")
                if code == ErrorCode.FENCED_INSTANCE_ID:
                    self.fatal = error
                raise error
            self.member_id = response.member_id
            self.generation = response.generation_id
            self.protocol = response.protocol_name
            self.leader_id = response.leader
            assignments = []
            if response.leader == response.member_id and not response.skip_assignment:
                assignments = await self._assign(response)
            sync = SyncGroupRequest(
                group_id=self.group_id,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocol_name=self.protocol,
                assignments=assignments,
            )
            answer = await self.send(sync, timeout_s=join_timeout)
            code = answer.error_code
            if code in _COORDINATOR_ERRORS:
                self.coordinator_dead()
                continue
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
                continue
            if code:
                raise error_for(code, f"SyncGroup {self.group_id!r}")
            return decode_assignment(answer.assignment)

    async def _apply_assignment(self, assigned: set[TopicPartition]) -> None:
        self.rebalances += 1
        current = set(self.subscriptions.assignment)
        log.info("group %r generation %s: member %s assigned %s", self.group_id,
                 self.generation, self.member_id, sorted(assigned))  # fmt: skip
        if self.cooperative:
            revoked = current - assigned
            if revoked:
                await self._revoke(revoked)
                # KIP-429: give the revoked partitions up, so their new owner can get them.
                self.need_rejoin = True
            added = assigned - current
            self.subscriptions.add(added)
        else:
            added = assigned
            self.subscriptions.assign(assigned)
        self.stable = True
        self._wake()
        await self.listener.on_partitions_assigned(added)

    async def _assign(self, response) -> list[SyncGroupRequestAssignment]:  # noqa: ANN001
        members = {
            m.member_id: decode_subscription(m.member_id, m.metadata, m.group_instance_id)
            for m in response.members
        }
        topics = sorted({t for m in members.values() for t in m.topics})
        self.metadata.add_topics(topics)
        counts = await self._partition_counts(topics)
        assignor = ASSIGNORS.get(response.protocol_name)
        if assignor is None:
            raise KafkaError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"the coordinator chose assignor {response.protocol_name!r}, which this "
                "consumer did not offer",
            )
        result = assignor(members, counts)
        log.info("group %r: leader %s assigned with %s: %s", self.group_id, self.member_id,
                 response.protocol_name, result)  # fmt: skip
        return [
            SyncGroupRequestAssignment(member_id=m, assignment=encode_assignment(tps))
            for m, tps in result.items()
        ]

    # -- heartbeats -----------------------------------------------------------------------

    async def heartbeat_loop(self) -> None:
        interval = self.config.heartbeat_interval_ms / 1000
        while True:
            await trio.sleep(interval)
            # Heartbeats go on while a rebalance waits for this member's next poll (they
            # keep its session alive); not while its JoinGroup is at the coordinator.
            if self.joining or self.generation < 0 or not self.member_id:
                continue
            request = HeartbeatRequest(
                group_id=self.group_id,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.instance_id,
            )
            try:
                response = await self.send(request)
            except (KafkaConnectionError, RequestTimedOutError, KafkaError) as exc:
                log.info("group %r: heartbeat failed: %s", self.group_id, exc)
                continue
            code = response.error_code
            if not code:
                continue
            log.info("group %r: heartbeat: %s", self.group_id, ErrorCode(code).name)
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                self.request_rejoin()
            elif code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID):
                if code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                self.generation = -1
                self.lost = True
                self.request_rejoin()
            elif code in _COORDINATOR_ERRORS:
                self.coordinator_dead()
            elif code == ErrorCode.FENCED_INSTANCE_ID:
                self.fatal = error_for(code, f"group {self.group_id!r}")
                self._wake()

    # -- offsets --------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, int | tuple[int, str]]) -> None:
        """OffsetCommit; raises CommitFailedError if the group moved on, KafkaError per partition."""
        if not offsets:
            return
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        for tp, value in offsets.items():
            offset, meta = value if isinstance(value, tuple) else (value, "")
            by_topic.setdefault(tp.topic, []).append(
                OffsetCommitRequestPartition(
                    partition_index=tp.partition, committed_offset=offset, committed_metadata=meta
                )
            )
        in_group = bool(self.subscriptions.topics) and self.generation >= 0
        request = OffsetCommitRequest(
            group_id=self.group_id,
            generation_id_or_member_epoch=self.generation if in_group else -1,
            member_id=self.member_id if in_group else "",
            group_instance_id=self.instance_id if in_group else None,
            topics=[OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
        )
        with trio.fail_after(self.config.request_timeout_ms / 1000 * 2):
            while True:
                try:
                    response = await self.send(request)
                except (KafkaConnectionError, RequestTimedOutError):
                    await trio.sleep(self._backoff_s)
                    continue
                failed = [
                    (TopicPartition(t.name, p.partition_index), p.error_code)
                    for t in response.topics
                    for p in t.partitions
                    if p.error_code
                ]
                if not failed:
                    return
                codes = {code for _, code in failed}
                if (
                    codes & set(_COORDINATOR_ERRORS)
                    or ErrorCode.COORDINATOR_LOAD_IN_PROGRESS in codes
                ):
                    if codes & set(_COORDINATOR_ERRORS):
                        self.coordinator_dead()
                    await trio.sleep(self._backoff_s)
                    continue
                tp, code = failed[0]
                detail = f"OffsetCommit {tp.topic}-{tp.partition} in group {self.group_id!r}"
                if code in (ErrorCode.STALE_MEMBER_EPOCH, ErrorCode.FENCED_MEMBER_EPOCH):
                    # KIP-848: the member's epoch moved on (its heartbeat handles that).
                    raise CommitFailedError(ErrorCode(code), f"{ErrorCode(code).name}: {detail}")
                if code in _REJOIN_ERRORS:
                    if code == ErrorCode.UNKNOWN_MEMBER_ID:
                        self.member_id = ""
                        self.lost = True
                    self.request_rejoin()
                    raise CommitFailedError(ErrorCode(code), f"{ErrorCode(code).name}: {detail}")
                raise error_for(code, detail)

    async def commit_quietly(self, offsets: Mapping[TopicPartition, int]) -> bool:
        try:
            await self.commit(offsets)
        except (KafkaError, trio.TooSlowError) as exc:
            log.info("group %r: commit failed: %s", self.group_id, exc)
            return False
        return True

    async def fetch_committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The group's committed offsets (partitions without one are left out)."""
        partitions = list(partitions)
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        coordinator = await self.ensure_coordinator()
        version = await self.group_client.api_version(coordinator, OffsetFetchRequest.API_KEY)
        if version >= 8:
            request = OffsetFetchRequest(
                groups=[
                    OffsetFetchRequestGroup(
                        group_id=self.group_id,
                        topics=[
                            OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                            for t, ps in by_topic.items()
                        ],
                    )
                ]
            )
        else:
            request = OffsetFetchRequest(
                group_id=self.group_id,
                topics=[
                    OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                    for t, ps in by_topic.items()
                ],
            )
        with trio.fail_after(self.config.request_timeout_ms / 1000 * 2):
            while True:
                response = await self.send(request)
                if version >= 8:
                    group = response.groups[0]
                    code, topics = group.error_code, group.topics
                else:
                    code, topics = response.error_code, response.topics
                if code in _COORDINATOR_ERRORS:
                    self.coordinator_dead()
                if code in (*_COORDINATOR_ERRORS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                    await trio.sleep(self._backoff_s)
                    continue
                if code:
                    raise error_for(code, f"OffsetFetch for group {self.group_id!r}")
                result = {}
                for t in topics:
                    for p in t.partitions:
                        if p.error_code:
                            raise error_for(
                                p.error_code, f"OffsetFetch {t.name}-{p.partition_index}"
                            )
                        if p.committed_offset >= 0:
                            result[TopicPartition(t.name, p.partition_index)] = p.committed_offset
                return result

    # -- leaving --------------------------------------------------------------------------

    async def leave(self) -> None:
        """LeaveGroup, unless this is a static member (its partitions wait for it)."""
        if not self.member_id or self.instance_id is not None or self.coordinator is None:
            return
        version = await self.group_client.api_version(self.coordinator, LeaveGroupRequest.API_KEY)
        if version >= 3:
            request = LeaveGroupRequest(
                group_id=self.group_id,
                members=[
                    MemberIdentity(member_id=self.member_id, reason="the consumer is closing")
                ],
            )
        else:
            request = LeaveGroupRequest(group_id=self.group_id, member_id=self.member_id)
        response = await self.send(request)
        if response.error_code:
            log.info("group %r: LeaveGroup: %s", self.group_id, ErrorCode(response.error_code).name)
        self.member_id = ""
        self.generation = -1
        self.stable = False
