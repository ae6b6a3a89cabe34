"""AddPartitionsToTxn (key 24): a producer adds partitions to its ongoing transaction.

v0-3 (clients) carry one transaction; v4+ (brokers, KIP-890) carry several, each either
adding or only verifying (`verify_only`) that its partitions are in the transaction.
Unknown partitions fail with UNKNOWN_TOPIC_OR_PARTITION and the others of the same
transaction with OPERATION_NOT_ATTEMPTED, without a call to the coordinator (Kafka's rule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trio_broker.apis.txn_errors import after_state_write, coordinator, for_version
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


def _after_write(
    broker: Broker,
    request: Request,
    by_txn: dict[str, dict[tuple[str, int], int]],
    written: list[str],
    build: Any,
) -> Any:
    """`build(by_txn)` once the ISR has the coordinator's writes for the `written` ids
    (a cluster); their partitions' codes become the append's failure if it failed."""

    def answer(codes: dict[str, ErrorCode]) -> Any:
        for txn_id, code in codes.items():
            if code:
                by_txn[txn_id] = dict.fromkeys(by_txn[txn_id], code)
        return build(by_txn)

    return after_state_write(broker, request, written, answer)


async def handle(broker: Broker, request: Request) -> Any:
    body = request.body
    version = request.api_version
    if version < 4:
        txn_id = body.v3_and_below_transactional_id
        codes = _one(
            broker,
            body.v3_and_below_transactional_id,
            body.v3_and_below_producer_id,
            body.v3_and_below_producer_epoch,
            body.v3_and_below_topics,
            False,
            version,
        )
        written = [txn_id] if codes and not any(codes.values()) else []
        return _after_write(
            broker,
            request,
            {txn_id: codes},
            written,
            lambda by_txn: AddPartitionsToTxnResponse(
                results_by_topic_v3_and_below=_results(by_txn[txn_id])
            ),
        )
    by_txn: dict[str, dict[tuple[str, int], int]] = {}
    written = []
    for t in body.transactions:
        codes = _one(
            broker,
            t.transactional_id,
            t.producer_id,
            t.producer_epoch,
            t.topics,
            t.verify_only,
            version,
        )
        by_txn[t.transactional_id] = codes
        if not t.verify_only and codes and not any(codes.values()):
            written.append(t.transactional_id)
    return _after_write(
        broker,
        request,
        by_txn,
        written,
        lambda by_txn: AddPartitionsToTxnResponse(
            error_code=ErrorCode.NONE,
            results_by_transaction=[
                AddPartitionsToTxnResult(transactional_id=t, topic_results=_results(codes))
                for t, codes in by_txn.items()
            ],
        ),
    )
