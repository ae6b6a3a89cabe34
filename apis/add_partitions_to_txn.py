"""AddPartitionsToTxn (key 24): a producer adds partitions to its ongoing transaction.

v0-3 (clients) carry one transaction; v4+ (brokers, KIP-890) carry several, each either
adding or only verifying (`verify_only`) that its partitions are in the transaction.
Unknown partitions fail with UNKNOWN_TOPIC_OR_PARTITION and the others of the same
transaction with OPERATION_NOT_ATTEMPTED, without a call to the coordinator (Kafka's rule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trio_broker.apis.txn_errors import coordinator, for_version
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.add_partitions_to_txn_response import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


def _results(codes: dict[tuple[str, int], int]) -> list[AddPartitionsToTxnTopicResult]:
    by_topic: dict[str, list[AddPartitionsToTxnPartitionResult]] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append(
            AddPartitionsToTxnPartitionResult(partition_index=partition, partition_error_code=code)
        )
    return [
        AddPartitionsToTxnTopicResult(name=name, results_by_partition=parts)
        for name, parts in by_topic.items()
    ]


def _one(
    broker: Broker,
    txn_id: str,
    producer_id: int,
    epoch: int,
    topics: list[Any],
    verify_only: bool,
    version: int,
) -> dict[tuple[str, int], int]:
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    known = broker.metadata.topics
    unknown = {tp for tp in wanted if tp[0] not in known or tp[1] not in known[tp[0]].partitions}
    if unknown:
        return {
            tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if tp in unknown
            else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in wanted
        }
    txn = coordinator(broker)
    if txn is None:
        return dict.fromkeys(wanted, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if verify_only:
        found = txn.verify_partitions(txn_id, producer_id, epoch, wanted)
        if isinstance(found, dict):
            return dict(found)
        return dict.fromkeys(wanted, found)
    error = for_version(txn.add_partitions(txn_id, producer_id, epoch, wanted), version, 2)
    return dict.fromkeys(wanted, error)


async def handle(broker: Broker, request: Request) -> AddPartitionsToTxnResponse:
    body = request.body
    version = request.api_version
    if version < 4:
        codes = _one(
            broker,
            body.v3_and_below_transactional_id,
            body.v3_and_below_producer_id,
            body.v3_and_below_producer_epoch,
            body.v3_and_below_topics,
            False,
            version,
        )
        return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=_results(codes))
    results = [
        AddPartitionsToTxnResult(
            transactional_id=t.transactional_id,
            topic_results=_results(
                _one(
                    broker,
                    t.transactional_id,
                    t.producer_id,
                    t.producer_epoch,
                    t.topics,
                    t.verify_only,
                    version,
                )
            ),
        )
        for t in body.transactions
    ]
    return AddPartitionsToTxnResponse(error_code=ErrorCode.NONE, results_by_transaction=results)
