"""Every API's authorization, in one place: what each request needs, and the error codes
Kafka answers when it is missing (KafkaApis' checks, rewritten as a table).

A check sees the decoded request before its handler: resources the principal may not
touch are taken out of the request, the handler answers the rest, and the denied ones
come back with TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED. Requests
about one group or transactional id are refused whole. Only a broker with an authorizer
imports this module (security/authorizer.py wraps its dispatch).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated import (
    alter_configs_response as _ac,
)
from trio_broker.protocol._generated import (
    create_partitions_response as _cp,
)
from trio_broker.protocol._generated import (
    create_topics_response as _ct,
)
from trio_broker.protocol._generated import (
    delete_records_response as _dr,
)
from trio_broker.protocol._generated import (
    delete_topics_response as _dt,
)
from trio_broker.protocol._generated import (
    describe_configs_response as _dc,
)
from trio_broker.protocol._generated import (
    describe_groups_response as _dg,
)
from trio_broker.protocol._generated import (
    describe_producers_response as _dp,
)
from trio_broker.protocol._generated import (
    describe_transactions_response as _dx,
)
from trio_broker.protocol._generated import (
    fetch_response as _f,
)
from trio_broker.protocol._generated import (
    incremental_alter_configs_response as _iac,
)
from trio_broker.protocol._generated import (
    list_offsets_response as _lo,
)
from trio_broker.protocol._generated import (
    metadata_response as _md,
)
from trio_broker.protocol._generated import (
    offset_commit_response as _oc,
)
from trio_broker.protocol._generated import (
    offset_delete_response as _od,
)
from trio_broker.protocol._generated import (
    offset_fetch_response as _of,
)
from trio_broker.protocol._generated import (
    offset_for_leader_epoch_response as _ole,
)
from trio_broker.protocol._generated import (
    produce_response as _p,
)
from trio_broker.protocol._generated import response_class
from trio_broker.protocol._generated import (
    txn_offset_commit_response as _toc,
)
from trio_broker.security.acl import CLUSTER_NAME, Op, Resource
from trio_broker.server.requests import DELAYED

if TYPE_CHECKING:
    from trio_broker.security.authorizer import Authorizer
    from trio_broker.server.requests import Request

__all__ = ["authorizing_dispatch"]

T, G, C, X = Resource.TOPIC, Resource.GROUP, Resource.CLUSTER, Resource.TRANSACTIONAL_ID
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

Dispatch = Callable[[Any, "Request"], Awaitable[Any]]
Check = Callable[["Authorizer", Any, "Request", Dispatch], Awaitable[Any]]


async def authorizing_dispatch(broker: Any, request: Request, dispatch: Dispatch) -> Any:
    key = request.api_key
    if key in _CHECKED_BY_HANDLER:
        return await dispatch(broker, request)
    # An API this table does not know yet (inter-broker ones, as they are added) is
    # for brokers only: Kafka's CLUSTER_ACTION.
    check = _CHECKS.get(key, _CLUSTER_ACTION)
    return await check(broker.authorizer, broker, request, dispatch)


def _error(request: Request, code: int, **fields: Any) -> Any:
    """A response of the request's API carrying only a top-level error code."""
    return response_class(request.api_key)(error_code=code, **fields)


