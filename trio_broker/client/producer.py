"""The producer: Kafka's KafkaProducer + Sender, in Trio.

    async with Producer("127.0.0.1:9092", linger_ms=5, compression_type="lz4") as producer:
        metadata = await producer.send("events", b"value", key=b"key")   # once acknowledged
        handle = await producer.send_soon("events", b"v")   # once in a batch
        await producer.flush()
        print((await handle.wait()).offset)

`send_soon` waits only for buffer memory (up to `max.block.ms`) and for the topic's
metadata. It does not checkpoint on every record: it yields once per new batch, which is
when the sender has something to send; a loop of `send_soon` calls therefore runs at the
speed of writing records into buffers.

The sender task drains ready batches per broker into Produce requests, pipelined up to
`max.in.flight.requests.per.connection`, and completes them from the responses (in the
connection's reader task, without a task per request). Retriable errors and broken
connections retry the batch, with its sequence number, until `delivery.timeout.ms`.
With idempotence (the default with acks=all) the producer first gets an id from
InitProducerId and numbers each partition's batches, so a retried batch is never written
twice and never overtaken.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import partial
from time import time_ns as _time_ns
from typing import Any

import attrs
import trio

from trio_broker.client.accumulator import ProducerBatch, RecordAccumulator
from trio_broker.client.buffer_pool import BufferPool
from trio_broker.client.config import ProducerConfig
from trio_broker.client.connection import InFlightRequest
from trio_broker.client.errors import (
    KafkaError,
    KafkaTimeoutError,
    RecordTooLargeError,
    error_for,
    is_retriable,
)
from trio_broker.client.metadata import STALE_METADATA_ERRORS, ClusterMetadata
from trio_broker.client.network_client import NetworkClient
from trio_broker.client.partitioner import StickyPartitioner, partition_for_key
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.init_producer_id_request import InitProducerIdRequest
from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)

__all__ = ["Producer", "RecordHandle", "RecordMetadata"]

log = logging.getLogger(__name__)

Header = tuple[str, bytes | None]


@attrs.frozen(kw_only=True)
class RecordMetadata:
    """Where an acknowledged record went (offset -1 with acks=0)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class RecordHandle:
    """A record in a batch; `await handle.wait()` gives its RecordMetadata or raises."""

    __slots__ = ("_batch", "_index", "_timestamp")

    def __init__(self, batch: ProducerBatch, index: int, timestamp: int) -> None:
        self._batch = batch
        self._index = index
        self._timestamp = timestamp

    @property
    def done(self) -> bool:
        return self._batch.finished

    async def wait(self) -> RecordMetadata:
        batch = self._batch
        await batch.wait()
        if batch.error is not None:
            raise batch.error
        return self.result()

    def result(self) -> RecordMetadata:
        batch = self._batch
        if not batch.finished:
            raise RuntimeError("the record is not acknowledged yet")
        if batch.error is not None:
            raise batch.error
        offset = batch.base_offset + self._index if batch.base_offset >= 0 else -1
        timestamp = batch.log_append_time if batch.log_append_time >= 0 else self._timestamp
        return RecordMetadata(
            topic=batch.topic, partition=batch.partition, offset=offset, timestamp=timestamp
        )


class ProducerClosedError(KafkaError):
    def __init__(self, detail: str = "the producer was closed") -> None:
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, detail)


def _as_bytes(value: Any, what: str) -> bytes | None:
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"{what} must be bytes, str or None, not {type(value).__name__}")


