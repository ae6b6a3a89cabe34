"""The consumer's fetcher (Kafka's Fetcher + FetchSessionHandler + OffsetFetcher), in Trio.

One task, `run()`, looks at the assigned partitions and, for every broker that leads
some fetchable ones and has no fetch in flight, starts one fetch task: so each broker
has a fetch in flight while the user works through the records already buffered
(a partition is fetched again while less than `max.partition.fetch.bytes` of it waits).

Fetches go in incremental fetch sessions (KIP-227): the first request to a broker opens
a session (id 0, epoch 0) with every partition; later ones (epoch 1, 2, ...) name only
the partitions whose fetch offset changed, and `forgotten_topics_data` those no longer
wanted. FETCH_SESSION_ID_NOT_FOUND or INVALID_FETCH_SESSION_EPOCH starts a new session.
Fetch goes at v12 at most: v13+ names topics by id, which the metadata cache does not keep.

Each partition's records are checked (CRC-32C), decompressed and decoded by the
project's record codec. With read_committed, batches of aborted transactions (the
answer's `aborted_transactions`, closed by the producer's ABORT control batch) are
skipped, and control batches are never handed out.
"""

from __future__ import annotations

import functools
import heapq
import logging
import struct
from collections.abc import Awaitable, Callable, Mapping

import attrs
import trio

from trio_broker.client.config import ConsumerConfig
from trio_broker.client.errors import KafkaConnectionError, RequestTimedOutError, error_for
from trio_broker.client.metadata import STALE_METADATA_ERRORS, ClusterMetadata
from trio_broker.client.network_client import NetworkClient
from trio_broker.client.record_reader import read_records
from trio_broker.client.subscription import (
    ConsumerRecord,
    PartitionState,
    SubscriptionState,
    TopicPartition,
)
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.fetch_request import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ForgottenTopic,
)
from trio_broker.protocol._generated.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from trio_broker.protocol.record_codec import iter_records, records_payload
from trio_broker.protocol.records import (
    HEADER_SIZE,
    MAGIC,
    MIN_BATCH_LENGTH,
    compute_crc,
    read_header,
)

__all__ = ["Fetcher", "FetchSession", "decode_records", "list_offsets"]

log = logging.getLogger(__name__)

FETCH_MAX_VERSION = 12  # the last version that names topics (see the module docstring)
EARLIEST = -2
LATEST = -1
_CONTROL_KEY = struct.Struct(">hh")  # version, type (0: ABORT, 1: COMMIT)
_SESSION_ERRORS = (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH)


class OffsetOutOfRangeError(KafkaError):
    def __init__(self, tp: TopicPartition, offset: int) -> None:
        super().__init__(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"OFFSET_OUT_OF_RANGE: {tp.topic}-{tp.partition} at offset {offset} "
            "and auto_offset_reset is 'none'",
        )


