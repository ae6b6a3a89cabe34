"""AddOffsetsToTxn (key 25): the group's `__consumer_offsets` partition joins the
transaction, so that the EndTxn markers reach the offsets committed by TxnOffsetCommit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trio_broker.apis.txn_errors import after_state_write, coordinator, for_version
from trio_broker.cluster.groups.records import OFFSETS_TOPIC
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.add_offsets_to_txn_response import AddOffsetsToTxnResponse

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> Any:
    body = request.body
    txn = coordinator(broker)
    if txn is None:
        return AddOffsetsToTxnResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if not body.group_id:
        return AddOffsetsToTxnResponse(error_code=ErrorCode.INVALID_GROUP_ID)
    store = broker.group_coordinator.store
    try:
        store.ensure_topic()
    except KafkaError as exc:
        return AddOffsetsToTxnResponse(error_code=exc.code)
    tp = (OFFSETS_TOPIC, store.partition_for(body.group_id))
    error = txn.add_partitions(body.transactional_id, body.producer_id, body.producer_epoch, [tp])
    if error:
        return AddOffsetsToTxnResponse(error_code=for_version(error, request.api_version, 2))
    return after_state_write(
        broker,
        request,
        [body.transactional_id],
        lambda codes: AddOffsetsToTxnResponse(error_code=codes[body.transactional_id]),
    )
