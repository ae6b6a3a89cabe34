"""`__transaction_state` records: Kafka's TransactionLogKey and TransactionLogValue.

Key and value are an int16 version followed by the body from
`kafka-protocol/coordinator-records/`. We write key v0 and value v0 as Kafka 3.x does
(value v1 is the flexible form of KIP-890's transaction version 2). A null value is a
tombstone: the transactional id expired. PrepareEpochFence is never written: Kafka stores
it as PrepareAbort.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

from trio_broker.cluster.coordinator_log import TRANSACTION_STATE_TOPIC, iter_log_batches
from trio_broker.cluster.coordinator_log import partition_for as _partition_for
from trio_broker.cluster.transactions.transaction_metadata import (
    TransactionMetadata,
    TransactionState,
)
from trio_broker.protocol._generated.transaction_log_key import TransactionLogKey
from trio_broker.protocol._generated.transaction_log_value import (
    PartitionsSchema,
    TransactionLogValue,
)
from trio_broker.protocol.record_codec import iter_records
from trio_broker.protocol.records import InvalidRecords

if TYPE_CHECKING:
    from trio_broker.log import PartitionLog

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "partition_for",
    "replay",
    "transaction_log_key",
    "transaction_log_value",
]

logger = logging.getLogger(__name__)

_INT16 = struct.Struct(">h")
_KEY_VERSION = 0
_VALUE_VERSION = 0


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka's `Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions`."""
    return _partition_for(transactional_id, num_partitions)


def transaction_log_key(transactional_id: str) -> bytes:
    body = TransactionLogKey(transactional_id=transactional_id)
    return bytes(body.encode(_KEY_VERSION, bytearray(_INT16.pack(_KEY_VERSION))))


def transaction_log_value(meta: TransactionMetadata) -> bytes:
    state = meta.state
    if state == TransactionState.PREPARE_EPOCH_FENCE:
        state = TransactionState.PREPARE_ABORT
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(partition)
    body = TransactionLogValue(
        producer_id=meta.producer_id,
        producer_epoch=meta.producer_epoch,
        transaction_timeout_ms=meta.txn_timeout_ms,
        transaction_status=int(state),
        transaction_partitions=None
        if state == TransactionState.EMPTY
        else [PartitionsSchema(topic=t, partition_ids=ps) for t, ps in by_topic.items()],
        transaction_last_update_timestamp_ms=meta.txn_last_update_timestamp_ms,
        transaction_start_timestamp_ms=meta.txn_start_timestamp_ms,
    )
    return bytes(body.encode(_VALUE_VERSION, bytearray(_INT16.pack(_VALUE_VERSION))))


def decode(key: bytes, value: bytes | None) -> tuple[str, TransactionMetadata | None]:
    (key_version,) = _INT16.unpack_from(key)
    k, _ = TransactionLogKey.decode(key, min(key_version, TransactionLogKey.MAX_VERSION), 2)
    if value is None:
        return k.transactional_id, None
    (value_version,) = _INT16.unpack_from(value)
    v, _ = TransactionLogValue.decode(value, min(value_version, TransactionLogValue.MAX_VERSION), 2)
    meta = TransactionMetadata(
        transactional_id=k.transactional_id,
        producer_id=v.producer_id,
        producer_epoch=v.producer_epoch,
        txn_timeout_ms=v.transaction_timeout_ms,
        state=TransactionState(v.transaction_status),
        partitions={(p.topic, i) for p in v.transaction_partitions or () for i in p.partition_ids},
        txn_start_timestamp_ms=v.transaction_start_timestamp_ms,
        txn_last_update_timestamp_ms=v.transaction_last_update_timestamp_ms,
    )
    return k.transactional_id, meta


def replay(log: PartitionLog) -> dict[str, TransactionMetadata]:
    """The last word per transactional id in one partition (Kafka's loadTransactionMetadata)."""
    found: dict[str, TransactionMetadata | None] = {}
    for batch in iter_log_batches(log):
        try:
            records = list(iter_records(batch))
        except InvalidRecords as exc:
            logger.warning("%s: unreadable batch skipped during load: %s", log.name, exc)
            continue
        for record in records:
            if record.key is None or len(record.key) < 2:
                continue
            try:
                txn_id, meta = decode(bytes(record.key), record.value)
            except Exception as exc:  # a record from a newer Kafka must not stop the load
                logger.warning("%s: record at %d skipped: %s", log.name, record.offset, exc)
                continue
            found[txn_id] = meta
    return {t: m for t, m in found.items() if m is not None}