def decode_records(
    tp: TopicPartition,
    data: memoryview | bytes | None,
    fetch_offset: int,
    *,
    read_committed: bool = False,
    aborted: list[tuple[int, int]] | None = None,
    check_crcs: bool = True,
) -> tuple[list[ConsumerRecord], int, int]:
    """The records at or after `fetch_offset` in a fetched records blob.

    Returns (records, the next offset to fetch, bytes of whole batches read). A batch
    cut off at the end of the blob (the broker fills up to the size limit) is left for
    the next fetch. `aborted` is the answer's (producer id, first offset) list.
    """
    records: list[ConsumerRecord] = []
    next_offset = fetch_offset
    if not data:
        return records, next_offset, 0
    mv = data if isinstance(data, memoryview) else memoryview(data)
    total = len(mv)
    pos = 0
    heap = sorted((first, pid) for pid, first in (aborted or ()))
    aborting: set[int] = set()
    topic, partition = tp
    while total - pos >= HEADER_SIZE:
        header = read_header(mv, pos)
        if header.batch_length < MIN_BATCH_LENGTH:
            raise error_for(
                ErrorCode.CORRUPT_MESSAGE,
                f"{topic}-{partition}: record batch at offset {header.base_offset} "
                f"claims {header.batch_length} bytes",
            )
        size = header.size
        if pos + size > total:
            break
        batch = mv[pos : pos + size]
        pos += size
        if header.magic != MAGIC:
            raise error_for(
                ErrorCode.CORRUPT_MESSAGE,
                f"{topic}-{partition} offset {header.base_offset}: magic {header.magic} "
                "record batches are not supported",
            )
        if check_crcs and compute_crc(batch) != header.crc:
            raise error_for(
                ErrorCode.CORRUPT_MESSAGE,
                f"{topic}-{partition}: record batch at offset {header.base_offset} "
                "fails its CRC check",
            )
        next_offset = max(next_offset, header.next_offset)
        if header.last_offset < fetch_offset:
            continue
        if read_committed:
            # Producers whose aborted transaction has begun by this batch.
            while heap and heap[0][0] <= header.last_offset:
                aborting.add(heapq.heappop(heap)[1])
            if header.is_control:
                if header.producer_id in aborting and _is_abort_marker(batch):
                    aborting.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborting:
                continue
        if header.is_control:
            continue
        payload = records_payload(batch)
        read_records(
            ConsumerRecord,
            payload.tobytes() if isinstance(payload, memoryview) else payload,
            header.record_count,
            header.base_offset,
            header.base_timestamp,
            header.max_timestamp if header.is_log_append_time else None,
            fetch_offset,
            topic,
            partition,
            1 if header.is_log_append_time else 0,
            records,
        )
    return records, next_offset, pos


def scan_next_offset(tp: TopicPartition, data: memoryview | bytes | None, fetch_offset: int) -> int:
    """The offset after the last whole batch of a fetched records blob (batch headers
    only: the records are decoded later, by `decode_records`)."""
    next_offset = fetch_offset
    if not data:
        return next_offset
    mv = data if isinstance(data, memoryview) else memoryview(data)
    total = len(mv)
    pos = 0
    while total - pos >= HEADER_SIZE:
        header = read_header(mv, pos)
        if header.batch_length < MIN_BATCH_LENGTH:
            raise error_for(
                ErrorCode.CORRUPT_MESSAGE,
                f"{tp[0]}-{tp[1]}: record batch at offset {header.base_offset} "
                f"claims {header.batch_length} bytes",
            )
        pos += header.size
        if pos > total:
            break
        next_offset = max(next_offset, header.next_offset)
    return next_offset


def _is_abort_marker(batch: memoryview) -> bool:
    for record in iter_records(batch):
        key = record.key
        if key is not None and len(key) >= 4:
            return _CONTROL_KEY.unpack_from(key)[1] == 0
    return False


# fetch.max.wait.ms while partitions of the same node wait with buffered records.
BUSY_FETCH_MAX_WAIT_MS = 10


@attrs.define
class FetchSession:
    """The client's half of one broker's fetch session (FetchSessionHandler)."""

    session_id: int = 0
    epoch: int = 0  # 0: the next request opens a new session
    # What the broker's session holds: partition -> (fetch offset, max bytes) as last sent.
    sent: dict[TopicPartition, tuple[int, int]] = attrs.Factory(dict)

    def build(
        self, wanted: Mapping[TopicPartition, tuple[int, int]]
    ) -> tuple[dict[TopicPartition, tuple[int, int]], list[TopicPartition], bool]:
        """(partitions to send, partitions to forget, whether the request is a full one)."""
        if self.session_id == 0 or self.epoch == 0:
            return dict(wanted), [], True
        to_send = {tp: v for tp, v in wanted.items() if self.sent.get(tp) != v}
        forget = [tp for tp in self.sent if tp not in wanted]
        return to_send, forget, False

    def reset(self) -> None:
        self.session_id = 0
        self.epoch = 0
        self.sent.clear()


