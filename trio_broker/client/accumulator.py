"""RecordAccumulator: per-partition batches, built in place in BufferPool buffers.

Records are appended to the last open batch of their partition's deque; a batch is a
magic-2 record batch whose records are written straight into its pooled buffer after
61 bytes left for the header. A batch is ready to send when it is full (a newer one
exists behind it), when `linger.ms` has passed since it was opened, or when someone
waits for memory or flushes. The sender drains ready batches per broker, one per
partition and up to `max.request.size` per request, and only then is the header written:
producer id, epoch and base sequence are known at drain time, the records are compressed
(back into the same buffer), and the CRC computed once.

A retried batch keeps its bytes and sequence, goes back to the front of its deque in
sequence order, and (with idempotence) waits until nothing else of its partition is in
flight, so the broker sees the partition's sequences in order.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable, Sequence

import trio

from trio_broker.client.buffer_pool import BufferPool
from trio_broker.protocol import compression as _codecs
from trio_broker.protocol import crc
from trio_broker.protocol.records import CRC_OFFSET, CRC_START, HEADER, HEADER_SIZE, LOG_OVERHEAD

__all__ = ["ProducerBatch", "RecordAccumulator", "record_size"]

_UINT32 = struct.Struct(">I")
_INT32 = struct.Struct(">i")
_BASE_SEQUENCE_OFFSET = 53  # baseSequence in the 61-byte batch header
_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_LZ4 = 3
TopicPartition = tuple[str, int]
Header = tuple[str, bytes | None]


def _zigzag_bytes(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Unsigned varints of zigzagged values 0..2**14: every record's lengths and deltas come
# from this table, so the hot path never loops to encode a small number.
_VARINT = [_zigzag_bytes(n) for n in range(1 << 14)]
_NULL = _VARINT[1]  # zigzag(-1)
_ZERO_ATTRIBUTES = b"\x00"


def _varint(value: int) -> bytes:
    """Zigzag varint of a signed 64-bit value."""
    n = (value << 1) ^ (value >> 63)
    return _VARINT[n] if n < 16384 else _zigzag_bytes(n)


def _encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] | None,
) -> bytes:
    varint = _VARINT
    if not headers and key is None and value is not None and 0 <= timestamp_delta < 8192:
        # The common record (no key, no headers), sized and joined in one step.
        n = len(value)
        ts = varint[timestamp_delta << 1]
        off = varint[offset_delta << 1] if offset_delta < 8192 else _varint(offset_delta)
        vlen = varint[n << 1] if n < 8192 else _varint(n)
        size = 3 + len(ts) + len(off) + len(vlen) + n  # attributes, null key, header count
        return b"".join(
            (
                varint[size << 1] if size < 8192 else _varint(size),
                _ZERO_ATTRIBUTES,
                ts,
                off,
                _NULL,
                vlen,
                value,
                _ZERO_ATTRIBUTES,
            )
        )
    parts = [
        _ZERO_ATTRIBUTES,
        varint[timestamp_delta << 1] if 0 <= timestamp_delta < 8192 else _varint(timestamp_delta),
        varint[offset_delta << 1] if offset_delta < 8192 else _varint(offset_delta),
    ]
    if key is None:
        parts.append(_NULL)
    else:
        n = len(key)
        parts.append(varint[n << 1] if n < 8192 else _varint(n))
        parts.append(key)
    if value is None:
        parts.append(_NULL)
    else:
        n = len(value)
        parts.append(varint[n << 1] if n < 8192 else _varint(n))
        parts.append(value)
    if headers:
        parts.append(_varint(len(headers)))
        for hkey, hvalue in headers:
            raw = hkey.encode("utf-8", "surrogateescape") if isinstance(hkey, str) else hkey
            parts.append(_varint(len(raw)))
            parts.append(raw)
            if hvalue is None:
                parts.append(_NULL)
            else:
                parts.append(_varint(len(hvalue)))
                parts.append(hvalue)
    else:
        parts.append(_VARINT[0])
    body = b"".join(parts)
    n = len(body)
    return (varint[n << 1] if n < 8192 else _varint(n)) + body


def record_size(key: bytes | None, value: bytes | None, headers: Sequence[Header] | None) -> int:
    """An upper bound of one record's encoded size (for sizing a batch's buffer)."""
    size = 1 + 10 + 5 + 5 + 5 + 5 + 5  # attributes, deltas, lengths, header count, length
    size += len(key or b"") + len(value or b"")
    for hkey, hvalue in headers or ():
        size += 10 + len(hkey.encode() if isinstance(hkey, str) else hkey) + len(hvalue or b"")
    return size


class ProducerBatch:
    """One batch for one partition; its buffer comes from the pool and goes back to it."""

    __slots__ = (
        "attempts",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "buffer",
        "closed",
        "created",
        "done",
        "error",
        "finished",
        "last_attempt",
        "log_append_time",
        "max_timestamp",
        "partition",
        "payload",
        "pos",
        "record_count",
        "resequenced",
        "size",
        "topic",
        "waiters",
    )

    def __init__(self, topic: str, partition: int, buffer: bytearray, now: float) -> None:
        self.topic = topic
        self.partition = partition
        self.buffer = buffer
        self.pos = HEADER_SIZE
        self.record_count = 0
        self.base_timestamp = 0
        self.max_timestamp = -1
        self.created = now
        self.last_attempt = now
        self.attempts = 0
        self.closed = False
        self.finished = False
        self.base_sequence: int | None = None
        self.payload: memoryview | bytes | None = None  # the finished batch, once drained
        self.size = 0
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self.done: trio.Event | None = None
        self.waiters = 0
        self.resequenced = False  # its sequence moved down after an earlier batch failed

    def __repr__(self) -> str:
        return (
            f"<ProducerBatch {self.topic}-{self.partition} records={self.record_count} "
            f"seq={self.base_sequence} attempts={self.attempts}>"
        )

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)

    def try_append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] | None,
    ) -> int | None:
        """Write the record into the buffer; its index in the batch, or None if full."""
        count = self.record_count
        if count == 0:
            self.base_timestamp = timestamp
        delta = timestamp - self.base_timestamp
        if key is None and not headers and value is not None and 0 <= delta < 8192 and count < 8192:
            # _encode_record's common case, inlined: this runs once per record.
            varint = _VARINT
            n = len(value)
            ts = varint[delta << 1]
            off = varint[count << 1]
            vlen = varint[n << 1] if n < 8192 else _varint(n)
            size = 3 + len(ts) + len(off) + len(vlen) + n
            record = b"".join(
                (
                    varint[size << 1] if size < 8192 else _varint(size),
                    _ZERO_ATTRIBUTES,
                    ts,
                    off,
                    _NULL,
                    vlen,
                    value,
                    _ZERO_ATTRIBUTES,
                )
            )
        else:
            record = _encode_record(count, delta, key, value, headers)
        pos = self.pos
        end = pos + len(record)
        if end > len(self.buffer) or self.closed:
            if count == 0:
                raise AssertionError("a new batch must hold its first record")
            self.closed = True
            return None
        self.buffer[pos:end] = record
        self.pos = end
        self.record_count = count + 1
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        return count

    def finalize(self, codec: int, producer_id: int, producer_epoch: int) -> None:
        """Write the header (and compress) once, when first drained; retries resend it."""
        if self.payload is not None:
            return
        self.closed = True
        buffer = self.buffer
        size = self.pos
        target: bytearray | bytes = buffer
        if codec:
            records = memoryview(buffer)[HEADER_SIZE:size]
            if codec == _LZ4:  # cramjam's lz4 Compressor takes bytes only
                records = records.tobytes()
            compressed = _codecs.compress(codec, records)
            size = HEADER_SIZE + len(compressed)
            if size <= len(buffer):
                buffer[HEADER_SIZE:size] = compressed  # back into the pooled buffer
            else:
                # Incompressible and larger than the buffer: one extra copy, rare.
                target = bytearray(size)
                target[HEADER_SIZE:] = compressed
        HEADER.pack_into(
            target,
            0,
            0,
            size - LOG_OVERHEAD,
            -1,
            2,
            0,
            codec,
            self.record_count - 1,
            self.base_timestamp,
            self.max_timestamp,
            producer_id,
            producer_epoch,
            -1 if self.base_sequence is None else self.base_sequence,
            self.record_count,
        )
        view = memoryview(target)
        _UINT32.pack_into(target, CRC_OFFSET, crc.crc32c(view[CRC_START:size]))
        self.payload = view[:size]
        self.size = size

    def set_base_sequence(self, sequence: int) -> None:
        """Renumber the batch (an earlier one failed for good); rewrites header and CRC."""
        self.base_sequence = sequence
        payload = self.payload
        if payload is not None:
            _INT32.pack_into(payload, _BASE_SEQUENCE_OFFSET, sequence)
            _UINT32.pack_into(payload, CRC_OFFSET, crc.crc32c(payload[CRC_START:]))

    def complete(self, base_offset: int, log_append_time: int) -> None:
        if self.finished:
            return
        self.finished = True
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        if self.done is not None:
            self.done.set()

    def fail(self, error: BaseException) -> None:
        if self.finished:
            return
        self.finished = True
        self.error = error
        if self.done is not None:
            self.done.set()

    async def wait(self) -> None:
        if not self.finished:
            if self.done is None:
                self.done = trio.Event()
            await self.done.wait()


class RecordAccumulator:
    def __init__(
        self,
        pool: BufferPool,
        *,
        batch_size: int,
        linger_ms: int,
        compression_type: str,
        retry_backoff_ms: int,
        max_block_ms: int,
        idempotent: bool,
    ) -> None:
        self.pool = pool
        self.batch_size = batch_size
        self.linger_s = linger_ms / 1000
        self.codec = _CODECS[compression_type]
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.max_block_s = max_block_ms / 1000
        self.idempotent = idempotent
        self.batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.incomplete: set[ProducerBatch] = set()
        self.in_flight: dict[TopicPartition, int] = {}
        self.next_sequence: dict[TopicPartition, int] = {}
        self.flushes_in_progress = 0
        self.closing = False
        self._wake_sender = lambda: None
        self._drain_start = 0

    def set_wakeup(self, callback) -> None:  # noqa: ANN001 - a plain callable
        self._wake_sender = callback

    # -- appending -----------------------------------------------------------------------

    def try_append(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] | None,
    ) -> tuple[ProducerBatch, int] | None:
        """Append to the partition's open batch without waiting; None if it needs a new one."""
        dq = self.batches.get((topic, partition))
        if dq:
            batch = dq[-1]
            if not batch.closed:
                index = batch.try_append(timestamp, key, value, headers)
                if index is not None:
                    return batch, index
                self._wake_sender()  # that batch is full: it is ready
        return None

    async def append(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] | None,
    ) -> tuple[ProducerBatch, int]:
        """Append a record, opening a new batch (waiting for its memory) if needed."""
        appended = self.try_append(topic, partition, timestamp, key, value, headers)
        if appended is not None:
            return appended
        size = max(self.batch_size, HEADER_SIZE + record_size(key, value, headers))
        buffer = self.pool.try_allocate(size)
        if buffer is None:
            self._wake_sender()  # someone waits for memory: everything is ready to go
            buffer = await self.pool.allocate(size, self.max_block_s)
            # Another task may have opened a batch while this one waited.
            appended = self.try_append(topic, partition, timestamp, key, value, headers)
            if appended is not None:
                self.pool.deallocate(buffer)
                return appended
        else:
            # One checkpoint per batch, not per record: the sender gets to run while a
            # producer loop fills batches without ever blocking.
            try:
                await trio.lowlevel.checkpoint()
            except BaseException:
                self.pool.deallocate(buffer)
                raise
            appended = self.try_append(topic, partition, timestamp, key, value, headers)
            if appended is not None:
                self.pool.deallocate(buffer)
                return appended
        batch = ProducerBatch(topic, partition, buffer, trio.current_time())
        index = batch.try_append(timestamp, key, value, headers)
        assert index == 0
        dq = self.batches.get((topic, partition))
        if dq is None:
            dq = self.batches[(topic, partition)] = deque()
        if dq:
            dq[-1].closed = True
        dq.append(batch)
        self.incomplete.add(batch)
        self._wake_sender()
        return batch, index

    # -- the sender's side -----------------------------------------------------------------

    def ready(self, leader_of, now: float) -> tuple[set[int], float, set[str]]:
        """Nodes with a batch to send, seconds until the next might be ready, topics
        whose leader is unknown (`leader_of(topic, partition)` gives a node id or None)."""
        ready: set[int] = set()
        unknown: set[str] = set()
        next_delay = 3600.0
        exhausted = self.pool.queued > 0
        forced = exhausted or self.closing or self.flushes_in_progress > 0
        for (topic, partition), dq in self.batches.items():
            if not dq:
                continue
            leader = leader_of(topic, partition)
            if leader is None:
                unknown.add(topic)
                continue
            if leader in ready:
                continue
            batch = dq[0]
            if not self._drainable((topic, partition), batch):
                continue
            if batch.attempts and now < batch.last_attempt + self.retry_backoff_s:
                next_delay = min(next_delay, batch.last_attempt + self.retry_backoff_s - now)
                continue
            waited = now - batch.created
            if forced or len(dq) > 1 or batch.closed or waited >= self.linger_s:
                ready.add(leader)
            else:
                next_delay = min(next_delay, self.linger_s - waited)
        return ready, next_delay, unknown

    def _drainable(self, tp: TopicPartition, batch: ProducerBatch) -> bool:
        # A retried batch goes alone: nothing else of its partition may be in flight,
        # so sequences reach the broker in order (Kafka's Sender does the same).
        return not (self.idempotent and batch.base_sequence is not None and self.in_flight.get(tp))

    def drain(
        self,
        leader_of,
        nodes: Iterable[int],
        max_request_size: int,
        now: float,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> dict[int, list[ProducerBatch]]:
        """Take the first batch of each partition led by `nodes`, up to max.request.size
        per node; the taken batches are finalized (header, sequence, compression, CRC)."""
        nodes = set(nodes)
        out: dict[int, list[ProducerBatch]] = {}
        sizes: dict[int, int] = {}
        items = list(self.batches.items())
        if not items:
            return out
        # Start where the last drain stopped, so no partition starves behind others.
        start = self._drain_start % len(items)
        self._drain_start += 1
        for (topic, partition), dq in items[start:] + items[:start]:
            if not dq:
                continue
            leader = leader_of(topic, partition)
            if leader not in nodes:
                continue
            batch = dq[0]
            tp = (topic, partition)
            if not self._drainable(tp, batch):
                continue
            if batch.attempts and now < batch.last_attempt + self.retry_backoff_s:
                continue
            if self.idempotent and batch.base_sequence is None:
                seq = self.next_sequence.get(tp, 0)
                batch.base_sequence = seq
                self.next_sequence[tp] = (seq + batch.record_count) & 0x7FFFFFFF
            batch.finalize(self.codec, producer_id, producer_epoch)
            used = sizes.get(leader, 0)
            if used and used + batch.size > max_request_size:
                continue
            sizes[leader] = used + batch.size
            dq.popleft()
            batch.attempts += 1
            batch.last_attempt = now
            self.in_flight[tp] = self.in_flight.get(tp, 0) + 1
            out.setdefault(leader, []).append(batch)
        return out

    def sent_done(self, batch: ProducerBatch) -> None:
        """The request carrying `batch` is answered (or failed): one fewer in flight."""
        tp = batch.topic_partition
        left = self.in_flight.get(tp, 1) - 1
        if left:
            self.in_flight[tp] = left
        else:
            self.in_flight.pop(tp, None)

    def reenqueue(self, batch: ProducerBatch, now: float) -> None:
        """Put a batch to retry back at the front of its deque, in sequence order."""
        batch.last_attempt = now
        dq = self.batches.setdefault(batch.topic_partition, deque())
        if batch.base_sequence is None:
            dq.appendleft(batch)
            return
        index = 0
        for index, other in enumerate(dq):  # noqa: B007 - the index is the answer
            if other.base_sequence is None or other.base_sequence > batch.base_sequence:
                break
        else:
            index = len(dq)
        dq.insert(index, batch)

    def complete(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        batch.complete(base_offset, log_append_time)
        self._release(batch)

    def fail(self, batch: ProducerBatch, error: BaseException) -> None:
        batch.fail(error)
        self._release(batch)

    def _release(self, batch: ProducerBatch) -> None:
        batch.closed = True  # nothing may be appended to a finished batch
        if batch in self.incomplete:
            self.incomplete.discard(batch)
            buffer = batch.buffer
            batch.buffer = bytearray()
            batch.payload = None
            self.pool.deallocate(buffer)

    def resequence_after_failure(self, failed: ProducerBatch) -> None:
        """A batch the broker rejected for good leaves a hole in its partition's sequence:
        move every later batch down by its record count, as Kafka's TransactionManager
        does, so the next ones are accepted. Later batches already in flight come back
        OUT_OF_ORDER_SEQUENCE_NUMBER and are retried with their new numbers."""
        seq = failed.base_sequence
        if not self.idempotent or seq is None:
            return
        tp = failed.topic_partition
        n = failed.record_count
        for other in self.incomplete:
            if (
                other is not failed
                and other.topic_partition == tp
                and other.base_sequence is not None
                and other.base_sequence > seq
            ):
                other.set_base_sequence(other.base_sequence - n)
                other.resequenced = True
        self.next_sequence[tp] = (self.next_sequence.get(tp, n) - n) & 0x7FFFFFFF

    def expire(self, now: float, delivery_timeout_s: float) -> list[ProducerBatch]:
        """Batches waiting in deques past delivery.timeout.ms (not those in flight)."""
        expired = []
        for dq in self.batches.values():
            while dq and now - dq[0].created >= delivery_timeout_s:
                expired.append(dq.popleft())
        return expired

    def abort_all(self, error: BaseException) -> None:
        """Fail every incomplete batch and return its memory (the producer is closing)."""
        for dq in self.batches.values():
            dq.clear()
        for batch in list(self.incomplete):
            self.fail(batch, error)

    def has_undrained(self) -> bool:
        return any(self.batches.values())
