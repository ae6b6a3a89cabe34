"""The consumer, first part: manual assignment and a pipelined fetcher (no groups yet).

    async with Consumer("127.0.0.1:9092", auto_offset_reset="earliest") as consumer:
        consumer.assign([("events", 0), ("events", 1)])
        async for record in consumer:
            print(record.topic, record.partition, record.offset, record.key, record.value)

The fetcher task keeps one Fetch request in flight per leader and sends the next as soon
as an answer arrives, while fetched records wait in a bounded buffer for the caller
(`fetch_buffer_bytes`); positions unknown at first are reset by ListOffsets with
`auto_offset_reset` (earliest, latest, or none: an error naming OFFSET_OUT_OF_RANGE).
Records come from magic-2 batches in every codec; control batches are skipped.
Group membership (subscribe, commits, assignors) is not built yet.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import attrs
import trio

from trio_broker.client.config import ClientConfig
from trio_broker.client.errors import KafkaError, error_for
from trio_broker.client.metadata import STALE_METADATA_ERRORS, ClusterMetadata
from trio_broker.client.network_client import NetworkClient
from trio_broker.errors import ErrorCode
from trio_broker.protocol.record_codec import iter_records
from trio_broker.protocol.records import iter_batches

__all__ = ["Consumer", "ConsumerConfig", "ConsumerRecord"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_FETCH_MAX_VERSION = 12  # v13+ names topics by id only
_EARLIEST, _LATEST = -2, -1


def _reset(value: str) -> str:
    if value not in ("earliest", "latest", "none"):
        raise ValueError(f"auto_offset_reset must be earliest, latest or none, not {value!r}")
    return value


@attrs.frozen(kw_only=True)
class ConsumerConfig(ClientConfig):
    client_id: str = "trio-broker-consumer"
    auto_offset_reset: str = attrs.field(converter=_reset, default="latest")
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52_428_800
    fetch_max_wait_ms: int = 500
    max_partition_fetch_bytes: int = 1_048_576
    isolation_level: str = "read_uncommitted"
    # Fetched bytes the consumer holds for the caller before it stops fetching.
    fetch_buffer_bytes: int = 64 * 1024 * 1024


class ConsumerRecord(NamedTuple):
    """One consumed record. A named tuple rather than an attrs class: records are built by
    the hundred thousand per second, and a tuple is a quarter of a frozen instance's cost
    (the reason records.BatchHeader is one too)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class _RawChunk(NamedTuple):
    """Fetched record batches of one partition, not decoded yet."""

    tp: TopicPartition
    data: memoryview
    position: int


