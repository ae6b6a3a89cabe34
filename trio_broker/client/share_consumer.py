"""The share consumer (KIP-932): a member of a share group, reading a topic as a queue.

    async with ShareConsumer("127.0.0.1:9092", group_id="jobs") as consumer:
        consumer.subscribe(["jobs"])
        async for record in consumer:
            print(record.offset, record.value, record.delivery_count)

Each record is acquired by this member alone until it is acknowledged or its lock runs
out. With `acknowledgement_mode="implicit"` (the default, as Kafka's) every record handed
out is accepted when the next records are asked for, on `commit()` or when the consumer
closes. With `"explicit"`, the application says what became of each one:

        await consumer.acknowledge(record, "accept")   # or "release" (again later), "reject"
        await consumer.commit()                        # {TopicPartition: error code}

Acknowledgements ride on the next ShareFetch to the partition's leader, or go at once with
ShareAcknowledge on `commit()`. Membership runs in the consumer's nursery: a task
heartbeats the group coordinator (ShareGroupHeartbeat, the member id made here, KIP-1082)
and takes the partitions it is given; fetching happens inside `poll()`/`__anext__`, one
ShareFetch per leader, each in its share session (epoch 0 opens it, each answer moves it on,
-1 closes it when the consumer leaves: the last acknowledgements go with it, and what the
member still holds is released). Records are decoded as the classic consumer decodes them
and kept only inside the acquired ranges; an acquired offset with no record (a control
record, a compacted one) is acknowledged as a gap.
"""

from __future__ import annotations

import contextlib
import logging
import math
import uuid
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import attrs
import trio

from trio_broker.client.config import ConsumerConfig
from trio_broker.client.errors import KafkaConnectionError, RequestTimedOutError
from trio_broker.client.fetcher import decode_records
from trio_broker.client.metadata import ClusterMetadata, find_group_coordinator
from trio_broker.client.network_client import NetworkClient
from trio_broker.client.subscription import TopicPartition
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.share_acknowledge_request import (
    AcknowledgementBatch as AckBatch,
)
from trio_broker.protocol._generated.share_acknowledge_request import (
    AcknowledgePartition,
    AcknowledgeTopic,
    ShareAcknowledgeRequest,
)
from trio_broker.protocol._generated.share_fetch_request import (
    AcknowledgementBatch,
    FetchPartition,
    FetchTopic,
    ForgottenTopic,
    ShareFetchRequest,
)
from trio_broker.protocol._generated.share_group_heartbeat_request import (
    ShareGroupHeartbeatRequest,
)

__all__ = ["ShareConsumer", "ShareRecord"]

log = logging.getLogger(__name__)

GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
ACK_TYPES = {"accept": ACCEPT, "release": RELEASE, "reject": REJECT}
FINAL_EPOCH = -1
_SESSION_ERRORS = (ErrorCode.SHARE_SESSION_NOT_FOUND, ErrorCode.INVALID_SHARE_SESSION_EPOCH)
_REJOIN = (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH)
_COORDINATOR_ERRORS = (
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
)
_CLOSE_GRACE_S = 5.0