async def list_offsets(
    client: NetworkClient,
    node: int,
    timestamps: Mapping[TopicPartition, int],
    isolation_level: int = 0,
) -> dict[TopicPartition, tuple[int, int]]:
    """ListOffsets on `node`: per partition (error code, offset)."""
    by_topic: dict[str, list[ListOffsetsPartition]] = {}
    for tp, ts in timestamps.items():
        by_topic.setdefault(tp.topic, []).append(
            ListOffsetsPartition(partition_index=tp.partition, timestamp=ts)
        )
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=[ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
    )
    response = await client.send(node, request)
    result = {}
    for topic in response.topics:
        for p in topic.partitions:
            offset = p.offset
            if not p.error_code and offset < 0 and p.old_style_offsets:
                offset = p.old_style_offsets[0]  # v0
            result[TopicPartition(topic.name, p.partition_index)] = (p.error_code, offset)
    return result


class Fetcher:
    """Fetches for a consumer; see the module docstring. `run()` lives in its nursery."""

    def __init__(
        self,
        client: NetworkClient,
        metadata: ClusterMetadata,
        subscriptions: SubscriptionState,
        config: ConsumerConfig,
        *,
        on_records: Callable[[], None],
        committed: Callable[[list[TopicPartition]], Awaitable[dict]] | None = None,
    ) -> None:
        self.client = client
        self.metadata = metadata
        self.subscriptions = subscriptions
        self.config = config
        self.errors: list[BaseException] = []  # raised to the user by the next getmany
        self.sessions: dict[int, FetchSession] = {}
        self.fetches_sent = 0
        self._on_records = on_records
        self._committed = committed
        self._in_flight: set[int] = set()
        self._wakeup = trio.Event()
        self._backoff_s = config.retry_backoff_ms / 1000

    def wake(self) -> None:
        self._wakeup.set()

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                self._wakeup = trio.Event()
                retry = False
                if self.subscriptions.missing_positions():
                    try:
                        await self.update_positions()
                    except (KafkaConnectionError, RequestTimedOutError) as exc:
                        log.info("cannot look up positions: %s", exc)
                        retry = True
                    except KafkaError as exc:
                        if not exc.retriable:
                            self._fail(exc)
                        retry = True
                    retry = retry or bool(self.subscriptions.missing_positions())
                for node in self._fetchable():
                    if node is None:
                        retry = True
                        self.metadata.request_update()
                    elif node not in self._in_flight:
                        self._in_flight.add(node)
                        nursery.start_soon(self._fetch, node)
                with trio.move_on_after(self._backoff_s if retry else float("inf")):
                    await self._wakeup.wait()

    def _fail(self, error: BaseException) -> None:
        # Raised by the next poll; a failure repeated while nobody polls is kept once.
        if not any(str(e) == str(error) for e in self.errors):
            self.errors.append(error)
        self._on_records()

    def _fetchable(self) -> dict[int | None, dict[TopicPartition, tuple[int, int]]]:
        limit = self.config.max_partition_fetch_bytes
        cluster = self.metadata.cluster
        by_node: dict[int | None, dict[TopicPartition, tuple[int, int]]] = {}
        for tp, state in self.subscriptions.assignment.items():
            if not state.fetchable or state.buffered_bytes >= limit:
                continue
            if len(state.records) >= self.config.max_poll_records:
                continue
            node = cluster.leader_for(tp.topic, tp.partition)
            by_node.setdefault(node, {})[tp] = (state.fetch_offset, limit)  # type: ignore[assignment]
        return by_node

    # -- positions --------------------------------------------------------------------

    async def update_positions(self) -> None:
        """Committed offsets for partitions without a position, then resets via ListOffsets."""
        subs = self.subscriptions
        unknown = [tp for tp, s in subs.assignment.items() if s.position is None and not s.reset]
        if unknown:
            epochs = {tp: subs.assignment[tp].epoch for tp in unknown}
            committed = await self._committed(unknown) if self._committed else {}
            for tp in unknown:
                state = subs.assignment.get(tp)
                if state is None or state.epoch != epochs[tp] or state.position is not None:
                    continue  # revoked or sought meanwhile
                offset = committed.get(tp)
                if offset is not None and offset >= 0:
                    state.seek(offset)
                elif self.config.auto_offset_reset == "none":
                    state.reset = "none"
                    self._fail(
                        error_for(
                            ErrorCode.OFFSET_OUT_OF_RANGE,
                            f"no committed offset for {tp.topic}-{tp.partition} and "
                            "auto_offset_reset is 'none'",
                        )
                    )
                else:
                    state.seek(None, self.config.auto_offset_reset)
        resets = {tp: s for tp, s in subs.assignment.items() if s.reset in ("earliest", "latest")}
        if not resets:
            self._on_records()
            return
        by_node: dict[int, dict[TopicPartition, int]] = {}
        for tp, state in resets.items():
            node = self.metadata.cluster.leader_for(tp.topic, tp.partition)
            if node is None:
                self.metadata.add_topics([tp.topic])
                self.metadata.request_update()
                continue
            ts = EARLIEST if state.reset == "earliest" else LATEST
            by_node.setdefault(node, {})[tp] = ts
        for node, timestamps in by_node.items():
            epochs = {tp: subs.assignment[tp].epoch for tp in timestamps}
            answers = await list_offsets(self.client, node, timestamps, self.config.isolation_level)
            for tp, (code, offset) in answers.items():
                state = subs.assignment.get(tp)
                if state is None or state.epoch != epochs.get(tp):
                    continue
                if code:
                    if code in STALE_METADATA_ERRORS:
                        self.metadata.request_update()
                    continue
                state.seek(offset)
        self.wake()
        self._on_records()  # position() waits for this

    # -- fetching ---------------------------------------------------------------------

    async def _fetch(self, node: int) -> None:
        try:
            if await self._fetch_once(node):
                # A partition error (a stale leader, say): wait for metadata, not in a loop.
                await trio.sleep(self._backoff_s)
        except (KafkaConnectionError, RequestTimedOutError) as exc:
            log.info("fetch from node %s failed: %s", node, exc)
            self.sessions.pop(node, None)
            self.metadata.request_update()
            await trio.sleep(self._backoff_s)
        except KafkaError as exc:
            if exc.retriable:
                await trio.sleep(self._backoff_s)
            else:
                self._fail(exc)
        finally:
            self._in_flight.discard(node)
            self.wake()

    async def _fetch_once(self, node: int) -> bool:
        """One fetch from `node`; True when some partition answered an error."""
        wanted = self._fetchable().get(node, {})
        if not wanted:
            # Nothing to fetch from this node now (its partitions' buffers are full). An
            # empty request would only park in the broker for fetch.max.wait.ms and hold
            # this node's slot while the caller drains the buffers; partitions that left
            # the session are forgotten by the next real request, as Kafka's client does.
            return False
        session = self.sessions.setdefault(node, FetchSession())
        to_send, forget, full = session.build(wanted)
        subs = self.subscriptions
        epochs = {tp: subs.assignment[tp].epoch for tp in wanted}
        offsets = {tp: v[0] for tp, v in wanted.items()}
        topics: dict[str, list[FetchPartition]] = {}
        for tp, (offset, max_bytes) in to_send.items():
            topics.setdefault(tp.topic, []).append(
                FetchPartition(
                    partition=tp.partition, fetch_offset=offset, partition_max_bytes=max_bytes
                )
            )
        forgotten: dict[str, list[int]] = {}
        for tp in forget:
            forgotten.setdefault(tp.topic, []).append(tp.partition)
        cfg = self.config
        version = min(await self.client.api_version(node, FetchRequest.API_KEY), FETCH_MAX_VERSION)
        use_sessions = version >= 7
        # A long poll holds this node's one fetch slot. While other partitions of the node
        # sit out with full buffers, the caller is about to drain them and they will want
        # fetching at once: wait briefly then, and the full fetch.max.wait.ms only when
        # every partition fetched here is caught up and nothing is buffered.
        max_wait_ms = cfg.fetch_max_wait_ms
        if any(state.buffered_bytes and tp not in wanted for tp, state in subs.assignment.items()):
            max_wait_ms = min(max_wait_ms, BUSY_FETCH_MAX_WAIT_MS)
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=max_wait_ms,
            min_bytes=cfg.fetch_min_bytes,
            max_bytes=cfg.fetch_max_bytes,
            isolation_level=cfg.isolation_level,
            session_id=session.session_id if use_sessions and not full else 0,
            session_epoch=(session.epoch if not full else 0) if use_sessions else -1,
            topics=[FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
            forgotten_topics_data=[
                ForgottenTopic(topic=t, partitions=ps) for t, ps in forgotten.items()
            ],
        )
        self.fetches_sent += 1
        timeout = cfg.request_timeout_ms / 1000 + cfg.fetch_max_wait_ms / 1000
        response = await self.client.send(node, request, version, timeout_s=timeout)
        if response.error_code:
            if response.error_code in _SESSION_ERRORS:
                log.info(
                    "fetch session with node %s: %s", node, ErrorCode(response.error_code).name
                )
                session.reset()
                return False
            raise error_for(response.error_code, f"fetch from node {node}")
        if use_sessions and response.session_id:
            if full:
                session.sent = dict(wanted)
            else:
                for tp in forget:
                    session.sent.pop(tp, None)
                session.sent.update(to_send)
            session.session_id = response.session_id
            session.epoch = session.epoch % 0x7FFFFFFF + 1
        else:
            session.reset()
        got = errors = False
        for topic in response.responses:
            for p in topic.partitions:
                errors |= p.error_code != 0
                tp = TopicPartition(topic.topic, p.partition_index)
                state = subs.assignment.get(tp)
                if state is None or state.epoch != epochs.get(tp):
                    continue  # revoked, or sought while the fetch was out
                got |= self._apply(tp, state, p, offsets[tp], session)
        if got:
            self._on_records()
        return errors

    def _apply(
        self,
        tp: TopicPartition,
        state: PartitionState,
        p,  # noqa: ANN001 - fetch_response.PartitionData
        fetch_offset: int,
        session: FetchSession,
    ) -> bool:
        code = p.error_code
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            session.sent.pop(tp, None)
            if self.config.auto_offset_reset == "none":
                self._fail(OffsetOutOfRangeError(tp, fetch_offset))
                state.reset = "none"
            else:
                log.info("%s-%s: offset %s out of range, resetting to %s", tp.topic,
                         tp.partition, fetch_offset, self.config.auto_offset_reset)  # fmt: skip
                state.seek(None, self.config.auto_offset_reset)
            return False
        if code in STALE_METADATA_ERRORS:
            session.sent.pop(tp, None)
            self.metadata.request_update()
            return False
        if code:
            error = error_for(code, f"fetching {tp.topic}-{tp.partition}")
            if not error.retriable:
                self._fail(error)
            return False
        state.high_watermark = p.high_watermark
        state.last_stable_offset = p.last_stable_offset
        state.log_start_offset = p.log_start_offset
        if state.fetch_offset != fetch_offset:
            return False
        data = p.records
        next_offset = scan_next_offset(tp, data, fetch_offset)
        if next_offset == fetch_offset:
            return False
        aborted = None
        if p.aborted_transactions:
            aborted = [(a.producer_id, a.first_offset) for a in p.aborted_transactions]
        # Decoded later, by the consumer, when the user reaches these records: the next
        # fetch goes out now (Kafka's CompletedFetch; see PartitionState.fill).
        decode = functools.partial(
            decode_records,
            tp,
            data,
            fetch_offset,
            read_committed=self.config.isolation_level == 1,
            aborted=aborted,
            check_crcs=self.config.check_crcs,
        )
        state.fetch_offset = next_offset
        state.pending.append((decode, next_offset, len(data)))
        state.pending_bytes += len(data)
        state.buffered_bytes += len(data)
        return True
