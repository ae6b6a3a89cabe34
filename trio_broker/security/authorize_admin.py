"""Authorization of administration: transactions, producer ids, topics, configs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated import (
    create_partitions_response,
    create_topics_response,
    delete_records_response,
    delete_topics_response,
    describe_producers_response,
    describe_transactions_response,
    response_class,
)
from trio_broker.security.acl import Op
from trio_broker.security.authorize_common import (
    CLUSTER_DENIED,
    CLUSTER_NAME,
    GROUP_DENIED,
    TOPIC_DENIED,
    TXN_DENIED,
    C,
    Check,
    Dispatch,
    G,
    T,
    X,
    error_response,
    split_denied,
    then_add,
)

if TYPE_CHECKING:
    from trio_broker.security.authorizer import Authorizer
    from trio_broker.server.requests import Request


# --- transactions and producer ids -------------------------------------------------------


async def init_producer_id(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    txn_id = request.body.transactional_id
    if txn_id is not None:
        if not az.allows(request, Op.WRITE, X, txn_id):
            return error_response(request, TXN_DENIED, producer_id=-1, producer_epoch=-1)
    elif not (
        az.allows(request, Op.IDEMPOTENT_WRITE, C, CLUSTER_NAME)
        or az.allows_any(request, Op.WRITE, T)
    ):
        return error_response(request, CLUSTER_DENIED, producer_id=-1, producer_epoch=-1)
    return await dispatch(broker, request)


async def add_offsets_to_txn(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    body = request.body
    if not az.allows(request, Op.WRITE, X, body.transactional_id):
        return error_response(request, TXN_DENIED)
    if not az.allows(request, Op.READ, G, body.group_id):
        return error_response(request, GROUP_DENIED)
    return await dispatch(broker, request)


async def add_partitions_to_txn(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    from trio_broker.protocol._generated import add_partitions_to_txn_response as r

    body = request.body
    if request.api_version >= 4:
        if not az.allows(request, Op.CLUSTER_ACTION, C, CLUSTER_NAME) and not all(
            az.allows(request, Op.WRITE, X, t.transactional_id) for t in body.transactions
        ):
            return error_response(request, CLUSTER_DENIED)
        return await dispatch(broker, request)
    topics = body.v3_and_below_topics
    txn_ok = az.allows(request, Op.WRITE, X, body.v3_and_below_transactional_id)
    denied = [t for t in topics if not txn_ok or not az.allows(request, Op.WRITE, T, t.name)]
    if not denied:
        return await dispatch(broker, request)
    # Kafka answers the others OPERATION_NOT_ATTEMPTED: nothing is added.
    code = TOPIC_DENIED if txn_ok else TXN_DENIED
    return r.AddPartitionsToTxnResponse(
        results_by_topic_v3_and_below=[
            r.AddPartitionsToTxnTopicResult(
                name=t.name,
                results_by_partition=[
                    r.AddPartitionsToTxnPartitionResult(
                        partition_index=p,
                        partition_error_code=code
                        if t in denied
                        else ErrorCode.OPERATION_NOT_ATTEMPTED,
                    )
                    for p in t.partitions
                ],
            )
            for t in topics
        ]
    )


async def describe_transactions(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    body = request.body
    ids = body.transactional_ids
    denied = [t for t in ids if not az.allows(request, Op.DESCRIBE, X, t)]
    body.transactional_ids = [t for t in ids if t not in denied]
    extra = [
        describe_transactions_response.TransactionState(transactional_id=t, error_code=TXN_DENIED)
        for t in denied
    ]
    return await then_add(broker, request, dispatch, "transaction_states", extra)


async def list_transactions(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    response = await dispatch(broker, request)
    response.transaction_states = [
        t
        for t in response.transaction_states
        if az.allows(request, Op.DESCRIBE, X, t.transactional_id)
    ]
    return response


# --- topics and configs administration ---------------------------------------------------


async def create_topics(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    body = request.body
    if az.allows(request, Op.CREATE, C, CLUSTER_NAME):
        return await dispatch(broker, request)
    denied = split_denied(request, az, body.topics, Op.CREATE, lambda t: t.name)
    extra = [
        create_topics_response.CreatableTopicResult(
            name=t.name,
            error_code=TOPIC_DENIED,
            error_message="Authorization failed.",
            topic_config_error_code=TOPIC_DENIED,
        )
        for t in denied
    ]
    return await then_add(broker, request, dispatch, "topics", extra)


async def delete_topics(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    body = request.body
    if request.api_version < 6:
        denied = [n for n in body.topic_names if not az.allows(request, Op.DELETE, T, n)]
        body.topic_names = [n for n in body.topic_names if n not in denied]
        extra = [
            delete_topics_response.DeletableTopicResult(name=n, error_code=TOPIC_DENIED)
            for n in denied
        ]
    else:

        def name(t: Any) -> str:
            if t.name is not None:
                return t.name
            state = broker.metadata.topic_by_id(t.topic_id)
            return state.name if state is not None else ""

        denied = [
            t for t in body.topics if name(t) and not az.allows(request, Op.DELETE, T, name(t))
        ]
        body.topics = [t for t in body.topics if t not in denied]
        extra = [
            delete_topics_response.DeletableTopicResult(
                name=t.name, topic_id=t.topic_id, error_code=TOPIC_DENIED
            )
            for t in denied
        ]
    return await then_add(broker, request, dispatch, "responses", extra)


async def delete_records(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    denied = split_denied(request, az, request.body.topics, Op.DELETE, lambda t: t.name)
    extra = [
        delete_records_response.DeleteRecordsTopicResult(
            name=t.name,
            partitions=[
                delete_records_response.DeleteRecordsPartitionResult(
                    partition_index=p.partition_index, low_watermark=-1, error_code=TOPIC_DENIED
                )
                for p in t.partitions
            ],
        )
        for t in denied
    ]
    return await then_add(broker, request, dispatch, "topics", extra)


async def create_partitions(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    denied = split_denied(request, az, request.body.topics, Op.ALTER, lambda t: t.name)
    extra = [
        create_partitions_response.CreatePartitionsTopicResult(
            name=t.name, error_code=TOPIC_DENIED, error_message="Authorization failed."
        )
        for t in denied
    ]
    return await then_add(broker, request, dispatch, "results", extra)


_TOPIC_CONFIG, _BROKER_CONFIG, _BROKER_LOGGER = 2, 4, 8


def configs_check(op: int, results_field: str, result_cls: Any) -> Check:
    async def check(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
        body = request.body
        denied = []
        for r in list(body.resources):
            if r.resource_type == _TOPIC_CONFIG:
                ok = az.allows(request, op, T, r.resource_name)
                code = TOPIC_DENIED
            else:
                ok = az.allows(request, op, C, CLUSTER_NAME)
                code = CLUSTER_DENIED
            if not ok:
                denied.append((r, code))
                body.resources.remove(r)
        extra = [
            result_cls(
                error_code=code,
                error_message="Authorization failed.",
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
            for r, code in denied
        ]
        return await then_add(broker, request, dispatch, results_field, extra)

    return check


async def describe_producers(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    denied = split_denied(request, az, request.body.topics, Op.READ, lambda t: t.name)
    extra = [
        describe_producers_response.TopicResponse(
            name=t.name,
            partitions=[
                describe_producers_response.PartitionResponse(
                    partition_index=p, error_code=TOPIC_DENIED
                )
                for p in t.partition_indexes
            ],
        )
        for t in denied
    ]
    return await then_add(broker, request, dispatch, "topics", extra)


async def describe_log_dirs(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    if not az.allows(request, Op.DESCRIBE, C, CLUSTER_NAME):
        if request.api_version >= 3:
            return error_response(request, CLUSTER_DENIED)
        return response_class(request.api_key)(results=[])
    return await dispatch(broker, request)