class ShareRecord(NamedTuple):
    """One record as a share consumer hands it out: the consumer's fields and how many
    times it has been delivered (1 the first time)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    delivery_count: int


@attrs.define
class _Session:
    """A share session with one broker."""

    epoch: int = 0
    partitions: set[TopicPartition] = attrs.Factory(set)


class ShareConsumer:
    """`async with ShareConsumer(bootstrap_servers, group_id=..., **config)`; see the module
    docstring. Config keys are the consumer's (client_id, fetch_max_bytes, max_poll_records,
    fetch_max_wait_ms, security...)."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "localhost:9092",
        *,
        group_id: str,
        acknowledgement_mode: str = "implicit",
        config: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if acknowledgement_mode not in ("implicit", "explicit"):
            raise ValueError(
                f"acknowledgement_mode must be implicit or explicit, not {acknowledgement_mode!r}"
            )
        self.config = ConsumerConfig.build(
            config, bootstrap_servers=bootstrap_servers, group_id=group_id, **kwargs
        )
        self.group_id = group_id
        self.explicit = acknowledgement_mode == "explicit"
        self.client = NetworkClient(self.config)
        self.metadata = ClusterMetadata(self.client)
        self.member_id = str(uuid.uuid4())
        self.member_epoch = 0
        self.topics: tuple[str, ...] = ()
        self.assignment: set[TopicPartition] = set()
        self._assigned_ids: list[tuple[uuid.UUID, list[int]]] | None = None
        self._coordinator: tuple[str, int] | None = None
        self._interval_s = 1.0
        self._heartbeat_now = trio.Event()
        self._send_subscription = True
        self._sessions: dict[int, _Session] = {}
        # Acknowledgements not sent yet, and records handed out and not acknowledged yet.
        self._pending: dict[TopicPartition, dict[int, int]] = {}
        self._delivered: dict[TopicPartition, set[int]] = {}
        self._results: dict[TopicPartition, int] = {}
        self._buffer: deque[ShareRecord] = deque()
        self._stack: contextlib.AsyncExitStack | None = None
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> ShareConsumer:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(self.client)
            nursery = self.client.nursery
            nursery.start_soon(self.metadata.run)
            nursery.start_soon(self._heartbeat_loop)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, exc_type, exc, tb) -> bool | None:  # noqa: ANN001
        assert self._stack is not None
        try:
            with trio.CancelScope(shield=exc_type is not None) as scope:
                scope.deadline = trio.current_time() + _CLOSE_GRACE_S
                await self._close()
        finally:
            self._closed = True
            stack, self._stack = self._stack, None
            result = await stack.__aexit__(exc_type, exc, tb)
        return result

    async def _close(self) -> None:
        """The last acknowledgements, each session closed, then the group left."""
        self._settle_delivered(ACCEPT if not self.explicit else RELEASE)
        for node, session in list(self._sessions.items()):
            with contextlib.suppress(KafkaConnectionError, RequestTimedOutError, KafkaError):
                await self._acknowledge(node, session, FINAL_EPOCH)
        self._sessions.clear()
        if self._coordinator is not None and self.member_epoch > 0:
            request = ShareGroupHeartbeatRequest(
                group_id=self.group_id, member_id=self.member_id, member_epoch=-1
            )
            with contextlib.suppress(KafkaConnectionError, RequestTimedOutError):
                await self.client.send(self._coordinator, request, 1)

    # -- subscribing -------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        self.topics = tuple(sorted(set(topics)))
        self.metadata.add_topics(self.topics)
        self._send_subscription = True
        self._heartbeat_now.set()

    # -- membership --------------------------------------------------------------------

    async def _find_coordinator(self) -> tuple[str, int]:
        while True:
            node = self.client.least_loaded_node()
            try:
                code, host, port = await find_group_coordinator(self.client, node, self.group_id)
            except (KafkaConnectionError, RequestTimedOutError) as exc:
                log.info("share group %s: no coordinator yet: %s", self.group_id, exc)
                code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            if code == ErrorCode.NONE:
                return host, port
            await trio.sleep(self.config.retry_backoff_ms / 1000)

    async def _heartbeat_loop(self) -> None:
        while True:
            if not self.topics:
                await self._heartbeat_now.wait()
                self._heartbeat_now = trio.Event()
                continue
            if self._coordinator is None:
                self._coordinator = await self._find_coordinator()
            await self._heartbeat()
            with trio.move_on_after(self._interval_s):
                await self._heartbeat_now.wait()
            self._heartbeat_now = trio.Event()

    async def _heartbeat(self) -> None:
        joining = self.member_epoch == 0
        request = ShareGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.member_epoch,
            subscribed_topic_names=list(self.topics)
            if joining or self._send_subscription
            else None,
        )
        assert self._coordinator is not None
        try:
            response = await self.client.send(self._coordinator, request, 1)
        except (KafkaConnectionError, RequestTimedOutError) as exc:
            log.info("share group %s: heartbeat failed: %s", self.group_id, exc)
            self._coordinator = None
            return
        code = response.error_code
        if code in _COORDINATOR_ERRORS:
            self._coordinator = None
            return
        if code in _REJOIN:
            log.info("share group %s: %s, joining again", self.group_id, ErrorCode(code).name)
            self.member_epoch = 0
            self._heartbeat_now.set()
            return
        if code:
            log.warning("share group %s: heartbeat: %s", self.group_id, ErrorCode(code).name)
            await trio.sleep(self.config.retry_backoff_ms / 1000)
            return
        self._send_subscription = False
        self.member_epoch = response.member_epoch
        self._interval_s = max(response.heartbeat_interval_ms, 100) / 1000
        if response.assignment is not None:
            self._assigned_ids = [
                (tp.topic_id, list(tp.partitions)) for tp in response.assignment.topic_partitions
            ]
        self._resolve_assignment()

    def _resolve_assignment(self) -> None:
        if self._assigned_ids is None:
            return
        named: set[TopicPartition] = set()
        for topic_id, partitions in self._assigned_ids:
            name = self._topic_name(topic_id)
            if name is None:
                self.metadata.request_update()
                return
            named.update(TopicPartition(name, p) for p in partitions)
        if named != self.assignment:
            log.info("share group %s: assigned %s", self.group_id, sorted(named))
            self.assignment = named
        self._assigned_ids = None

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        for name, meta in self.metadata.cluster.topics.items():
            if meta.topic_id == topic_id:
                return name
        return None

    def _topic_id(self, topic: str) -> uuid.UUID | None:
        meta = self.metadata.cluster.topics.get(topic)
        return meta.topic_id if meta is not None else None

    # -- consuming -----------------------------------------------------------------------

    def __aiter__(self) -> ShareConsumer:
        return self

    async def __anext__(self) -> ShareRecord:
        while not self._buffer:
            self._buffer.extend(await self.poll(timeout_s=math.inf))
        return self._buffer.popleft()

    async def poll(self, timeout_s: float = 1.0) -> list[ShareRecord]:
        """The next records acquired for this member (waiting up to `timeout_s` for
        some). In implicit mode the records of the previous poll are accepted first."""
        if self._closed:
            raise RuntimeError("the share consumer is closed")
        if not self.explicit:
            self._settle_delivered(ACCEPT)
        deadline = trio.current_time() + timeout_s
        while True:
            self._resolve_assignment()
            records = await self._fetch_once(deadline)
            if records or trio.current_time() >= deadline:
                return records
            if not self.assignment:
                with trio.move_on_at(min(deadline, trio.current_time() + 0.1)):
                    await trio.sleep_forever()

    async def acknowledge(self, record: ShareRecord, kind: str = "accept") -> None:
        """Say what became of a record (explicit mode): "accept", "release" or "reject".
        Sent with the next fetch from its leader, or by `commit()`."""
        ack = ACK_TYPES.get(kind)
        if ack is None:
            raise ValueError(f"acknowledge with accept, release or reject, not {kind!r}")
        tp = TopicPartition(record.topic, record.partition)
        delivered = self._delivered.get(tp)
        if delivered is None or record.offset not in delivered:
            raise KafkaError(
                ErrorCode.INVALID_RECORD_STATE, f"{tp} offset {record.offset} is not held here"
            )
        delivered.discard(record.offset)
        self._pending.setdefault(tp, {})[record.offset] = ack

    async def commit(self) -> dict[TopicPartition, int]:
        """Send every acknowledgement not yet sent (ShareAcknowledge, one per leader) and
        wait for the answers: {partition: error code (0 when done)}."""
        if not self.explicit:
            self._settle_delivered(ACCEPT)
        self._results = {}
        for node, session in list(self._sessions.items()):
            if any(tp in self._pending for tp in session.partitions):
                await self._acknowledge(node, session, session.epoch)
        return dict(self._results)

    def _settle_delivered(self, ack: int) -> None:
        for tp, offsets in self._delivered.items():
            if offsets:
                pending = self._pending.setdefault(tp, {})
                for offset in offsets:
                    pending[offset] = ack
                offsets.clear()

    # -- requests ------------------------------------------------------------------------

    def _batches(self, tp: TopicPartition, cls: type) -> list[Any]:
        """The pending acknowledgements of a partition as the request's batches: runs of
        consecutive offsets, one type per run when they share it."""
        acks = self._pending.pop(tp, None)
        if not acks:
            return []
        out = []
        offsets = sorted(acks)
        start = 0
        for i in range(1, len(offsets) + 1):
            if i == len(offsets) or offsets[i] != offsets[i - 1] + 1:
                run = offsets[start:i]
                types = [acks[o] for o in run]
                if len(set(types)) == 1:
                    types = types[:1]
                out.append(cls(first_offset=run[0], last_offset=run[-1], acknowledge_types=types))
                start = i
        return out

    def _by_leader(self) -> dict[int, set[TopicPartition]]:
        out: dict[int, set[TopicPartition]] = {}
        for tp in self.assignment:
            leader = self.metadata.cluster.leader_for(tp.topic, tp.partition)
            if leader is None:
                self.metadata.request_update()
                continue
            out.setdefault(leader, set()).add(tp)
        return out

    async def _fetch_once(self, deadline: float) -> list[ShareRecord]:
        wanted = self._by_leader()
        for node in set(self._sessions) - set(wanted):
            # A broker no longer leading anything of ours: its session closes.
            session = self._sessions[node]
            with contextlib.suppress(KafkaConnectionError, RequestTimedOutError, KafkaError):
                await self._acknowledge(node, session, FINAL_EPOCH)
            del self._sessions[node]
        if not wanted:
            return []
        records: list[ShareRecord] = []
        remaining_ms = max(int((deadline - trio.current_time()) * 1000), 0)
        wait_ms = min(self.config.fetch_max_wait_ms, remaining_ms)

        async def fetch(node: int, partitions: set[TopicPartition]) -> None:
            records.extend(await self._fetch(node, partitions, wait_ms))

        async with trio.open_nursery() as nursery:
            for node, partitions in wanted.items():
                nursery.start_soon(fetch, node, partitions)
        return records

    async def _fetch(
        self, node: int, partitions: set[TopicPartition], wait_ms: int
    ) -> list[ShareRecord]:
        session = self._sessions.setdefault(node, _Session())
        new = session.epoch == 0
        add = partitions if new else partitions - session.partitions
        forget = set() if new else session.partitions - partitions
        named: dict[uuid.UUID, list[FetchPartition]] = {}
        for tp in sorted(
            add | {tp for tp in session.partitions & partitions if tp in self._pending}
        ):
            topic_id = self._topic_id(tp.topic)
            if topic_id is None:
                continue
            batches = [] if new else self._batches(tp, AcknowledgementBatch)
            named.setdefault(topic_id, []).append(
                FetchPartition(partition_index=tp.partition, acknowledgement_batches=batches)
            )
        forgotten: dict[uuid.UUID, list[int]] = {}
        for tp in forget:
            topic_id = self._topic_id(tp.topic)
            if topic_id is not None:
                forgotten.setdefault(topic_id, []).append(tp.partition)
        request = ShareFetchRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            share_session_epoch=session.epoch,
            max_wait_ms=wait_ms,
            min_bytes=1,
            max_bytes=self.config.fetch_max_bytes,
            max_records=self.config.max_poll_records,
            batch_size=self.config.max_poll_records,
            topics=[FetchTopic(topic_id=t, partitions=ps) for t, ps in named.items()],
            forgotten_topics_data=[
                ForgottenTopic(topic_id=t, partitions=ps) for t, ps in forgotten.items()
            ],
        )
        try:
            response = await self.client.send(node, request, 1)
        except (KafkaConnectionError, RequestTimedOutError) as exc:
            log.info("share fetch from %s failed: %s", node, exc)
            self._sessions.pop(node, None)
            return []
        if response.error_code:
            if response.error_code in _SESSION_ERRORS:
                self._sessions.pop(node, None)  # a new session next time
            else:
                log.warning("share fetch: %s", ErrorCode(response.error_code).name)
            return []
        session.epoch = session.epoch + 1 if session.epoch < 2**31 - 1 else 1
        session.partitions = (session.partitions | add) - forget
        out: list[ShareRecord] = []
        for topic in response.responses:
            name = self._topic_name(topic.topic_id)
            if name is None:
                continue
            for p in topic.partitions:
                tp = TopicPartition(name, p.partition_index)
                if p.acknowledge_error_code:
                    self._results[tp] = p.acknowledge_error_code
                if p.error_code:
                    log.info("share fetch %s: %s", tp, ErrorCode(p.error_code).name)
                    self.metadata.request_update()
                    continue
                out.extend(self._acquired(tp, p.records, p.acquired_records))
        return out

    def _acquired(self, tp: TopicPartition, data: Any, ranges: list[Any]) -> list[ShareRecord]:
        if not ranges:
            return []
        first = min(r.first_offset for r in ranges)
        decoded, _, _ = decode_records(tp, data, first, check_crcs=self.config.check_crcs)
        by_offset = {r.offset: r for r in decoded}
        out: list[ShareRecord] = []
        delivered = self._delivered.setdefault(tp, set())
        gaps = self._pending.setdefault(tp, {})
        for r in sorted(ranges, key=lambda r: r.first_offset):
            for offset in range(r.first_offset, r.last_offset + 1):
                record = by_offset.get(offset)
                if record is None:
                    gaps[offset] = GAP  # acquired, but no record there
                    continue
                delivered.add(offset)
                out.append(ShareRecord(*record, r.delivery_count))
        if not gaps:
            del self._pending[tp]
        return out

    async def _acknowledge(self, node: int, session: _Session, epoch: int) -> None:
        """ShareAcknowledge of the pending acknowledgements of `session`'s partitions."""
        named: dict[uuid.UUID, list[AcknowledgePartition]] = {}
        sent: list[TopicPartition] = []
        for tp in sorted(session.partitions):
            topic_id = self._topic_id(tp.topic)
            batches = self._batches(tp, AckBatch) if topic_id is not None else []
            if batches:
                sent.append(tp)
                named.setdefault(topic_id, []).append(
                    AcknowledgePartition(
                        partition_index=tp.partition, acknowledgement_batches=batches
                    )
                )
        if not named and epoch != FINAL_EPOCH:
            return
        if session.epoch == 0:
            return  # no session opened on that broker yet: nothing of it to acknowledge
        request = ShareAcknowledgeRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            share_session_epoch=epoch,
            topics=[AcknowledgeTopic(topic_id=t, partitions=ps) for t, ps in named.items()],
        )
        response = await self.client.send(node, request, 1)
        if response.error_code:
            for tp in sent:
                self._results[tp] = response.error_code
            if response.error_code in _SESSION_ERRORS:
                self._sessions.pop(node, None)
            return
        if epoch != FINAL_EPOCH:
            session.epoch = session.epoch + 1 if session.epoch < 2**31 - 1 else 1
        for topic in response.responses:
            name = self._topic_name(topic.topic_id)
            for p in topic.partitions:
                if name is not None:
                    self._results[TopicPartition(name, p.partition_index)] = p.error_code
