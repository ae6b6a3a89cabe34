"""DescribeTransactions (key 65): the state of transactional ids this broker coordinates."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.apis.txn_errors import coordinator
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.describe_transactions_response import (
    DescribeTransactionsResponse,
    TopicData,
    TransactionState,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> DescribeTransactionsResponse:
    txn = coordinator(broker)
    states = []
    for txn_id in request.body.transactional_ids:
        if txn is None:
            error, meta = ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        else:
            error, meta = txn.describe(txn_id)
        if meta is None:
            states.append(TransactionState(error_code=error, transactional_id=txn_id))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(partition)
        states.append(
            TransactionState(
                error_code=ErrorCode.NONE,
                transactional_id=txn_id,
                transaction_state=meta.state.kafka_name,
                transaction_timeout_ms=meta.txn_timeout_ms,
                transaction_start_time_ms=meta.txn_start_timestamp_ms,
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                topics=[TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()],
            )
        )
    return DescribeTransactionsResponse(transaction_states=states)
