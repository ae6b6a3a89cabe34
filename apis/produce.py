"""Produce (key 0): magic 2 batches (v3+), and v0-v2's message sets converted to one.

The hot path treats a batch as opaque bytes: validate the header and CRC (in C), assign
offsets by rewriting the header in place, append. Records are looked at one by one only
where Kafka's semantics need them: compacted topics, whose records must all have keys.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.producer_state import increment_sequence
from trio_broker.protocol._generated.produce_response import (
    BatchIndexAndErrorMessage as RecordError,
)
from trio_broker.protocol._generated.produce_response import (
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from trio_broker.protocol.record_codec import iter_records
from trio_broker.protocol.records import Compression, InvalidRecords, validate_batches
from trio_broker.server.requests import DELAYED

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

logger = logging.getLogger(__name__)


def _check_keys(records: memoryview) -> list[RecordError]:
    # Kafka's LogValidator: a compacted topic refuses a batch with a record without key.
    missing = [
        RecordError(
            batch_index=i,
            batch_index_error_message="Compacted topic cannot accept message without key in topic partition",
        )
        for i, record in enumerate(iter_records(records))
        if record.key is None
    ]
    return missing


def _verify_transactional(
    broker: Broker,
    transactional_id: str | None,
    topic: str,
    partition: int,
    header,
    log,
    verified: dict | None = None,
) -> None:
    # A transactional batch must belong to the producer's ongoing transaction, i.e. the
    # partition was added with AddPartitionsToTxn (Kafka's transaction verification). A
    # producer already in a transaction on this partition has been verified before.
    if transactional_id is None:
        # Kafka's KafkaApis: transactional records need a transactional id it may authorize.
        raise KafkaError(
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "transactional records without a transactional id",
        )
    if header.producer_id in log.producer_state.ongoing:
        return
    if verified is not None and (topic, partition) in verified:
        # Asked the remote coordinator (a cluster, KIP-890); the handler awaited since.
        code, guard = verified[(topic, partition)]
        if not code:
            from trio_broker.cluster.transactions.verification import txn_guard

            if txn_guard(log, header.producer_id) != guard:
                raise KafkaError(
                    ErrorCode.NOT_ENOUGH_REPLICAS,
                    f"a marker for producer {header.producer_id} reached {topic}-{partition} "
                    "while its transaction was verified",
                )
            return
        raise KafkaError(
            code,
            f"transactional batch of producer {header.producer_id} for {topic}-{partition}: "
            f"verification with the coordinator answered {code.name}",
        )
    txn = getattr(broker, "transaction_coordinator", None)
    code = None
    if txn is not None:
        code = txn.verify_produce(
            transactional_id, header.producer_id, header.producer_epoch, (topic, partition)
        )
    if code:
        raise KafkaError(
            code,
            f"transactional batch of producer {header.producer_id} for {topic}-{partition} "
            "is not part of an ongoing transaction",
        )


def append_partition(
    broker: Broker,
    topic: str,
    partition: int,
    records: memoryview | None,
    acks: int,
    version: int,
    transactional_id: str | None = None,
    pending: list | None = None,
    verified: dict | None = None,
) -> PartitionProduceResponse:
    answer = PartitionProduceResponse(index=partition, base_offset=-1, log_start_offset=-1)
    state = broker.metadata.topics.get(topic)
    replicas = broker.replica_manager
    leader = None
    if replicas is not None:
        # A cluster: only the leader appends (as its replica manager knows, not the
        # metadata cache); the others name it (produce v10+).
        leader = replicas.leader_partition(topic, partition)
        if leader is None:
            known = replicas.partition(topic, partition) is not None or (
                state is not None and partition in state.partitions
            )
            if not known:
                answer.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                return answer
            answer.error_code = replicas.not_led_here(topic, partition)
            if answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                leader_id, leader_epoch = replicas.leader_of(topic, partition)
                answer.current_leader.leader_id = leader_id
                answer.current_leader.leader_epoch = leader_epoch
            return answer
        log = leader.log
        configs = _leader_configs(replicas, topic, state)
        leader_epoch = leader.leader_epoch
    else:
        log = broker.topics.get_log(topic, partition)
        if log is None or state is None or partition not in state.partitions:
            answer.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return answer
        configs = state.configs
        leader_epoch = state.partitions[partition].leader_epoch
    if records is None or len(records) == 0:
        answer.error_code = ErrorCode.INVALID_RECORD
        answer.error_message = "Produce request has no records"
        return answer
    try:
        config = log.config
        if version < 3:
            # A message set of format 0 or 1: one format 2 batch from here on.
            from trio_broker.apis.old_formats import up_convert_produce

            records = memoryview(bytearray(up_convert_produce(records)))
        headers = validate_batches(
            records, max_batch_size=config.max_message_bytes, single_batch=True
        )
        header = headers[0]
        if version < 7 and header.compression == Compression.ZSTD:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs produce version 7 or later"
            )
        if header.is_transactional:
            _verify_transactional(broker, transactional_id, topic, partition, header, log, verified)
        if "compact" in config.cleanup_policy:
            errors = _check_keys(records)
            if errors:
                answer.error_code = ErrorCode.INVALID_RECORD
                answer.record_errors = errors
                answer.error_message = "One or more records have been rejected"
                return answer
        if acks == -1:
            min_isr = _min_isr(broker, configs)
            # A leader's own ISR is the newest (the metadata cache may lag behind it).
            isr = state.partitions[partition].isr if leader is None else leader.isr
            if len(isr) < min_isr:
                raise KafkaError(
                    ErrorCode.NOT_ENOUGH_REPLICAS,
                    f"The size of the current ISR {isr} is insufficient to satisfy "
                    f"the min.isr requirement of {min_isr}",
                )
        result = log.append_as_leader(
            records, headers, leader_epoch=leader_epoch, log_append_time_ms=None
        )
    except InvalidRecords as exc:
        answer.error_code = exc.code
        answer.error_message = exc.message
        return answer
    except KafkaError as exc:
        answer.error_code = exc.code
        answer.error_message = exc.message
        return answer
    if leader is None:
        # One broker: the ISR is the leader, so what is appended is committed.
        log.high_watermark = log.log_end_offset
    else:
        replicas.after_leader_append(leader)
        if acks == -1 and pending is not None and log.high_watermark <= result.last_offset:
            # acks=all: answered once the ISR has it (cluster/replication/delayed_produce.py).
            pending.append(
                (topic, partition, result.last_offset + 1, leader.leader_generation, answer)
            )
    _after_append(broker, log, topic, partition, result, len(records))
    answer.base_offset = result.first_offset
    answer.log_append_time_ms = result.log_append_time_ms
    answer.log_start_offset = result.log_start_offset
    return answer


def _after_append(broker: Broker, log, topic: str, partition: int, result, nbytes: int) -> None:
    """What follows every append of clients' batches: the flush it may call for, the
    fetches it may answer, the metrics."""
    if result.flush_needed:
        broker.schedule_flush(log)
    broker.fetch_purgatory.wake(((topic, partition),))
    if broker.metrics is not None:
        broker.metrics.produced(topic, result.record_count, nbytes)


def _leader_configs(replicas, topic: str, state) -> dict[str, str]:
    """A led topic's config overrides. The metadata cache's follow /config/changes; before
    UpdateMetadata named the topic, the ones LeaderAndIsr read."""
    return state.configs if state is not None else replicas.topic_configs.get(topic, {})


def _min_isr(broker: Broker, overrides: dict[str, str]) -> int:
    text = overrides.get("min.insync.replicas")
    return int(text) if text is not None else broker.config.min_insync_replicas


async def handle(broker: Broker, request: Request) -> ProduceResponse | None | object:
    return handle_now(broker, request)


def handle_now(broker: Broker, request: Request) -> ProduceResponse | None | object:
    """handle() without a coroutine (apis/registry.py answer_now): nothing here waits."""
    body = request.body
    acks = body.acks
    responses = []
    if acks not in (0, 1, -1):
        code = ErrorCode.INVALID_REQUIRED_ACKS
        responses = [
            TopicProduceResponse(
                name=t.name,
                partition_responses=[
                    PartitionProduceResponse(index=p.index, error_code=code, base_offset=-1)
                    for p in t.partition_data
                ],
            )
            for t in body.topic_data
        ]
        return ProduceResponse(responses=responses)
    pending: list | None = [] if getattr(broker, "replica_manager", None) is not None else None
    if pending is not None and body.transactional_id:
        from trio_broker.cluster.transactions.verification import verify_then_append

        # A cluster: a batch opening a transaction here may need the remote coordinator's
        # word first; then the request is answered from a task of its own (DELAYED).
        if verify_then_append(
            broker, request, lambda verified: _append_all(broker, request, pending, verified)
        ):
            return DELAYED
    return _append_all(broker, request, pending, None)


def _append_all(
    broker: Broker, request: Request, pending: list | None, verified: dict | None
) -> ProduceResponse | None | object:
    """Append every partition's batch; the response, None (acks=0) or DELAYED (acks=-1 in
    a cluster, waiting for the ISR)."""
    body = request.body
    version = request.api_version
    acks = body.acks
    transactional_id = body.transactional_id
    responses = []
    for topic in body.topic_data:
        name = topic.name
        partitions = []
        for p in topic.partition_data:
            partitions.append(
                append_partition(
                    broker,
                    name,
                    p.index,
                    p.records,
                    acks,
                    version,
                    transactional_id,
                    pending,
                    verified,
                )
            )
        responses.append(TopicProduceResponse(name=name, partition_responses=partitions))
    if acks == 0:
        # No answer; a failed append shows up for the client only as missing records,
        # as with Kafka (which closes the connection; the client reconnects).
        failed = [
            (t.name, p.index, p.error_code)
            for t in responses
            for p in t.partition_responses
            if p.error_code
        ]
        if failed:
            logger.info(
                "[conn %s] acks=0 produce failed for %s; closing", request.connection.id, failed
            )
            request.connection.close()
        return None
    response = ProduceResponse(responses=responses)
    if pending is not None:
        from trio_broker.cluster.replication.delayed_produce import finish_produce

        return finish_produce(broker, request, response, pending, body.timeout_ms)
    return response


# The largest batch appended together with others: their bytes are copied into one
# buffer, which costs nothing beside a small batch's fixed costs and would be a copy more
# of a large one's (a large one is rarely read together with others anyway).
_COMBINED_BATCH_BYTES = 16 * 1024


def handle_batch_now(broker: Broker, requests: list[Request]) -> list:
    """The answers to a batch of one connection's produces (server/requests.py Batch), in
    order.

    Consecutive produces of one batch each to the same partition this broker leads are
    appended as one write: their batches are validated one by one and copied into one
    buffer, which one `append_as_leader` assigns offsets to and appends. Each request's
    answer is then what appending it alone would have given (its base offset follows the
    batches before it). The combined append is all or nothing: when it fails, or finds a
    duplicate of an idempotent producer's batch, nothing was written, and the requests are
    appended one by one as usual, so every error is answered as it would have been. A
    request of any other shape (several partitions, an old version, a compacted topic, a
    transactional batch, an error found before the append) is answered on its own, in its
    place. In a cluster an acks=all request's answer is DELAYED (the purgatory answers it
    once the ISR has its records) unless the high watermark is past it already.
    """
    replicas = getattr(broker, "replica_manager", None)
    answers: list = []
    group: list = []  # (request, records, header) for one partition, in order
    group_key = None
    # Idempotent producers in the group: producer id -> (epoch, last sequence). The checks
    # of one append see the producers' state from before it, so a batch of a producer
    # already in the group joins only as the next in its sequence; any other (a resent
    # batch: a duplicate) starts a new group, after the one it may repeat is in the log.
    producers: dict[int, tuple[int, int]] = {}
    for request in requests:
        member = _batch_member(broker, replicas, request)
        if member is not None and group:
            header = member[2]
            seen = producers.get(header.producer_id) if header.producer_id >= 0 else None
            if member[0] != group_key or (seen is not None and not _follows(seen, header)):
                answers += _append_group(broker, replicas, group_key, group)
                group = []
                producers.clear()
        if member is None:
            if group:
                answers += _append_group(broker, replicas, group_key, group)
                group = []
                producers.clear()
            answers.append(handle_now(broker, request))
            continue
        group_key, records, header = member
        group.append((request, records, header))
        if header.producer_id >= 0:
            producers[header.producer_id] = (
                header.producer_epoch,
                increment_sequence(header.base_sequence, header.last_offset_delta),
            )
    if group:
        answers += _append_group(broker, replicas, group_key, group)
    return answers


def _follows(seen: tuple[int, int], header) -> bool:
    """Whether `header` is the next batch of its producer after `seen` (epoch, last seq)."""
    epoch, last_seq = seen
    return header.producer_epoch == epoch and increment_sequence(last_seq, 1) == (
        header.base_sequence
    )


def _batch_member(broker: Broker, replicas, request: Request) -> tuple | None:
    """((topic, partition, log, leader epoch), records, header) of a produce that may join
    a combined append, or None: it is answered alone. `replicas`: a cluster's replica
    manager, or None on a lone broker."""
    body = request.body
    if request.api_version < 3 or len(body.topic_data) != 1:
        return None
    topic = body.topic_data[0]
    if len(topic.partition_data) != 1:
        return None
    data = topic.partition_data[0]
    records = data.records
    if records is None or not 0 < len(records) <= _COMBINED_BATCH_BYTES:
        return None
    if replicas is not None:
        # A cluster: only the partition's leader appends.
        leader = replicas.leader_partition(topic.name, data.index)
        if leader is None:
            return None  # NOT_LEADER_OR_FOLLOWER or unknown, answered by append_partition
        if request.body.acks == -1:
            configs = _leader_configs(replicas, topic.name, broker.metadata.topics.get(topic.name))
            if len(leader.isr) < _min_isr(broker, configs):
                return None  # NOT_ENOUGH_REPLICAS, answered by append_partition
        log = leader.log
        leader_epoch = leader.leader_epoch
    else:
        state = broker.metadata.topics.get(topic.name)
        log = broker.topics.get_log(topic.name, data.index)
        part_state = state.partitions.get(data.index) if state is not None else None
        if log is None or part_state is None:
            return None
        if request.body.acks == -1 and len(part_state.isr) < _min_isr(broker, state.configs):
            return None  # NOT_ENOUGH_REPLICAS, answered by append_partition
        leader_epoch = part_state.leader_epoch
    config = log.config
    if "compact" in config.cleanup_policy:
        return None
    try:
        headers = validate_batches(
            records, max_batch_size=config.max_message_bytes, single_batch=True
        )
    except InvalidRecords:
        return None
    header = headers[0]
    if header.is_transactional or (
        request.api_version < 7 and header.compression == Compression.ZSTD
    ):
        return None
    return (topic.name, data.index, log, leader_epoch), records, header


def _append_group(broker: Broker, replicas, key: tuple, group: list) -> list:
    topic, partition, log, leader_epoch = key
    # A copy (at most 16 KiB a batch): the requests' own bytes stay as they came, for the
    # one-by-one fallback, which validates them again.
    combined = memoryview(bytearray().join([records for _, records, _ in group]))
    try:
        result = log.append_as_leader(
            combined, [header for _, _, header in group], leader_epoch=leader_epoch
        )
    except KafkaError:
        result = None
    if result is None or result.duplicate:
        # Nothing was written: one by one, as without the combined append.
        return [handle_now(broker, request) for request, _, _ in group]
    leader = None
    if replicas is None:
        log.high_watermark = log.log_end_offset  # one broker: what is appended is committed
    else:
        from trio_broker.cluster.replication.delayed_produce import finish_produce

        # Nothing between the members' checks and here waits, so this is still the leader
        # those checks found (an earlier group's appends do not change who leads).
        leader = replicas.partitions[(topic, partition)]
        replicas.after_leader_append(leader)
    _after_append(broker, log, topic, partition, result, len(combined))
    answers = []
    offset = result.first_offset
    for request, _, header in group:
        acks = request.body.acks
        last_offset = offset + header.last_offset_delta
        if acks == 0:
            answers.append(None)
        else:
            answer = PartitionProduceResponse(
                index=partition,
                base_offset=offset,
                log_append_time_ms=result.log_append_time_ms,
                log_start_offset=result.log_start_offset,
            )
            response = ProduceResponse(
                responses=[TopicProduceResponse(name=topic, partition_responses=[answer])]
            )
            if acks == -1 and leader is not None and log.high_watermark <= last_offset:
                # acks=all in a cluster: answered once the ISR has this request's last
                # record, each request on its own, as append_partition parks it.
                waiting = (topic, partition, last_offset + 1, leader.leader_generation, answer)
                response = finish_produce(
                    broker, request, response, [waiting], request.body.timeout_ms
                )
            answers.append(response)
        offset = last_offset + 1
    return answers