def _cluster(op: int, code: int = CLUSTER_DENIED) -> Check:
    async def check(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
        if not az.allows(request, op, C, CLUSTER_NAME):
            return _error(request, code)
        return await dispatch(broker, request)

    return check


def _group(op: int) -> Check:
    async def check(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
        if not az.allows(request, op, G, request.body.group_id):
            return _error(request, GROUP_DENIED)
        return await dispatch(broker, request)

    return check


def _txn(op: int = Op.WRITE) -> Check:
    async def check(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
        if not az.allows(request, op, X, request.body.transactional_id):
            return _error(request, TXN_DENIED)
        return await dispatch(broker, request)

    return check


def _split(request: Request, az: Authorizer, items: list[Any], op: int, name: Any) -> list[Any]:
    """Remove the items naming resources the principal may not `op`; return those."""
    allowed, denied = [], []
    for item in items:
        (allowed if az.allows(request, op, T, name(item)) else denied).append(item)
    items[:] = allowed
    return denied


async def _then_add(
    broker: Any, request: Request, dispatch: Dispatch, field: str, extra: list[Any]
) -> Any:
    response = await dispatch(broker, request)
    if extra and response is not None and response is not DELAYED:
        getattr(response, field).extend(extra)
    return response


# --- produce and fetch -------------------------------------------------------------------


async def _produce(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    body = request.body
    if body.transactional_id is not None and not az.allows(
        request, Op.WRITE, X, body.transactional_id
    ):
        denied, code = list(body.topic_data), TXN_DENIED
        body.topic_data = []
    else:
        denied, code = (
            _split(request, az, body.topic_data, Op.WRITE, lambda t: t.name),
            TOPIC_DENIED,
        )
    if denied and body.acks == 0:
        # No answer can carry the error: Kafka closes the connection instead.
        request.connection.close_when_idle()
        return None
    extra = [
        _p.TopicProduceResponse(
            name=t.name,
            partition_responses=[
                _p.PartitionProduceResponse(index=p.index, error_code=code, base_offset=-1)
                for p in t.partition_data
            ],
        )
        for t in denied
    ]
    return await _then_add(broker, request, dispatch, "responses", extra)


def _fetch_name(broker: Any, request: Request) -> Callable[[Any], str]:
    if request.api_version < 13:
        return lambda t: t.topic

    def by_id(t: Any) -> str:
        state = broker.metadata.topic_by_id(t.topic_id)
        # An unknown id is the handler's to answer (UNKNOWN_TOPIC_ID), not a denial.
        return state.name if state is not None else ""

    return by_id


async def _fetch(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    body = request.body
    if body.replica_id >= 0 or (request.api_version >= 15 and body.replica_state.replica_id >= 0):
        if not az.allows(request, Op.CLUSTER_ACTION, C, CLUSTER_NAME):
            return _error(request, CLUSTER_DENIED)
        return await dispatch(broker, request)
    name = _fetch_name(broker, request)
    denied = [t for t in body.topics if name(t) and not az.allows(request, Op.READ, T, name(t))]
    if not denied:
        return await dispatch(broker, request)
    body.topics = [t for t in body.topics if t not in denied]
    body.max_wait_ms = 0  # answer now, with the denied partitions' errors
    extra = [
        _f.FetchableTopicResponse(
            topic=t.topic or name(t),
            topic_id=t.topic_id,
            partitions=[
                _f.PartitionData(
                    partition_index=p.partition,
                    error_code=TOPIC_DENIED,
                    high_watermark=-1,
                    records=b"",
                )
                for p in t.partitions
            ],
        )
        for t in denied
    ]
    return await _then_add(broker, request, dispatch, "responses", extra)


async def _list_offsets(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    denied = _split(request, az, request.body.topics, Op.DESCRIBE, lambda t: t.name)
    extra = [
        _lo.ListOffsetsTopicResponse(
            name=t.name,
            partitions=[
                _lo.ListOffsetsPartitionResponse(
                    partition_index=p.partition_index, error_code=TOPIC_DENIED
                )
                for p in t.partitions
            ],
        )
        for t in denied
    ]
    return await _then_add(broker, request, dispatch, "topics", extra)


async def _offset_for_leader_epoch(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    if request.body.replica_id >= 0:
        return await _cluster(Op.CLUSTER_ACTION)(az, broker, request, dispatch)
    denied = _split(request, az, request.body.topics, Op.DESCRIBE, lambda t: t.topic)
    extra = [
        _ole.OffsetForLeaderTopicResult(
            topic=t.topic,
            partitions=[
                _ole.EpochEndOffset(partition=p.partition, error_code=TOPIC_DENIED)
                for p in t.partitions
            ],
        )
        for t in denied
    ]
    return await _then_add(broker, request, dispatch, "topics", extra)


# --- what a principal may do, as the bit fields Metadata/DescribeCluster/DescribeGroups carry
_TOPIC_OPS = (
    Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS,
    Op.ALTER_CONFIGS,
)  # fmt: skip
_GROUP_OPS = (Op.READ, Op.DESCRIBE, Op.DELETE)
_CLUSTER_OPS = (
    Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
    Op.IDEMPOTENT_WRITE,
)  # fmt: skip


def _operations(
    az: Authorizer, request: Request, rtype: int, name: str, ops: tuple[int, ...]
) -> int:
    return sum(1 << op for op in ops if az.allows(request, op, rtype, name))


def _fill_operations(az: Authorizer, request: Request, response: Any) -> None:
    """Replace what the handler reported (everything, as with no authorizer) by what this
    principal may do, wherever the request asked for it."""
    body = request.body
    if getattr(body, "include_cluster_authorized_operations", False):
        # Kafka: none at all unless the principal may describe the cluster.
        if not az.allows(request, Op.DESCRIBE, C, CLUSTER_NAME):
            response.cluster_authorized_operations = 0
        else:
            response.cluster_authorized_operations = _operations(
                az, request, C, CLUSTER_NAME, _CLUSTER_OPS
            )
    if getattr(body, "include_topic_authorized_operations", False):
        for t in response.topics:
            if t.error_code == ErrorCode.NONE and t.name:
                t.topic_authorized_operations = _operations(az, request, T, t.name, _TOPIC_OPS)


# --- metadata: leave out what may not be described; auto-creation needs Create -------------


async def _metadata(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    body = request.body
    meta = broker.metadata
    extra: list[Any] = []
    wanted = body.topics
    if wanted is not None and not (request.api_version == 0 and not wanted):
        may_create = request.api_version < 4 or body.allow_auto_topic_creation
        create_cluster = None
        kept = []
        for t in wanted:
            name = t.name
            if name is None:
                state = meta.topic_by_id(t.topic_id)
                if state is None:
                    kept.append(t)
                    continue
                name = state.name
            if not az.allows(request, Op.DESCRIBE, T, name):
                extra.append(_md.MetadataResponseTopic(error_code=TOPIC_DENIED, name=t.name))
                continue
            if name not in meta.topics and may_create and broker.config.auto_create_topics_enable:
                if create_cluster is None:
                    create_cluster = az.allows(request, Op.CREATE, C, CLUSTER_NAME)
                if not create_cluster and not az.allows(request, Op.CREATE, T, name):
                    extra.append(_md.MetadataResponseTopic(error_code=TOPIC_DENIED, name=name))
                    continue
            kept.append(t)
        body.topics = kept
        if not kept and wanted:
            # Every topic asked for was denied; an empty list would mean "none" (v1+),
            # and v0's empty list means all, so answer without the handler's topics.
            response = await dispatch(broker, request)
            response.topics = extra
            _fill_operations(az, request, response)
            return response
        response = await dispatch(broker, request)
        response.topics.extend(extra)
        _fill_operations(az, request, response)
        return response
    response = await dispatch(broker, request)
    response.topics = [t for t in response.topics if az.allows(request, Op.DESCRIBE, T, t.name)]
    _fill_operations(az, request, response)
    return response


# --- groups and offsets ------------------------------------------------------------------


async def _offset_commit(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    body = request.body
    if not az.allows(request, Op.READ, G, body.group_id):
        denied, code = list(body.topics), GROUP_DENIED
        body.topics = []
        response = _oc.OffsetCommitResponse()
    else:
        denied, code = _split(request, az, body.topics, Op.READ, lambda t: t.name), TOPIC_DENIED
        response = None
    extra = [
        _oc.OffsetCommitResponseTopic(
            name=t.name,
            partitions=[
                _oc.OffsetCommitResponsePartition(
                    partition_index=p.partition_index, error_code=code
                )
                for p in t.partitions
            ],
        )
        for t in denied
    ]
    if response is not None:
        response.topics = extra
        return response
    return await _then_add(broker, request, dispatch, "topics", extra)


async def _txn_offset_commit(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    body = request.body
    code = None
    if not az.allows(request, Op.WRITE, X, body.transactional_id):
        code = TXN_DENIED
    elif not az.allows(request, Op.READ, G, body.group_id):
        code = GROUP_DENIED
    if code is not None:
        denied = list(body.topics)
        body.topics = []
    else:
        code = TOPIC_DENIED
        denied = _split(request, az, body.topics, Op.READ, lambda t: t.name)
    extra = [
        _toc.TxnOffsetCommitResponseTopic(
            name=t.name,
            partitions=[
                _toc.TxnOffsetCommitResponsePartition(
                    partition_index=p.partition_index, error_code=code
                )
                for p in t.partitions
            ],
        )
        for t in denied
    ]
    if code != TOPIC_DENIED:
        return _toc.TxnOffsetCommitResponse(topics=extra)
    return await _then_add(broker, request, dispatch, "topics", extra)


def _offset_fetch_topics(
    az: Authorizer, request: Request, topics: list[Any] | None, topic_cls: Any, part_cls: Any
) -> list[Any]:
    if topics is None:
        return []
    denied = _split(request, az, topics, Op.DESCRIBE, lambda t: t.name)
    return [
        topic_cls(
            name=t.name,
            partitions=[
                part_cls(
                    partition_index=p,
                    committed_offset=-1,
                    metadata="",
                    error_code=TOPIC_DENIED,
                )
                for p in t.partition_indexes
            ],
        )
        for t in denied
    ]


def _visible(az: Authorizer, request: Request, topics: list[Any]) -> list[Any]:
    return [t for t in topics if az.allows(request, Op.DESCRIBE, T, t.name)]


async def _offset_fetch(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    body = request.body
    if request.api_version < 8:
        if not az.allows(request, Op.DESCRIBE, G, body.group_id):
            return _error(request, GROUP_DENIED)
        all_topics = body.topics is None
        extra = _offset_fetch_topics(
            az, request, body.topics, _of.OffsetFetchResponseTopic, _of.OffsetFetchResponsePartition
        )
        response = await dispatch(broker, request)
        if all_topics:
            response.topics = _visible(az, request, response.topics)
        response.topics.extend(extra)
        return response
    denied_groups = []
    extras: dict[str, list[Any]] = {}
    all_topics: set[str] = set()
    for g in list(body.groups):
        if not az.allows(request, Op.DESCRIBE, G, g.group_id):
            denied_groups.append(g.group_id)
            body.groups.remove(g)
            continue
        if g.topics is None:
            all_topics.add(g.group_id)
        extras[g.group_id] = _offset_fetch_topics(
            az, request, g.topics, _of.OffsetFetchResponseTopics, _of.OffsetFetchResponsePartitions
        )
    response = await dispatch(broker, request)
    for group in response.groups:
        if group.group_id in all_topics:
            group.topics = _visible(az, request, group.topics)
        group.topics.extend(extras.get(group.group_id, []))
    response.groups.extend(
        _of.OffsetFetchResponseGroup(group_id=g, error_code=GROUP_DENIED) for g in denied_groups
    )
    return response


async def _offset_delete(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    body = request.body
    if not az.allows(request, Op.DELETE, G, body.group_id):
        return _error(request, GROUP_DENIED)
    denied = _split(request, az, body.topics, Op.READ, lambda t: t.name)
    extra = [
        _od.OffsetDeleteResponseTopic(
            name=t.name,
            partitions=[
                _od.OffsetDeleteResponsePartition(
                    partition_index=p.partition_index, error_code=TOPIC_DENIED
                )
                for p in t.partitions
            ],
        )
        for t in denied
    ]
    return await _then_add(broker, request, dispatch, "topics", extra)


async def _find_coordinator(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    body = request.body
    txn = request.api_version >= 1 and body.key_type == 1
    rtype, code = (X, TXN_DENIED) if txn else (G, GROUP_DENIED)
    if request.api_version < 4:
        if not az.allows(request, Op.DESCRIBE, rtype, body.key):
            return _error(request, code, node_id=-1, host="", port=-1, error_message=None)
        return await dispatch(broker, request)
    denied = [k for k in body.coordinator_keys if not az.allows(request, Op.DESCRIBE, rtype, k)]
    body.coordinator_keys = [k for k in body.coordinator_keys if k not in denied]
    from trio_broker.protocol._generated.find_coordinator_response import Coordinator

    extra = [
        Coordinator(key=k, node_id=-1, host="", port=-1, error_code=code, error_message=None)
        for k in denied
    ]
    return await _then_add(broker, request, dispatch, "coordinators", extra)


async def _describe_groups(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    body = request.body
    denied = [g for g in body.groups if not az.allows(request, Op.DESCRIBE, G, g)]
    body.groups = [g for g in body.groups if g not in denied]
    response = await dispatch(broker, request)
    if getattr(body, "include_authorized_operations", False):
        for g in response.groups:
            g.authorized_operations = _operations(az, request, G, g.group_id, _GROUP_OPS)
    response.groups.extend(_dg.DescribedGroup(group_id=g, error_code=GROUP_DENIED) for g in denied)
    return response


async def _describe_cluster(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    # Anyone may list the brokers (as with Metadata); what it may do is the principal's.
    response = await dispatch(broker, request)
    _fill_operations(az, request, response)
    return response


async def _list_groups(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    response = await dispatch(broker, request)
    if not az.allows(request, Op.DESCRIBE, C, CLUSTER_NAME):
        response.groups = [
            g for g in response.groups if az.allows(request, Op.DESCRIBE, G, g.group_id)
        ]
    return response


async def _delete_groups(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    from trio_broker.protocol._generated.delete_groups_response import DeletableGroupResult

    body = request.body
    denied = [g for g in body.groups_names if not az.allows(request, Op.DELETE, G, g)]
    body.groups_names = [g for g in body.groups_names if g not in denied]
    extra = [DeletableGroupResult(group_id=g, error_code=GROUP_DENIED) for g in denied]
    return await _then_add(broker, request, dispatch, "results", extra)


# --- transactions and producer ids -------------------------------------------------------


async def _init_producer_id(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    txn_id = request.body.transactional_id
    if txn_id is not None:
        if not az.allows(request, Op.WRITE, X, txn_id):
            return _error(request, TXN_DENIED, producer_id=-1, producer_epoch=-1)
    elif not (
        az.allows(request, Op.IDEMPOTENT_WRITE, C, CLUSTER_NAME)
        or az.allows_any(request, Op.WRITE, T)
    ):
        return _error(request, CLUSTER_DENIED, producer_id=-1, producer_epoch=-1)
    return await dispatch(broker, request)


async def _add_offsets_to_txn(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    body = request.body
    if not az.allows(request, Op.WRITE, X, body.transactional_id):
        return _error(request, TXN_DENIED)
    if not az.allows(request, Op.READ, G, body.group_id):
        return _error(request, GROUP_DENIED)
    return await dispatch(broker, request)


async def _add_partitions_to_txn(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    from trio_broker.protocol._generated import add_partitions_to_txn_response as r

    body = request.body
    if request.api_version >= 4:
        if not az.allows(request, Op.CLUSTER_ACTION, C, CLUSTER_NAME) and not all(
            az.allows(request, Op.WRITE, X, t.transactional_id) for t in body.transactions
        ):
            return _error(request, CLUSTER_DENIED)
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


async def _describe_transactions(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    body = request.body
    ids = body.transactional_ids
    denied = [t for t in ids if not az.allows(request, Op.DESCRIBE, X, t)]
    body.transactional_ids = [t for t in ids if t not in denied]
    extra = [_dx.TransactionState(transactional_id=t, error_code=TXN_DENIED) for t in denied]
    return await _then_add(broker, request, dispatch, "transaction_states", extra)


async def _list_transactions(
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


async def _create_topics(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    body = request.body
    if az.allows(request, Op.CREATE, C, CLUSTER_NAME):
        return await dispatch(broker, request)
    denied = _split(request, az, body.topics, Op.CREATE, lambda t: t.name)
    extra = [
        _ct.CreatableTopicResult(
            name=t.name,
            error_code=TOPIC_DENIED,
            error_message="Authorization failed.",
            topic_config_error_code=TOPIC_DENIED,
        )
        for t in denied
    ]
    return await _then_add(broker, request, dispatch, "topics", extra)


async def _delete_topics(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    body = request.body
    if request.api_version < 6:
        denied = [n for n in body.topic_names if not az.allows(request, Op.DELETE, T, n)]
        body.topic_names = [n for n in body.topic_names if n not in denied]
        extra = [_dt.DeletableTopicResult(name=n, error_code=TOPIC_DENIED) for n in denied]
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
            _dt.DeletableTopicResult(name=t.name, topic_id=t.topic_id, error_code=TOPIC_DENIED)
            for t in denied
        ]
    return await _then_add(broker, request, dispatch, "responses", extra)


async def _delete_records(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    denied = _split(request, az, request.body.topics, Op.DELETE, lambda t: t.name)
    extra = [
        _dr.DeleteRecordsTopicResult(
            name=t.name,
            partitions=[
                _dr.DeleteRecordsPartitionResult(
                    partition_index=p.partition_index, low_watermark=-1, error_code=TOPIC_DENIED
                )
                for p in t.partitions
            ],
        )
        for t in denied
    ]
    return await _then_add(broker, request, dispatch, "topics", extra)


async def _create_partitions(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    denied = _split(request, az, request.body.topics, Op.ALTER, lambda t: t.name)
    extra = [
        _cp.CreatePartitionsTopicResult(
            name=t.name, error_code=TOPIC_DENIED, error_message="Authorization failed."
        )
        for t in denied
    ]
    return await _then_add(broker, request, dispatch, "results", extra)


_TOPIC_CONFIG, _BROKER_CONFIG, _BROKER_LOGGER = 2, 4, 8


def _configs(op: int, results_field: str, result_cls: Any) -> Check:
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
        return await _then_add(broker, request, dispatch, results_field, extra)

    return check


async def _describe_producers(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    denied = _split(request, az, request.body.topics, Op.READ, lambda t: t.name)
    extra = [
        _dp.TopicResponse(
            name=t.name,
            partitions=[
                _dp.PartitionResponse(partition_index=p, error_code=TOPIC_DENIED)
                for p in t.partition_indexes
            ],
        )
        for t in denied
    ]
    return await _then_add(broker, request, dispatch, "topics", extra)


async def _describe_log_dirs(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    if not az.allows(request, Op.DESCRIBE, C, CLUSTER_NAME):
        if request.api_version >= 3:
            return _error(request, CLUSTER_DENIED)
        return response_class(request.api_key)(results=[])
    return await dispatch(broker, request)


# ApiVersions and SASL need no permission; the ACL, quota and SCRAM APIs check in their
# handlers.
_CHECKED_BY_HANDLER = frozenset({17, 18, 36, 29, 30, 31, 48, 49, 50, 51})
_CLUSTER_ACTION = _cluster(Op.CLUSTER_ACTION)

_CHECKS: dict[int, Check] = {
    0: _produce,
    1: _fetch,
    2: _list_offsets,
    3: _metadata,
    8: _offset_commit,
    9: _offset_fetch,
    10: _find_coordinator,
    11: _group(Op.READ),  # JoinGroup
    12: _group(Op.READ),  # Heartbeat
    13: _group(Op.READ),  # LeaveGroup
    14: _group(Op.READ),  # SyncGroup
    15: _describe_groups,
    16: _list_groups,
    19: _create_topics,
    20: _delete_topics,
    21: _delete_records,
    22: _init_producer_id,
    23: _offset_for_leader_epoch,
    24: _add_partitions_to_txn,
    25: _add_offsets_to_txn,
    26: _txn(),  # EndTxn
    27: _cluster(Op.CLUSTER_ACTION),  # WriteTxnMarkers
    28: _txn_offset_commit,
    32: _configs(Op.DESCRIBE_CONFIGS, "results", _dc.DescribeConfigsResult),
    33: _configs(Op.ALTER_CONFIGS, "responses", _ac.AlterConfigsResourceResponse),
    35: _describe_log_dirs,
    37: _create_partitions,
    42: _delete_groups,
    44: _configs(Op.ALTER_CONFIGS, "responses", _iac.AlterConfigsResourceResponse),
    47: _offset_delete,
    60: _describe_cluster,
    61: _describe_producers,
    65: _describe_transactions,
    66: _list_transactions,
}
