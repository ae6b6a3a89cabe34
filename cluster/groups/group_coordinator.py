"""GroupCoordinator: classic consumer groups (Kafka's GroupCoordinator, join/sync protocol).

Membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, with Kafka's group states,
generations, protocol selection, session and rebalance timeouts, the initial rebalance
delay, KIP-394 member ids and KIP-345 static members. Offsets and group administration
live in `trio_broker.cluster.groups.offsets`; records and loading in `group_store`.

Parked requests: a JoinGroup waiting for the rebalance (or a SyncGroup waiting for the
leader) does not hold a handler task. Each operation takes a `reply` callable that the
coordinator calls exactly once, at once or later from a timer or another member's request;
`call()` turns that into the handler's return value or `DELAYED`.

Timers are restartable cancel scopes in the coordinator's own nursery (`Timer`, in
`trio_broker.cluster.groups.timer`): a heartbeat moves the session deadline, a new member moves
the initial-delay deadline. Everything runs on the Trio thread and no state change awaits,
so each operation is atomic.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from trio_broker.cluster.groups.group_metadata import GroupMember, GroupMetadata, GroupState
from trio_broker.cluster.groups.records import group_metadata_key, group_metadata_value
from trio_broker.cluster.groups.store import GroupStore
from trio_broker.cluster.groups.timer import Timer
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.partition_log import wall_clock_ms
from trio_broker.protocol._generated.group_metadata_value import (
    GroupMetadataValue,
    MemberMetadata,
)
from trio_broker.protocol._generated.heartbeat_response import HeartbeatResponse
from trio_broker.protocol._generated.join_group_response import (
    JoinGroupResponse,
    JoinGroupResponseMember,
)
from trio_broker.protocol._generated.leave_group_response import (
    LeaveGroupResponse,
    MemberResponse,
)
from trio_broker.protocol._generated.sync_group_response import SyncGroupResponse
from trio_broker.server.requests import DELAYED

if TYPE_CHECKING:
    from trio_broker.broker import Broker

logger = logging.getLogger(__name__)

__all__ = ["GroupCoordinator"]

Reply = Callable[[Any], None]
S = GroupState


class GroupCoordinator:
    """One broker's group coordinator; a service started in the broker's nursery.

    `now_ms` is the wall clock, in ms, of every group and offset timestamp (state changes,
    commits, expiry, record timestamps); tests pass one that follows trio's virtual clock.
    Timers (sessions, rebalances) run on trio's clock.
    """

    def __init__(self, broker: Broker, *, now_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.broker = broker
        # Handlers reach the coordinator as `broker.group_coordinator`.
        broker.group_coordinator = self
        self.config = broker.config
        self.now_ms = now_ms
        self.store = GroupStore(broker, now_ms=now_ms)
        self.groups: dict[str, GroupMetadata] = {}
        self._nursery: trio.Nursery | None = None
        from trio_broker.cluster.groups.consumer.consumer_coordinator import (
            ConsumerGroupCoordinator,
        )
        from trio_broker.cluster.groups.offsets import GroupOffsets
        from trio_broker.cluster.groups.share.share_coordinator import ShareGroupCoordinator
        from trio_broker.cluster.groups.share.share_fetch import SharePartitionManager
        from trio_broker.cluster.groups.share.share_offsets import ShareGroupOffsets
        from trio_broker.cluster.groups.share.state_coordinator import ShareStateCoordinator

        self.offsets = GroupOffsets(self)
        self.consumer = ConsumerGroupCoordinator(self)
        self.share = ShareGroupCoordinator(self)
        self.share_partitions = SharePartitionManager(self)
        self.share_offsets = ShareGroupOffsets(self)
        self.share_state_coordinator = ShareStateCoordinator(broker)

    # -- lifecycle -------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await self.store.load_all(self.offsets.on_partition_loaded)
            nursery.start_soon(self.offsets.run_expiration)
            nursery.start_soon(self.share_partitions.run)
            await trio.sleep_forever()

    def spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(fn, *args)

    def timer(self, delay_ms: float, callback: Callable[[], None]) -> Timer:
        assert self._nursery is not None
        return Timer(self._nursery, delay_ms, callback)

    def call(self, request: Any, operation: Callable[[Reply], None]) -> Any:
        """Run `operation(reply)` for a handler: its response, or DELAYED if it replies later."""
        answered: list[Any] = []
        immediate = True

        def reply(response: Any) -> None:
            if immediate:
                answered.append(response)
            else:
                self.spawn(_respond, request, response)

        operation(reply)
        immediate = False
        return answered[0] if answered else DELAYED

    def check_group(self, group_id: str | None) -> ErrorCode:
        """The error for any request about `group_id` before it can be served, or NONE."""
        if self._nursery is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        replicas = getattr(self.broker, "replica_manager", None)
        if replicas is not None:
            replicas.check_stalled()
            if replicas.unsure:  # stopped long enough to have lost its session, maybe
                return ErrorCode.NOT_COORDINATOR
        if not self.store.is_loaded(group_id):
            if (
                getattr(self.broker, "replica_manager", None) is not None
                and self.store.partition_for(group_id) not in self.store.loading
            ):
                # A cluster: the group's partition is led (and loaded) elsewhere.
                return ErrorCode.NOT_COORDINATOR
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    # -- leadership of __consumer_offsets partitions (cluster/replication/replica_manager.py) ----------

    def load_partition(self, partition: int) -> None:
        """This broker now leads `partition` of `__consumer_offsets`: replay it; its groups
        answer COORDINATOR_LOAD_IN_PROGRESS until then (Kafka's onElection)."""
        self.store.loaded.discard(partition)
        self.store.loading.add(partition)
        self.spawn(self._load_partition, partition)

    async def _load_partition(self, partition: int) -> None:
        await trio.sleep(0)
        if partition not in self.store.loading:
            return  # unloaded meanwhile
        groups = self.store.replay_partition(partition)
        self.offsets.on_partition_loaded(partition, groups)
        self.store.loading.discard(partition)
        self.store.loaded.add(partition)
        logger.info("loaded %d group(s) from __consumer_offsets-%d", len(groups), partition)

    def unload_partition(self, partition: int) -> None:
        """This broker no longer leads `partition`: its groups go (NOT_COORDINATOR), parked
        joins and syncs are answered so, and their timers stop (Kafka's onResignation)."""
        self.store.loaded.discard(partition)
        self.store.loading.discard(partition)
        gone = [
            g for g in self.groups.values() if self.store.partition_for(g.group_id) == partition
        ]
        for group in gone:
            for member_id, member in group.members.items():
                if member.awaiting_join is not None:
                    member.awaiting_join(
                        JoinGroupResponse(error_code=ErrorCode.NOT_COORDINATOR, member_id=member_id)
                    )
                    member.awaiting_join = None
                if member.awaiting_sync is not None:
                    member.awaiting_sync(SyncGroupResponse(error_code=ErrorCode.NOT_COORDINATOR))
                    member.awaiting_sync = None
                if member.session_timer is not None:
                    member.session_timer.cancel()
            if group.rebalance_timer is not None:
                group.rebalance_timer.cancel()
            if group.consumer is not None:
                self.consumer.unload(group.consumer)
            if group.share is not None:
                self.share.unload(group.share)
            del self.groups[group.group_id]
        if gone:
            logger.info("unloaded %d group(s) of __consumer_offsets-%d", len(gone), partition)

    # -- JoinGroup -------------------------------------------------------------------------

    def join_group(
        self, body: Any, *, api_version: int, client_id: str, client_host: str, reply: Reply
    ) -> None:
        def fail(code: ErrorCode, member_id: str = body.member_id) -> None:
            reply(JoinGroupResponse(error_code=code, member_id=member_id))

        error = self.check_group(body.group_id)
        if error:
            return fail(error)
        if not (
            self.config.group_min_session_timeout_ms
            <= body.session_timeout_ms
            <= self.config.group_max_session_timeout_ms
        ):
            return fail(ErrorCode.INVALID_SESSION_TIMEOUT)
        try:
            self.store.ensure_topic()
        except KafkaError as exc:
            return fail(exc.code)
        unknown = body.member_id == ""
        group = self.groups.get(body.group_id)
        if group is None:
            if not unknown:
                return fail(ErrorCode.UNKNOWN_MEMBER_ID)
            group = self.groups[body.group_id] = GroupMetadata(
                group_id=body.group_id, state_timestamp_ms=self.now_ms()
            )
        if group.is_(S.DEAD):
            # Deleted meanwhile: the client looks the coordinator up again and retries.
            return fail(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if group.consumer is not None and group.consumer.members:
            # A KIP-848 group with members: a classic member joins it as such (the online
            # migration; `consumer/classic_members.py`).
            if self.consumer.classic.accepts_classic_members():
                return self.consumer.classic.join(
                    group,
                    body,
                    api_version=api_version,
                    client_id=client_id,
                    client_host=client_host,
                    reply=reply,
                )
            return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.has_consumer_members():
            # A share group with members: no classic member may join it.
            return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.consumer is not None or group.share is not None:
            group.consumer = group.share = None  # an empty modern group becomes a classic one
        protocols = [(p.name, bytes(p.metadata)) for p in body.protocols]
        if not group.supports_protocols(body.protocol_type, [n for n, _ in protocols]):
            return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if (
            unknown
            and not group.has_static_member(body.group_instance_id)
            and len(group.members) + len(group.pending_members) >= self.config.group_max_size
        ):
            return fail(ErrorCode.GROUP_MAX_SIZE_REACHED)
        rebalance_timeout = body.rebalance_timeout_ms
        if api_version == 0 or rebalance_timeout < 0:
            rebalance_timeout = body.session_timeout_ms

        def new_member(member_id: str) -> GroupMember:
            return GroupMember(
                member_id=member_id,
                group_instance_id=body.group_instance_id,
                client_id=client_id,
                client_host=client_host,
                rebalance_timeout_ms=rebalance_timeout,
                session_timeout_ms=body.session_timeout_ms,
                protocol_type=body.protocol_type,
                protocols=protocols,
            )

        if unknown:
            member_id = f"{client_id}-{uuid.uuid4()}"
            instance_id = body.group_instance_id
            if instance_id is not None and group.has_static_member(instance_id):
                self._rejoin_static_member(group, new_member(member_id), reply)
            elif instance_id is None and api_version >= 4:
                # KIP-394: the member comes back with this id; until then it holds up the rebalance.
                group.pending_members.add(member_id)
                self.timer(body.session_timeout_ms, lambda: self._expire_pending(group, member_id))
                fail(ErrorCode.MEMBER_ID_REQUIRED, member_id)
            else:
                self._add_member_and_rebalance(group, new_member(member_id), reply)
            return
        if body.member_id in group.pending_members:
            self._add_member_and_rebalance(group, new_member(body.member_id), reply)
            return
        error = self._validate_member(group, body.member_id, body.group_instance_id)
        if error:
            return fail(error)
        member = group.members[body.member_id]
        if group.is_(S.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout, reply)
        elif group.is_(S.COMPLETING_REBALANCE):
            if member.matches(protocols):
                reply(self._join_response(group, member))
            else:
                self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout, reply
                )
        elif group.is_(S.STABLE):
            if member.member_id == group.leader_id or not member.matches(protocols):
                self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout, reply
                )
            else:
                reply(self._join_response(group, member))
        else:
            fail(ErrorCode.UNKNOWN_MEMBER_ID)

    def _fenced(self, group: GroupMetadata, instance_id: str | None, member_id: str) -> bool:
        return instance_id is not None and group.static_members.get(instance_id) != member_id

    def _validate_member(
        self, group: GroupMetadata, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """Kafka's ClassicGroup.validateMember: the static identity is checked before the
        member id, so a static member replaced by a newer instance (whose old member id
        the group no longer knows) is told FENCED_INSTANCE_ID, a fatal error for the
        client, rather than UNKNOWN_MEMBER_ID, which would make it rejoin and take its
        place back from the newer instance (KIP-345)."""
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if known != member_id:
                logger.info(
                    "group %s: static member %s with member id %s is fenced by %s",
                    group.group_id,
                    instance_id,
                    member_id,
                    known,
                )
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def _join_response(self, group: GroupMetadata, member: GroupMember) -> JoinGroupResponse:
        members = []
        if member.member_id == group.leader_id:
            members = [
                JoinGroupResponseMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    metadata=m.metadata_for(group.protocol_name),
                )
                for m in group.members.values()
            ]
        return JoinGroupResponse(
            error_code=ErrorCode.NONE,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            member_id=member.member_id,
            members=members,
        )

    def _add_member_and_rebalance(
        self, group: GroupMetadata, member: GroupMember, reply: Reply
    ) -> None:
        member.awaiting_join = reply
        member.is_new = True
        group.add(member)
        if group.in_initial_delay:
            group.new_member_added = True
        self._start_session_timer(group, member)
        self._maybe_prepare_rebalance(group, f"adding new member {member.member_id}")
        self._try_complete_join(group)

    def _update_member_and_rebalance(
        self,
        group: GroupMetadata,
        member: GroupMember,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        reply: Reply,
    ) -> None:
        if member.awaiting_join is not None:
            # A retried JoinGroup replaces the one parked before (Kafka does the same).
            member.awaiting_join(
                JoinGroupResponse(
                    error_code=ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id
                )
            )
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.awaiting_join = reply
        self._maybe_prepare_rebalance(group, f"updating metadata of member {member.member_id}")
        self._try_complete_join(group)

    def _rejoin_static_member(
        self, group: GroupMetadata, joined: GroupMember, reply: Reply
    ) -> None:
        """KIP-345: a static member back with a new member id takes its old place."""
        instance_id = joined.group_instance_id
        assert instance_id is not None
        old_id = group.static_members[instance_id]
        old = group.members[old_id]
        fenced = ErrorCode.FENCED_INSTANCE_ID
        if old.awaiting_join is not None:
            old.awaiting_join(JoinGroupResponse(error_code=fenced, member_id=old_id))
            old.awaiting_join = None
        if old.awaiting_sync is not None:
            old.awaiting_sync(SyncGroupResponse(error_code=fenced))
            old.awaiting_sync = None
        member = group.replace_static_member(instance_id, old_id, joined.member_id)
        member.session_timeout_ms = joined.session_timeout_ms
        member.client_id, member.client_host = joined.client_id, joined.client_host
        self._start_session_timer(group, member)
        if group.is_(S.STABLE) and member.matches(joined.protocols):
            # Same subscription: no rebalance, the member syncs to get its assignment back.
            member.rebalance_timeout_ms = joined.rebalance_timeout_ms
            try:
                self._store_group(group)
            except KafkaError as exc:  # KAFKA_STORAGE_ERROR: a full disk
                logger.warning("group %s: cannot store a rejoin: %s", group.group_id, exc)
                reply(JoinGroupResponse(error_code=exc.code, member_id=member.member_id))
                return
            logger.info(
                "static member %s of group %s rejoined as %s",
                instance_id,
                group.group_id,
                member.member_id,
            )
            response = self._join_response(group, member)
            response.members = []  # the leader must not reassign: nothing changed
            reply(response)
        else:
            self._update_member_and_rebalance(
                group, member, joined.protocols, joined.rebalance_timeout_ms, reply
            )

    def _expire_pending(self, group: GroupMetadata, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._try_complete_join(group)

    # -- rebalance -------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY):
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_(S.COMPLETING_REBALANCE):
            for member in group.members.values():
                member.assignment = b""
                if member.awaiting_sync is not None:
                    member.awaiting_sync(
                        SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
                    )
                    member.awaiting_sync = None
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
        initial = group.is_(S.EMPTY)
        group.transition_to(S.PREPARING_REBALANCE, self.now_ms())
        logger.info(
            "preparing to rebalance group %s in generation %d (%s)",
            group.group_id,
            group.generation_id,
            reason,
        )
        if initial:
            delay = self.config.group_initial_rebalance_delay_ms
            remaining = max(group.max_rebalance_timeout_ms() - delay, 0)
            group.new_member_added = False
            group.in_initial_delay = True
            group.rebalance_timer = self.timer(
                delay, lambda: self._on_initial_delay(group, delay, remaining)
            )
        else:
            group.rebalance_timer = self.timer(
                group.max_rebalance_timeout_ms(), lambda: self._complete_join(group)
            )

    def _on_initial_delay(self, group: GroupMetadata, delay: int, remaining: int) -> None:
        """Kafka's InitialDelayedJoin: wait while members keep arriving, up to the rebalance timeout."""
        if group.new_member_added and remaining > 0:
            group.new_member_added = False
            step = min(delay, remaining)
            group.rebalance_timer = self.timer(
                step, lambda: self._on_initial_delay(group, delay, remaining - step)
            )
        else:
            self._complete_join(group)

    def _try_complete_join(self, group: GroupMetadata) -> None:
        # The initial delay completes only by its timer (new members keep extending it).
        if group.is_(S.PREPARING_REBALANCE) and group.all_joined() and not group.in_initial_delay:
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        if not group.is_(S.PREPARING_REBALANCE):
            return
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
            group.rebalance_timer = None
        group.in_initial_delay = False
        for member in list(group.members.values()):
            if member.awaiting_join is None:
                logger.info(
                    "group %s: member %s did not rejoin in time; removed",
                    group.group_id,
                    member.member_id,
                )
                self._drop_member(group, member)
        group.generation_id += 1
        now = self.now_ms()
        if not group.members:
            group.protocol_name = None
            group.transition_to(S.EMPTY, now)
            try:
                self._store_group(group)
            except KafkaError as exc:
                # As Kafka ("failed to write empty metadata"): the group goes on in memory;
                # nobody waits for this record, and a timer task must not fail on it.
                logger.warning("group %s: cannot store it empty: %s", group.group_id, exc)
            logger.info("group %s is empty in generation %d", group.group_id, group.generation_id)
            return
        group.protocol_name = group.select_protocol()
        group.transition_to(S.COMPLETING_REBALANCE, now)
        logger.info(
            "group %s: generation %d with %d member(s), protocol %s",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
        )
        for member in group.members.values():
            reply, member.awaiting_join = member.awaiting_join, None
            member.is_new = False
            self._start_session_timer(group, member)
            reply(self._join_response(group, member))

    # -- SyncGroup -------------------------------------------------------------------------

    def sync_group(self, body: Any, *, api_version: int, reply: Reply) -> None:
        def fail(code: ErrorCode) -> None:
            reply(SyncGroupResponse(error_code=code))

        logger.debug(
            "SyncGroup %s gen %d from %s", body.group_id, body.generation_id, body.member_id
        )
        error = self.check_group(body.group_id)
        if error:
            return fail(error)
        group = self.groups.get(body.group_id)
        if group is None:
            return fail(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_(S.DEAD):
            return fail(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if group.consumer is not None:
            return self.consumer.classic.sync(group, body, reply=reply)
        error = self._validate_member(group, body.member_id, body.group_instance_id)
        if error:
            return fail(error)
        member = group.members[body.member_id]
        if body.generation_id != group.generation_id:
            return fail(ErrorCode.ILLEGAL_GENERATION)
        if (body.protocol_type is not None and body.protocol_type != group.protocol_type) or (
            body.protocol_name is not None and body.protocol_name != group.protocol_name
        ):
            return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_(S.PREPARING_REBALANCE):
            return fail(ErrorCode.REBALANCE_IN_PROGRESS)
        self._start_session_timer(group, member)
        if group.is_(S.STABLE):
            return reply(self._sync_response(group, member))
        if not group.is_(S.COMPLETING_REBALANCE):
            return fail(ErrorCode.UNKNOWN_MEMBER_ID)
        member.awaiting_sync = reply
        if member.member_id != group.leader_id:
            return
        given = {a.member_id: bytes(a.assignment) for a in body.assignments}
        for m in group.members.values():
            m.assignment = given.get(m.member_id, b"")
        try:
            self._store_group(group)
        except KafkaError as exc:
            # Kafka resets the assignments and makes every member rejoin.
            for m in group.members.values():
                if m.awaiting_sync is not None:
                    m.awaiting_sync(SyncGroupResponse(error_code=exc.code))
                    m.awaiting_sync = None
            self._prepare_rebalance(group, "failed to store the assignment")
            return
        group.transition_to(S.STABLE, self.now_ms())
        for m in group.members.values():
            if m.awaiting_sync is not None:
                m.awaiting_sync(self._sync_response(group, m))
                m.awaiting_sync = None

    def _sync_response(self, group: GroupMetadata, member: GroupMember) -> SyncGroupResponse:
        return SyncGroupResponse(
            error_code=ErrorCode.NONE,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            assignment=member.assignment,
        )

    # -- Heartbeat and sessions ------------------------------------------------------------

    def heartbeat(self, body: Any) -> HeartbeatResponse:
        def result(code: ErrorCode) -> HeartbeatResponse:
            return HeartbeatResponse(error_code=code)

        error = self.check_group(body.group_id)
        if error:
            return result(error)
        group = self.groups.get(body.group_id)
        if group is None:
            return result(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_(S.DEAD):
            return result(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if group.consumer is not None:
            return self.consumer.classic.heartbeat(group, body)
        error = self._validate_member(group, body.member_id, body.group_instance_id)
        if error:
            return result(error)
        member = group.members[body.member_id]
        if body.generation_id != group.generation_id:
            return result(ErrorCode.ILLEGAL_GENERATION)
        self._start_session_timer(group, member)
        if group.is_(S.PREPARING_REBALANCE):
            return result(ErrorCode.REBALANCE_IN_PROGRESS)
        return result(ErrorCode.NONE)

    def _start_session_timer(self, group: GroupMetadata, member: GroupMember) -> None:
        if member.session_timer is not None:
            member.session_timer.reset(member.session_timeout_ms)
            return
        member.session_timer = self.timer(
            member.session_timeout_ms, lambda: self._on_session_expired(group, member)
        )

    def _on_session_expired(self, group: GroupMetadata, member: GroupMember) -> None:
        member.session_timer = None
        if group.members.get(member.member_id) is not member:
            return
        if member.awaiting_join is not None:
            # Waiting for the rebalance is a sign of life; the rebalance timeout governs it.
            self._start_session_timer(group, member)
            return
        logger.info(
            "member %s of group %s failed its session timeout (%d ms)",
            member.member_id,
            group.group_id,
            member.session_timeout_ms,
        )
        self._remove_member_and_update_group(group, member)

    def _drop_member(self, group: GroupMetadata, member: GroupMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
            member.session_timer = None
        group.remove(member.member_id)

    def _remove_member_and_update_group(self, group: GroupMetadata, member: GroupMember) -> None:
        if member.awaiting_join is not None:
            member.awaiting_join(
                JoinGroupResponse(
                    error_code=ErrorCode.UNKNOWN_MEMBER_ID, member_id=member.member_id
                )
            )
            member.awaiting_join = None
        if member.awaiting_sync is not None:
            member.awaiting_sync(SyncGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID))
            member.awaiting_sync = None
        self._drop_member(group, member)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"removing member {member.member_id}")
        self._try_complete_join(group)

    # -- LeaveGroup ------------------------------------------------------------------------

    def leave_group(self, body: Any, *, api_version: int) -> LeaveGroupResponse:
        error = self.check_group(body.group_id)
        if error:
            return LeaveGroupResponse(error_code=error)
        if api_version < 3:
            identities = [(body.member_id, None)]
        else:
            identities = [(m.member_id, m.group_instance_id) for m in body.members]
        group = self.groups.get(body.group_id)
        if group is not None and group.consumer is not None:
            return self.consumer.classic.leave(group, body, api_version=api_version)
        results: list[MemberResponse] = []
        for member_id, instance_id in identities:
            code = ErrorCode.NONE
            if group is None or group.is_(S.DEAD):
                code = ErrorCode.UNKNOWN_MEMBER_ID
            elif instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None:
                    code = ErrorCode.UNKNOWN_MEMBER_ID
                elif member_id and known != member_id:
                    code = ErrorCode.FENCED_INSTANCE_ID
                else:
                    member_id = known
            elif member_id not in group.members:
                if member_id in group.pending_members:
                    group.pending_members.discard(member_id)
                    self._try_complete_join(group)
                else:
                    code = ErrorCode.UNKNOWN_MEMBER_ID
            if code == ErrorCode.NONE and group is not None and member_id in group.members:
                logger.info("member %s is leaving group %s", member_id, group.group_id)
                self._remove_member_and_update_group(group, group.members[member_id])
            results.append(
                MemberResponse(member_id=member_id, group_instance_id=instance_id, error_code=code)
            )
        if api_version < 3:
            return LeaveGroupResponse(error_code=results[0].error_code)
        return LeaveGroupResponse(error_code=ErrorCode.NONE, members=results)

    # -- persistence -----------------------------------------------------------------------

    def _store_group(self, group: GroupMetadata) -> None:
        value = GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=group.protocol_name,
            leader=group.leader_id if group.members else None,
            current_state_timestamp=group.state_timestamp_ms,
            members=[
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata_for(group.protocol_name),
                    assignment=m.assignment,
                )
                for m in group.members.values()
            ],
        )
        self.store.append(
            group.group_id, [(group_metadata_key(group.group_id), group_metadata_value(value))]
        )


async def _respond(request: Any, response: Any) -> None:
    try:
        await request.respond(response)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        logger.debug("client of a parked request went away before its answer")
    except Exception:
        # A bug in a response must cost that connection, not the coordinator.
        logger.exception("cannot answer a parked request; closing its connection")
        request.connection.close()
