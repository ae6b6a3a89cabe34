"""ListTransactions (key 66): transactional ids coordinated here, filtered by state, by
producer id, and (v1) by how long they have been open (`duration_filter`, ms)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.apis.txn_errors import coordinator
from trio_broker.cluster.transactions.transaction_metadata import BY_NAME
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.list_transactions_response import (
    ListTransactionsResponse,
    TransactionState,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> ListTransactionsResponse:
    body = request.body
    txn = coordinator(broker)
    if txn is None:
        return ListTransactionsResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    unknown = [s for s in body.state_filters if s not in BY_NAME]
    states = {BY_NAME[s] for s in body.state_filters if s in BY_NAME}
    pids = set(body.producer_id_filters)
    duration = body.duration_filter if request.api_version >= 1 else -1
    now = txn.now_ms()
    listed = [
        TransactionState(
            transactional_id=m.transactional_id,
            producer_id=m.producer_id,
            transaction_state=m.state.kafka_name,
        )
        for m in txn.list()
        if (not body.state_filters or m.state in states)
        and (not pids or m.producer_id in pids)
        # Kafka's rule, start time -1 (no transaction) included: open longer than `duration`.
        and (duration < 0 or now - m.txn_start_timestamp_ms > duration)
    ]
    return ListTransactionsResponse(
        error_code=ErrorCode.NONE, unknown_state_filters=unknown, transaction_states=listed
    )
