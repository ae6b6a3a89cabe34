"""Group membership with the consumer protocol (KIP-848; Kafka's ConsumerMembershipManager).

`Consumer(..., group_protocol="consumer")` uses this instead of `client/group.py`'s
classic member. The coordinator computes the assignment; this member only heartbeats
(ConsumerGroupHeartbeat) and reconciles:

- It joins with member epoch 0 and its subscription, and from then on heartbeats every
  `heartbeat_interval_ms` the coordinator chose (the group's, not the client's key).
- An answer carrying an assignment is the member's target. The consumer's next poll
  reconciles in the polling task, as Kafka's poll() does: partitions no longer in the
  target are revoked first (committed with auto commit, the listener told), the new
  ones added, and a heartbeat goes at once reporting what the member now owns, which is
  how the coordinator learns a revocation is done and can give the partitions on.
  The coordinator only hands out partitions nobody else still owns, so no partition is
  ever owned twice.
- FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID: the partitions are lost (the listener's
  `on_partitions_lost`), and the member joins again with epoch 0 and the same member id.
- Leaving is a heartbeat with epoch -1, or -2 for a static member (`group_instance_id`),
  whose partitions then wait for it for the session timeout.

Offsets (OffsetCommit with the member epoch, OffsetFetch) and the coordinator lookup are
the classic member's, inherited.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

import trio

from trio_broker.client.config import ConsumerConfig
from trio_broker.client.errors import KafkaConnectionError, RequestTimedOutError, error_for
from trio_broker.client.group import GroupMember
from trio_broker.client.metadata import ClusterMetadata
from trio_broker.client.network_client import NetworkClient
from trio_broker.client.subscription import SubscriptionState, TopicPartition
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.consumer_group_heartbeat_request import (
    ConsumerGroupHeartbeatRequest,
    TopicPartitions,
)

__all__ = ["ConsumerGroupMember"]

log = logging.getLogger(__name__)

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
_FENCED = (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID)
_COORDINATOR_ERRORS = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR)
# Errors no retry can mend: the consumer's next poll raises them.
_FATAL = (
    ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ErrorCode.UNRELEASED_INSTANCE_ID,
    ErrorCode.FENCED_INSTANCE_ID,
    ErrorCode.GROUP_MAX_SIZE_REACHED,
    ErrorCode.UNSUPPORTED_ASSIGNOR,
    ErrorCode.UNSUPPORTED_VERSION,
    ErrorCode.INVALID_REQUEST,
    ErrorCode.GROUP_ID_NOT_FOUND,
)


class ConsumerGroupMember(GroupMember):
    """This consumer's membership of `group_id` under KIP-848; see the module docstring."""

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
        super().__init__(client, group_client, metadata, subscriptions, config, wake=wake)
        # KIP-1082: the member makes its own id and keeps it for its whole life.
        self.member_id = str(uuid.uuid4())
        self.epoch = 0  # the member epoch; `generation` mirrors it once joined (for commits)
        self.cooperative = True
        self._interval_s = config.heartbeat_interval_ms / 1000
        self._heartbeat_now = trio.Event()
        self._send_full = True  # subscription (and the rest) in the next heartbeat
        self._owned_changed = False  # owned partitions to report in the next heartbeat
        self._target: set[TopicPartition] | None = None  # for the next poll to reconcile

    # -- the poll's part ------------------------------------------------------------------

    @property
    def settled(self) -> bool:
        return (
            self.stable
            and self._target is None
            and not self.lost
            and not self.need_rejoin
            and not self.fatal
        )

    def request_rejoin(self) -> None:
        # A new subscription: told in the next heartbeat, sent now.
        self.need_rejoin = True
        self._send_full = True
        self._heartbeat_now.set()
        self._wake()

    async def ensure_active(self) -> None:
        if self.fatal is not None:
            raise self.fatal
        if self.lost:
            lost = set(self.subscriptions.assignment)
            self.subscriptions.assign([])
            self.lost = False
            self.stable = False
            self._heartbeat_now.set()  # join again now (epoch 0, owning nothing)
            if lost:
                await self.listener.on_partitions_lost(lost)
        target, self._target = self._target, None
        if target is None:
            return
        current = set(self.subscriptions.assignment)
        revoked = current - target
        added = target - current
        if revoked:
            await self._revoke(revoked)
        if added:
            self.subscriptions.add(added)
        if revoked or added or not self.stable:
            self.rebalances += 1
            log.info("group %r epoch %s: member %s owns %s", self.group_id, self.epoch,
                     self.member_id, sorted(self.subscriptions.assignment))  # fmt: skip
        self.stable = True
        if revoked or added:
            # Tell the coordinator at once: a revocation it waits for is done.
            self._owned_changed = True
            self._heartbeat_now.set()
        self._wake()
        if added:
            await self.listener.on_partitions_assigned(added)

    # -- heartbeats -----------------------------------------------------------------------

    def _owned(self) -> list[TopicPartitions]:
        by_topic: dict[str, list[int]] = {}
        for tp in self.subscriptions.assignment:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        owned = []
        for topic, partitions in sorted(by_topic.items()):
            meta = self.metadata.cluster.topics.get(topic)
            if meta is not None and meta.topic_id is not None:
                owned.append(TopicPartitions(topic_id=meta.topic_id, partitions=sorted(partitions)))
        return owned

    def _request(self) -> ConsumerGroupHeartbeatRequest:
        joining = self.epoch == 0
        full = self._send_full or joining
        owned: list[TopicPartitions] | None = None
        if joining:
            owned = []
        elif full or self._owned_changed:
            owned = self._owned()
        return ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=self.config.max_poll_interval_ms if full else -1,
            subscribed_topic_names=sorted(self.subscriptions.topics) if full else None,
            server_assignor=self.config.group_remote_assignor if full else None,
            topic_partitions=owned,
        )

    async def heartbeat_loop(self) -> None:
        while True:
            with trio.move_on_after(self._interval_s):
                await self._heartbeat_now.wait()
            self._heartbeat_now = trio.Event()
            if self.fatal is not None or self.lost or not self.subscriptions.topics:
                continue
            request = self._request()
            sent_full = request.subscribed_topic_names is not None
            sent_owned = request.topic_partitions is not None
            try:
                response = await self.send(request)
            except (KafkaConnectionError, RequestTimedOutError, KafkaError) as exc:
                log.info("group %r: heartbeat failed: %s", self.group_id, exc)
                await trio.sleep(self._backoff_s)
                self._heartbeat_now.set()
                continue
            await self._answered(response, sent_full=sent_full, sent_owned=sent_owned)

    async def _answered(self, response, *, sent_full: bool, sent_owned: bool) -> None:  # noqa: ANN001
        code = response.error_code
        if not code:
            if response.member_id:
                self.member_id = response.member_id
            self.epoch = response.member_epoch
            self.generation = self.epoch
            if response.heartbeat_interval_ms > 0:
                self._interval_s = response.heartbeat_interval_ms / 1000
            if sent_full:
                self._send_full = False
                self.need_rejoin = False
            if sent_owned:
                self._owned_changed = False
            if response.assignment is not None:
                self._target = await self._resolve(response.assignment.topic_partitions)
                self._wake()
            return
        name = ErrorCode(code).name
        log.info("group %r: heartbeat: %s %s", self.group_id, name, response.error_message or "")
        if code in _FENCED:
            self.epoch = 0
            self.generation = -1
            self._send_full = True
            self._target = None
            self.lost = True
            self._wake()
        elif code in _COORDINATOR_ERRORS:
            self.coordinator_dead()
            self._heartbeat_now.set()
        elif code in _FATAL:
            self.fatal = error_for(code, f"group {self.group_id!r}: {response.error_message}")
            self._wake()
        else:  # COORDINATOR_LOAD_IN_PROGRESS and other retriable errors
            await trio.sleep(self._backoff_s)
            self._heartbeat_now.set()

    async def _resolve(self, assigned: list[TopicPartitions]) -> set[TopicPartition]:
        """Topic ids to names, refreshing the metadata for ids not known yet."""
        for _ in range(10):
            cluster = self.metadata.cluster
            names = {tp.topic_id: cluster.topic_named_by_id(tp.topic_id) for tp in assigned}
            if all(names.values()):
                return {
                    TopicPartition(names[tp.topic_id], p)  # type: ignore[arg-type]
                    for tp in assigned
                    for p in tp.partitions
                }
            await self.metadata.wait_for_update()
        unknown = sorted(str(i) for i, n in names.items() if n is None)
        log.warning("group %r: assigned topic ids not in metadata: %s", self.group_id, unknown)
        return {
            TopicPartition(n, p)
            for tp in assigned
            if (n := names[tp.topic_id])
            for p in tp.partitions
        }

    # -- leaving --------------------------------------------------------------------------

    async def leave(self) -> None:
        """A heartbeat with epoch -1 (or -2: a static member, whose partitions wait for it)."""
        if self.epoch <= 0 or self.coordinator is None:
            return
        request = ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=STATIC_LEAVE_EPOCH if self.instance_id is not None else LEAVE_EPOCH,
            instance_id=self.instance_id,
        )
        response = await self.send(request)
        if response.error_code:
            log.info("group %r: leaving: %s", self.group_id, ErrorCode(response.error_code).name)
        self.epoch = 0
        self.generation = -1
        self.stable = False