class Producer:
    """`async with Producer(bootstrap_servers, **config)`; see the module docstring.

    Config keys are Kafka's producer keys with underscores (`linger_ms`, `acks`,
    `compression_type`, `buffer_memory`, ...), or with dots in `config={...}`.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "localhost:9092",
        *,
        config: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.config = ProducerConfig.build(config, bootstrap_servers=bootstrap_servers, **kwargs)
        cfg = self.config
        self.pool = BufferPool(cfg.buffer_memory, cfg.batch_size)
        self.accumulator = RecordAccumulator(
            self.pool,
            batch_size=cfg.batch_size,
            linger_ms=cfg.linger_ms,
            compression_type=cfg.compression_type,
            retry_backoff_ms=cfg.retry_backoff_ms,
            max_block_ms=cfg.max_block_ms,
            idempotent=cfg.enable_idempotence,
        )
        self.client = NetworkClient(cfg)
        self.metadata = ClusterMetadata(
            self.client, allow_auto_topic_creation=cfg.allow_auto_create_topics
        )
        self.producer_id = -1
        self.producer_epoch = -1
        self._partitioner = StickyPartitioner()
        self._sticky = self._partitioner.current
        self._sticky_batch: dict[str, ProducerBatch] = {}  # the open batch keyless records go to
        self._wakeup = trio.Event()
        self._closed = False
        self._max_block_s = cfg.max_block_ms / 1000
        self._delivery_timeout_s = cfg.delivery_timeout_ms / 1000
        self._max_request_size = cfg.max_request_size
        self._partition_counts: dict[str, int] = {}
        self.accumulator.set_wakeup(self._wake)
        self.client.add_listener(self._wake)

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Producer:
        await self.client.__aenter__()
        nursery = self.client.nursery
        nursery.start_soon(self.metadata.run)
        nursery.start_soon(self._run_sender)
        return self

    async def __aexit__(self, exc_type, exc, tb) -> bool | None:  # noqa: ANN001
        try:
            if exc_type is None and not self._closed:
                # A clean exit delivers what was sent (Kafka's close() does too).
                with trio.move_on_after(self._delivery_timeout_s):
                    await self.flush()
        except BaseException:
            self._close_now()
            await self.client.__aexit__(None, None, None)
            raise
        self._close_now()
        return await self.client.__aexit__(exc_type, exc, tb)

    def _close_now(self) -> None:
        # Whatever is still buffered fails now and its memory goes back to the pool.
        self._closed = True
        self._sticky_batch.clear()
        self.accumulator.abort_all(ProducerClosedError())

    def _wake(self) -> None:
        self._wakeup.set()

    # -- sending --------------------------------------------------------------------------

    async def send_soon(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        *,
        headers: Sequence[Header] | Mapping[str, bytes | None] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordHandle:
        """Put the record in a batch and return its handle (see the module docstring)."""
        if key is None and partition is None and not headers and type(value) is bytes:
            # The commonest record (keyless, no headers): straight into the topic's sticky
            # batch while it is open (the producer being closed closes every batch).
            batch = self._sticky_batch.get(topic)
            if batch is not None and not batch.closed:
                timestamp = _time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
                index = batch.try_append(timestamp, None, value, None)
                if index is not None:
                    return RecordHandle(batch, index, timestamp)
        if self._closed:
            raise ProducerClosedError()
        if type(value) is not bytes:
            value = _as_bytes(value, "value")
        if key is not None and type(key) is not bytes:
            key = _as_bytes(key, "key")
        if headers:
            if isinstance(headers, Mapping):
                headers = list(headers.items())
            headers = [(k, _as_bytes(v, "header value")) for k, v in headers]
        timestamp = _time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        count = self._partition_counts.get(topic)
        if count is None:
            count = await self._partitions_for(topic)
        acc = self.accumulator
        sticky = False
        if partition is None:
            if key is not None:
                partition = partition_for_key(key, count)
            else:
                sticky = True
                partition = self._sticky.get(topic)  # the partitioner's choice, inlined
                if partition is None or partition >= count:
                    partition = self._partitioner.partition(topic, count)
        elif not 0 <= partition < count:
            raise error_for(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"partition {partition} of topic {topic!r} with {count} partitions",
            )
        # The hot path: the record fits the partition's open batch; nothing to await.
        dq = acc.batches.get((topic, partition))
        if dq:
            batch = dq[-1]
            if not batch.closed:
                index = batch.try_append(timestamp, key, value, headers)
                if index is not None:
                    if sticky:
                        self._sticky_batch[topic] = batch
                    return RecordHandle(batch, index, timestamp)
        appended = acc.try_append(topic, partition, timestamp, key, value, headers)
        if appended is None:
            if sticky:
                # A keyless record that needs a new batch goes to the next sticky partition
                # (KIP-480's abort-on-new-batch).
                partition = self._partitioner.on_new_batch(topic, count, partition)
            self._check_size(key, value, headers)
            appended = await acc.append(topic, partition, timestamp, key, value, headers)
        if sticky:
            self._sticky_batch[topic] = appended[0]
        return RecordHandle(appended[0], appended[1], timestamp)  # type: ignore[index]

    async def send(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        **kwargs: Any,
    ) -> RecordMetadata:
        """Send one record and return its RecordMetadata once acknowledged."""
        handle = await self.send_soon(topic, value, key, **kwargs)
        return await handle.wait()

    async def flush(self) -> None:
        """Send everything buffered now and wait until each batch completes."""
        acc = self.accumulator
        acc.flushes_in_progress += 1
        self._wake()
        try:
            for batch in list(acc.incomplete):
                await batch.wait()
        finally:
            acc.flushes_in_progress -= 1
        await trio.lowlevel.checkpoint()

    async def partitions_for(self, topic: str) -> list[int]:
        return list(range(await self._partitions_for(topic)))

    async def _partitions_for(self, topic: str) -> int:
        meta = await self.metadata.wait_for_topic(topic, self._max_block_s)
        self._partition_counts[topic] = meta.partition_count
        return meta.partition_count

    def _check_size(self, key: Any, value: Any, headers: Any) -> None:
        from trio_broker.client.accumulator import record_size

        size = 61 + record_size(key, value, headers)
        if size > self._max_request_size:
            raise RecordTooLargeError(
                f"the record is {size} bytes, more than max.request.size={self._max_request_size}"
            )

    # -- the sender ---------------------------------------------------------------------------

    def _leader_of(self, topic: str, partition: int) -> int | None:
        return self.metadata.cluster.leader_for(topic, partition)

    async def _run_sender(self) -> None:
        cfg = self.config
        acc = self.accumulator
        client = self.client
        if cfg.enable_idempotence:
            await self._init_producer_id()
        seen_metadata = -1
        while True:
            self._wakeup = trio.Event()
            now = trio.current_time()
            for batch in acc.expire(now, self._delivery_timeout_s):
                self._fail_batch(batch, self._expired(batch, now))
            if self.metadata.version != seen_metadata:
                seen_metadata = self.metadata.version
                for name, topic in self.metadata.cluster.topics.items():
                    if topic.partitions:
                        self._partition_counts[name] = topic.partition_count
            ready, delay, unknown = acc.ready(self._leader_of, now)
            if unknown:
                self.metadata.add_topics(unknown)
                self.metadata.request_update()
                delay = min(delay, cfg.retry_backoff_ms / 1000)
            sendable = []
            for node in ready:
                if client.connection_if_ready(node) is not None:
                    sendable.append(node)
                elif not client.is_connected(node):
                    client.initiate_connect(node)
                    delay = min(delay, max(client.backoff_remaining(node), 0.005))
            sent = False
            if sendable:
                drained = acc.drain(
                    self._leader_of,
                    sendable,
                    self._max_request_size,
                    now,
                    self.producer_id,
                    self.producer_epoch,
                )
                for node, batches in drained.items():
                    self._send_produce(node, batches)
                    sent = True
            if sent:
                await trio.lowlevel.checkpoint()
                continue
            with trio.move_on_after(delay):
                await self._wakeup.wait()

    def _expired(self, batch: ProducerBatch, now: float) -> KafkaTimeoutError:
        return KafkaTimeoutError(
            f"expiring {batch.record_count} record(s) for {batch.topic}-{batch.partition}: "
            f"{(now - batch.created) * 1000:.0f} ms has passed since batch creation "
            f"(delivery.timeout.ms={self.config.delivery_timeout_ms})"
        )

    async def _init_producer_id(self) -> None:
        backoff = self.config.retry_backoff_ms / 1000
        while True:
            try:
                node = self.client.least_loaded_node()
                response = await self.client.send(
                    node, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1)
                )
                if response.error_code == 0:
                    self.producer_id = response.producer_id
                    self.producer_epoch = response.producer_epoch
                    return
                error = error_for(response.error_code, "InitProducerId")
                if not error.retriable:
                    log.error("cannot get a producer id: %s", error)
                    self.accumulator.abort_all(error)
                    self._closed = True
                    return
            except KafkaError as exc:
                log.info("InitProducerId failed, retrying: %s", exc)
            await trio.sleep(backoff)

    def _send_produce(self, node: int, batches: list[ProducerBatch]) -> None:
        cfg = self.config
        by_topic: dict[str, list[PartitionProduceData]] = {}
        for batch in batches:
            by_topic.setdefault(batch.topic, []).append(
                PartitionProduceData(index=batch.partition, records=batch.payload)
            )
        request = ProduceRequest(
            transactional_id=None,
            acks=cfg.acks,
            timeout_ms=cfg.request_timeout_ms,
            topic_data=[
                TopicProduceData(name=topic, partition_data=data)
                for topic, data in by_topic.items()
            ],
        )
        connection = self.client.connection_if_ready(node)
        assert connection is not None
        try:
            connection.submit(
                request,
                expect_response=cfg.acks != 0,
                callback=partial(self._on_response, batches),
            )
        except KafkaError as exc:
            self._handle_failure(batches, exc)

    def _on_response(self, batches: list[ProducerBatch], pending: InFlightRequest) -> None:
        acc = self.accumulator
        for batch in batches:
            acc.sent_done(batch)
        if pending.error is not None:
            self._handle_failure(batches, pending.error)
        elif self.config.acks == 0:
            for batch in batches:
                acc.complete(batch, -1, -1)
        else:
            by_tp = {batch.topic_partition: batch for batch in batches}
            for topic in pending.response.responses:
                for part in topic.partition_responses:
                    batch = by_tp.pop((topic.name, part.index), None)
                    if batch is not None:
                        self._on_partition_response(batch, part)
            for batch in by_tp.values():  # missing from the response: treat as retriable
                self._retry_or_fail(
                    batch, error_for(ErrorCode.NETWORK_EXCEPTION, "partition missing in response")
                )
        self._wake()

    def _on_partition_response(self, batch: ProducerBatch, part: Any) -> None:
        code = part.error_code
        if code == 0 or code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
            self.accumulator.complete(batch, part.base_offset, part.log_append_time_ms)
            return
        error = error_for(code, part.error_message or f"{batch.topic}-{batch.partition}")
        if code in STALE_METADATA_ERRORS:
            self.metadata.request_update()
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and (
            batch.resequenced or self._earlier_incomplete(batch)
        ):
            # An earlier batch of this partition is being retried, or failed for good and
            # this one was renumbered: it follows (Kafka's Sender retries it too).
            batch.resequenced = False
            self._retry_or_fail(batch, error, force=True)
            return
        self._retry_or_fail(batch, error, rejected=True)

    def _earlier_incomplete(self, batch: ProducerBatch) -> bool:
        seq = batch.base_sequence
        if seq is None:
            return False
        return any(
            other is not batch
            and other.topic_partition == batch.topic_partition
            and other.base_sequence is not None
            and other.base_sequence < seq
            for other in self.accumulator.incomplete
        )

    def _handle_failure(self, batches: list[ProducerBatch], error: BaseException) -> None:
        # A broken connection or a timeout: the leader may have moved; everything retries.
        self.metadata.request_update()
        for batch in batches:
            self._retry_or_fail(batch, error, force=True)

    def _retry_or_fail(
        self,
        batch: ProducerBatch,
        error: BaseException,
        force: bool = False,
        rejected: bool = False,
    ) -> None:
        now = trio.current_time()
        retriable = force or (isinstance(error, KafkaError) and is_retriable(error.code))
        if (
            retriable
            and not self._closed
            and batch.attempts <= self.config.retries
            and now - batch.created < self._delivery_timeout_s
        ):
            log.debug("retrying %r after %s", batch, error)
            self.accumulator.reenqueue(batch, now)
            return
        if retriable and now - batch.created >= self._delivery_timeout_s:
            error = self._expired(batch, now)
        elif rejected:
            # The broker answered with an error: the batch was not written.
            self.accumulator.resequence_after_failure(batch)
        self._fail_batch(batch, error)

    def _fail_batch(self, batch: ProducerBatch, error: BaseException) -> None:
        log.debug("failing %r: %s", batch, error)
        self.accumulator.fail(batch, error)