class Consumer:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "localhost:9092",
        *,
        config: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.config = ConsumerConfig.build(config, bootstrap_servers=bootstrap_servers, **kwargs)
        self.client = NetworkClient(self.config)
        self.metadata = ClusterMetadata(self.client)
        self._positions: dict[TopicPartition, int | None] = {}
        self._ready: deque[list[ConsumerRecord] | _RawChunk] = deque()
        self._ready_bytes: deque[int] = deque()  # the fetched bytes each chunk came from
        self._buffered_bytes = 0
        self._data = trio.Event()  # set when records arrive
        self._room = trio.Event()  # set when the caller takes records
        self._changed = trio.Event()  # set on assign/seek
        self._error: BaseException | None = None
        self._epoch = 0  # bumped by assign/seek: answers to older fetches are dropped

    async def __aenter__(self) -> Consumer:
        await self.client.__aenter__()
        self.client.nursery.start_soon(self.metadata.run)
        self.client.nursery.start_soon(self._fetch_loop)
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self.client.__aexit__(*exc_info)

    # -- assignment and positions ---------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions, from their reset position unless `seek`ed."""
        wanted = [(t, int(p)) for t, p in partitions]
        self._positions = {tp: self._positions.get(tp) for tp in wanted}
        self.metadata.add_topics({t for t, _ in wanted})
        self._flush_buffer()

    def assignment(self) -> list[TopicPartition]:
        return list(self._positions)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        if (topic, partition) not in self._positions:
            raise ValueError(f"{topic}-{partition} is not assigned")
        self._positions[(topic, partition)] = offset
        self._flush_buffer()

    def position(self, topic: str, partition: int) -> int | None:
        return self._positions[(topic, partition)]

    def _flush_buffer(self) -> None:
        self._epoch += 1
        self._ready.clear()
        self._ready_bytes.clear()
        self._buffered_bytes = 0
        self._room.set()
        self._changed.set()

    # -- reading --------------------------------------------------------------------------

    async def getmany(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched so far (waiting up to `timeout_ms` for some), by partition."""
        deadline = trio.current_time() + timeout_ms / 1000
        while True:
            if not self._ready and self._error is None and trio.current_time() < deadline:
                with trio.move_on_at(deadline):
                    while not self._ready and self._error is None:
                        await self._data.wait()
            else:
                await trio.lowlevel.checkpoint()
            self._raise_error()
            out = self._take(max_records)
            if out or trio.current_time() >= deadline:
                return out

    def _take(self, max_records: int | None) -> dict[TopicPartition, list[ConsumerRecord]]:
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        taken = 0
        ready = self._ready
        try:
            while ready and (max_records is None or taken < max_records):
                chunk = ready[0]
                if type(chunk) is _RawChunk:
                    # Decoded here, in the caller's task: the fetcher has long sent the
                    # next Fetch, so decoding overlaps the broker's work.
                    try:
                        chunk = ready[0] = self._decode(chunk.tp, chunk.data, chunk.position)[0]
                    except (KafkaError, IndexError) as exc:
                        ready.popleft()
                        self._buffered_bytes -= self._ready_bytes.popleft()
                        if isinstance(exc, KafkaError):
                            raise
                        raise error_for(
                            ErrorCode.CORRUPT_MESSAGE, f"records of {chunk.tp[0]}-{chunk.tp[1]}"
                        ) from None
                room = len(chunk) if max_records is None else max_records - taken
                nbytes = self._ready_bytes[0]
                if room < len(chunk):
                    part = chunk[:room]
                    ready[0] = chunk[room:]
                    share = nbytes * room // len(chunk)
                    self._ready_bytes[0] = nbytes - share
                    nbytes = share
                else:
                    part = chunk
                    ready.popleft()
                    self._ready_bytes.popleft()
                self._buffered_bytes -= nbytes
                if part:
                    first = part[0]
                    out.setdefault((first.topic, first.partition), []).extend(part)
                    taken += len(part)
        finally:
            if not ready:
                self._data = trio.Event()
            self._room.set()
        return out

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        while True:
            batch = await self.getmany(timeout_ms=3_600_000, max_records=1)
            for records in batch.values():
                return records[0]

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    # -- the fetcher ------------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        async with trio.open_nursery() as nursery:
            fetching: set[int] = set()
            while True:
                self._changed = trio.Event()
                await self._reset_positions()
                cluster = self.metadata.cluster
                by_leader: dict[int, list[TopicPartition]] = {}
                unknown = False
                for tp, position in self._positions.items():
                    leader = cluster.leader_for(*tp)
                    if leader is None:
                        unknown = True
                    elif position is not None:
                        by_leader.setdefault(leader, []).append(tp)
                if unknown:
                    self.metadata.request_update()
                full = self._buffered_bytes >= self.config.fetch_buffer_bytes
                for leader, tps in by_leader.items():
                    if leader not in fetching and not full:
                        fetching.add(leader)
                        nursery.start_soon(self._fetch_one, leader, tps, fetching)
                if full:
                    self._room = trio.Event()
                with trio.move_on_after(0.1 if unknown else 1.0):
                    await self._wait_any(self._changed, self._room)

    async def _wait_any(self, *events: trio.Event) -> None:
        async with trio.open_nursery() as nursery:
            for event in events:

                async def wait(event: trio.Event = event) -> None:
                    await event.wait()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(wait)

    async def _fetch_one(self, leader: int, tps: list[TopicPartition], fetching: set[int]) -> None:
        from trio_broker.protocol._generated.fetch_request import (
            FetchPartition,
            FetchRequest,
            FetchTopic,
        )

        cfg = self.config
        epoch = self._epoch
        try:
            topics: dict[str, list] = {}
            for topic, partition in tps:
                topics.setdefault(topic, []).append(
                    FetchPartition(
                        partition=partition,
                        fetch_offset=self._positions[(topic, partition)],
                        partition_max_bytes=cfg.max_partition_fetch_bytes,
                    )
                )
            request = FetchRequest(
                replica_id=-1,
                max_wait_ms=cfg.fetch_max_wait_ms,
                min_bytes=cfg.fetch_min_bytes,
                max_bytes=cfg.fetch_max_bytes,
                isolation_level=1 if cfg.isolation_level == "read_committed" else 0,
                topics=[FetchTopic(topic=t, partitions=p) for t, p in topics.items()],
            )
            version = min(
                await self.client.api_version(leader, FetchRequest.API_KEY), _FETCH_MAX_VERSION
            )
            timeout = (cfg.request_timeout_ms + cfg.fetch_max_wait_ms) / 1000
            response = await self.client.send(leader, request, version, timeout_s=timeout)
            if epoch == self._epoch:
                self._handle_fetch(response)
        except KafkaError as exc:
            log.info("fetch from node %s failed: %s", leader, exc)
            self.metadata.request_update()
            await trio.sleep(self.config.retry_backoff_ms / 1000)
        finally:
            fetching.discard(leader)
            self._changed.set()

    def _handle_fetch(self, response: Any) -> None:
        if response.error_code:
            raise error_for(response.error_code, "fetch")
        for topic in response.responses:
            for part in topic.partitions:
                tp = (topic.topic, part.partition_index)
                position = self._positions.get(tp)
                if position is None:
                    continue
                code = part.error_code
                if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    self._positions[tp] = None  # reset by auto_offset_reset
                    continue
                if code in STALE_METADATA_ERRORS:
                    self.metadata.request_update()
                    continue
                if code:
                    self._error = error_for(code, f"fetch {tp[0]}-{tp[1]}")
                    self._data.set()
                    continue
                data = part.records
                next_offset = position
                if data is not None:
                    # Only the batch headers now, for the next position; records later.
                    for _pos, header in iter_batches(data):
                        next_offset = max(next_offset, header.next_offset)
                if next_offset > position:
                    nbytes = len(data)
                    self._ready.append(_RawChunk(tp, data, position))
                    self._ready_bytes.append(nbytes)
                    self._buffered_bytes += nbytes
                    self._data.set()
                self._positions[tp] = next_offset

    @staticmethod
    def _decode(  # raises KafkaError(CORRUPT_MESSAGE) or InvalidRecords on bad bytes
        tp: TopicPartition, data: memoryview | None, position: int
    ) -> tuple[list[ConsumerRecord], int]:
        topic, partition = tp
        out: list[ConsumerRecord] = []
        if data is None:
            return out, position
        for pos, header in iter_batches(data):
            if header.next_offset <= position:
                continue
            if not header.is_control:
                batch = data[pos : pos + header.size]
                if header.compression or header.is_log_append_time or header.record_count > 4096:
                    # The general decoder: codecs, LogAppendTime, odd batches.
                    out += [
                        ConsumerRecord(
                            topic, partition, r.offset, r.timestamp, r.key, r.value, r.headers
                        )
                        for r in iter_records(batch)
                        if r.offset >= position
                    ]
                else:
                    _decode_plain(topic, partition, header, batch, position, out)
            position = max(position, header.next_offset)
        return out, position

    async def _reset_positions(self) -> None:
        missing = [tp for tp, pos in self._positions.items() if pos is None]
        if not missing:
            return
        policy = self.config.auto_offset_reset
        if policy == "none":
            self._error = error_for(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"no position for {missing} and auto_offset_reset=none",
            )
            self._data.set()
            for tp in missing:
                del self._positions[tp]
            return
        from trio_broker.client.admin import list_offsets

        try:
            offsets = await list_offsets(
                self.client, self.metadata, missing, _EARLIEST if policy == "earliest" else _LATEST
            )
        except KafkaError as exc:
            log.info("cannot reset positions of %s: %s", missing, exc)
            await trio.sleep(self.config.retry_backoff_ms / 1000)
            return
        for tp, offset in offsets.items():
            if tp in self._positions and self._positions[tp] is None:
                self._positions[tp] = offset


def _decode_plain(
    topic: str,
    partition: int,
    header: Any,
    batch: memoryview,
    position: int,
    out: list[ConsumerRecord],
) -> None:
    """Records of an uncompressed CreateTime batch, decoded straight into ConsumerRecords
    (the hot path of a consumer; `record_codec.iter_records` is the reference)."""
    data = batch[61:].tobytes()
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    pos = 0
    limit = len(data)
    append = out.append
    new = tuple.__new__  # ConsumerRecord without the namedtuple's Python-level __new__
    cls = ConsumerRecord
    for _ in range(header.record_count):
        if pos >= limit:
            raise error_for(ErrorCode.CORRUPT_MESSAGE, f"records of {topic}-{partition} cut short")
        length, pos = _varint(data, pos)
        end = pos + length
        pos += 1  # attributes
        # One-byte varints (small deltas, a null key, no headers) are read inline.
        b = data[pos]
        if b < 0x80:
            ts_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            ts_delta, pos = _varint(data, pos)
        b = data[pos]
        if b < 0x80:
            off_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            off_delta, pos = _varint(data, pos)
        if data[pos] == 1:  # zigzag(-1): a null key
            key = None
            pos += 1
        else:
            n, pos = _varint(data, pos)
            key = data[pos : pos + n]
            pos += n
        n, pos = _varint(data, pos)
        if n >= 0:
            value = data[pos : pos + n]
            pos += n
        else:
            value = None
        headers: tuple = ()
        if data[pos] == 0:
            pos += 1
        else:
            count, pos = _varint(data, pos)
            items = []
            for _ in range(count):
                n, pos = _varint(data, pos)
                hkey = data[pos : pos + n].decode("utf-8", "surrogateescape")
                pos += n
                n, pos = _varint(data, pos)
                if n >= 0:
                    items.append((hkey, data[pos : pos + n]))
                    pos += n
                else:
                    items.append((hkey, None))
            headers = tuple(items)
        if pos != end:
            raise error_for(ErrorCode.CORRUPT_MESSAGE, f"bad record size in {topic}-{partition}")
        offset = base_offset + off_delta
        if offset >= position:
            append(
                new(cls, (topic, partition, offset, base_timestamp + ts_delta, key, value, headers))
            )


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    n = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = data[pos]
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return (n >> 1) ^ -(n & 1), pos + 1
        shift += 7
