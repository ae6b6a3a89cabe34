"""Authorization of the data plane: produce, fetch, offsets, metadata and groups."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trio_broker.protocol._generated import (
    describe_groups_response,
    fetch_response,
    list_offsets_response,
    metadata_response,
    offset_commit_response,
    offset_delete_response,
    offset_fetch_response,
    offset_for_leader_epoch_response,
    produce_response,
    txn_offset_commit_response,
)
from trio_broker.security.acl import Op
from trio_broker.security.authorize_common import (
    CLUSTER_DENIED,
    CLUSTER_NAME,
    GROUP_DENIED,
    GROUP_OPS,
    TOPIC_DENIED,
    TXN_DENIED,
    C,
    Dispatch,
    G,
    T,
    X,
    cluster_check,
    error_response,
    fill_operations,
    operations,
    split_denied,
    then_add,
)

if TYPE_CHECKING:
    from trio_broker.security.authorizer import Authorizer
    from trio_broker.server.requests import Request


# --- produce and fetch -------------------------------------------------------------------


def _denied_topics(denied: list[Any], topic_cls: Any, partition_cls: Any, code: int) -> list[Any]:
    """The answer's entries for topics the principal may not use: each requested partition
    (named `partition_index` in these messages) with `code`."""
    return [
        topic_cls(
            name=t.name,
            partitions=[
                partition_cls(partition_index=p.partition_index, error_code=code)
                for p in t.partitions
            ],
        )
        for t in denied
    ]


async def produce(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    body = request.body
    if body.transactional_id is not None and not az.allows(
        request, Op.WRITE, X, body.transactional_id
    ):
        denied, code = list(body.topic_data), TXN_DENIED
        body.topic_data = []
    else:
        denied, code = (
            split_denied(request, az, body.topic_data, Op.WRITE, lambda t: t.name),
            TOPIC_DENIED,
        )
    if denied and body.acks == 0:
        # No answer can carry the error: Kafka closes the connection instead.
        request.connection.close_when_idle()
        return None
    extra = [
        produce_response.TopicProduceResponse(
            name=t.name,
            partition_responses=[
                produce_response.PartitionProduceResponse(
                    index=p.index, error_code=code, base_offset=-1
                )
                for p in t.partition_data
            ],
        )
        for t in denied
    ]
    return await then_add(broker, request, dispatch, "responses", extra)


def _fetch_name(broker: Any, request: Request) -> Callable[[Any], str]:
    if request.api_version < 13:
        return lambda t: t.topic

    def by_id(t: Any) -> str:
        state = broker.metadata.topic_by_id(t.topic_id)
        # An unknown id is the handler's to answer (UNKNOWN_TOPIC_ID), not a denial.
        return state.name if state is not None else ""

    return by_id


async def fetch(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    body = request.body
    if body.replica_id >= 0 or (request.api_version >= 15 and body.replica_state.replica_id >= 0):
        if not az.allows(request, Op.CLUSTER_ACTION, C, CLUSTER_NAME):
            return error_response(request, CLUSTER_DENIED)
        return await dispatch(broker, request)
    name = _fetch_name(broker, request)
    denied = [t for t in body.topics if name(t) and not az.allows(request, Op.READ, T, name(t))]
    if not denied:
        return await dispatch(broker, request)
    body.topics = [t for t in body.topics if t not in denied]
    body.max_wait_ms = 0  # answer now, with the denied partitions' errors
    extra = [
        fetch_response.FetchableTopicResponse(
            topic=t.topic or name(t),
            topic_id=t.topic_id,
            partitions=[
                fetch_response.PartitionData(
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
    return await then_add(broker, request, dispatch, "responses", extra)


async def list_offsets(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    denied = split_denied(request, az, request.body.topics, Op.DESCRIBE, lambda t: t.name)
    extra = _denied_topics(
        denied,
        list_offsets_response.ListOffsetsTopicResponse,
        list_offsets_response.ListOffsetsPartitionResponse,
        TOPIC_DENIED,
    )
    return await then_add(broker, request, dispatch, "topics", extra)


async def offset_for_leader_epoch(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    if request.body.replica_id >= 0:
        return await cluster_check(Op.CLUSTER_ACTION)(az, broker, request, dispatch)
    denied = split_denied(request, az, request.body.topics, Op.DESCRIBE, lambda t: t.topic)
    extra = [
        offset_for_leader_epoch_response.OffsetForLeaderTopicResult(
            topic=t.topic,
            partitions=[
                offset_for_leader_epoch_response.EpochEndOffset(
                    partition=p.partition, error_code=TOPIC_DENIED
                )
                for p in t.partitions
            ],
        )
        for t in denied
    ]
    return await then_add(broker, request, dispatch, "topics", extra)


# --- metadata: leave out what may not be described; auto-creation needs Create -------------


async def metadata(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
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
                extra.append(
                    metadata_response.MetadataResponseTopic(error_code=TOPIC_DENIED, name=t.name)
                )
                continue
            if name not in meta.topics and may_create and broker.config.auto_create_topics_enable:
                if create_cluster is None:
                    create_cluster = az.allows(request, Op.CREATE, C, CLUSTER_NAME)
                if not create_cluster and not az.allows(request, Op.CREATE, T, name):
                    extra.append(
                        metadata_response.MetadataResponseTopic(error_code=TOPIC_DENIED, name=name)
                    )
                    continue
            kept.append(t)
        body.topics = kept
        if not kept and wanted:
            # Every topic asked for was denied; an empty list would mean "none" (v1+),
            # and v0's empty list means all, so answer without the handler's topics.
            response = await dispatch(broker, request)
            response.topics = extra
            fill_operations(az, request, response)
            return response
        response = await dispatch(broker, request)
        response.topics.extend(extra)
        fill_operations(az, request, response)
        return response
    response = await dispatch(broker, request)
    response.topics = [t for t in response.topics if az.allows(request, Op.DESCRIBE, T, t.name)]
    fill_operations(az, request, response)
    return response


# --- groups and offsets ------------------------------------------------------------------


async def offset_commit(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    body = request.body
    if not az.allows(request, Op.READ, G, body.group_id):
        denied, code = list(body.topics), GROUP_DENIED
        body.topics = []
        response = offset_commit_response.OffsetCommitResponse()
    else:
        denied, code = (
            split_denied(request, az, body.topics, Op.READ, lambda t: t.name),
            TOPIC_DENIED,
        )
        response = None
    extra = _denied_topics(
        denied,
        offset_commit_response.OffsetCommitResponseTopic,
        offset_commit_response.OffsetCommitResponsePartition,
        code,
    )
    if response is not None:
        response.topics = extra
        return response
    return await then_add(broker, request, dispatch, "topics", extra)


async def txn_offset_commit(
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
        denied = split_denied(request, az, body.topics, Op.READ, lambda t: t.name)
    extra = _denied_topics(
        denied,
        txn_offset_commit_response.TxnOffsetCommitResponseTopic,
        txn_offset_commit_response.TxnOffsetCommitResponsePartition,
        code,
    )
    if code != TOPIC_DENIED:
        return txn_offset_commit_response.TxnOffsetCommitResponse(topics=extra)
    return await then_add(broker, request, dispatch, "topics", extra)


def _offset_fetch_topics(
    az: Authorizer, request: Request, topics: list[Any] | None, topic_cls: Any, part_cls: Any
) -> list[Any]:
    if topics is None:
        return []
    denied = split_denied(request, az, topics, Op.DESCRIBE, lambda t: t.name)
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


async def offset_fetch(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    body = request.body
    if request.api_version < 8:
        if not az.allows(request, Op.DESCRIBE, G, body.group_id):
            return error_response(request, GROUP_DENIED)
        all_topics = body.topics is None
        extra = _offset_fetch_topics(
            az,
            request,
            body.topics,
            offset_fetch_response.OffsetFetchResponseTopic,
            offset_fetch_response.OffsetFetchResponsePartition,
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
            az,
            request,
            g.topics,
            offset_fetch_response.OffsetFetchResponseTopics,
            offset_fetch_response.OffsetFetchResponsePartitions,
        )
    response = await dispatch(broker, request)
    for group in response.groups:
        if group.group_id in all_topics:
            group.topics = _visible(az, request, group.topics)
        group.topics.extend(extras.get(group.group_id, []))
    response.groups.extend(
        offset_fetch_response.OffsetFetchResponseGroup(group_id=g, error_code=GROUP_DENIED)
        for g in denied_groups
    )
    return response


async def offset_delete(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    body = request.body
    if not az.allows(request, Op.DELETE, G, body.group_id):
        return error_response(request, GROUP_DENIED)
    denied = split_denied(request, az, body.topics, Op.READ, lambda t: t.name)
    extra = _denied_topics(
        denied,
        offset_delete_response.OffsetDeleteResponseTopic,
        offset_delete_response.OffsetDeleteResponsePartition,
        TOPIC_DENIED,
    )
    return await then_add(broker, request, dispatch, "topics", extra)


async def find_coordinator(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    body = request.body
    if request.api_version >= 6 and body.key_type == 2:
        # A share coordinator's key ("group:topic id:partition"): brokers only (Kafka).
        if az.allows(request, Op.CLUSTER_ACTION, C, CLUSTER_NAME):
            return await dispatch(broker, request)
        from trio_broker.protocol._generated.find_coordinator_response import (
            Coordinator,
            FindCoordinatorResponse,
        )

        return FindCoordinatorResponse(
            coordinators=[
                Coordinator(key=k, node_id=-1, host="", port=-1, error_code=CLUSTER_DENIED)
                for k in body.coordinator_keys
            ],
        )
    txn = request.api_version >= 1 and body.key_type == 1
    rtype, code = (X, TXN_DENIED) if txn else (G, GROUP_DENIED)
    if request.api_version < 4:
        if not az.allows(request, Op.DESCRIBE, rtype, body.key):
            return error_response(request, code, node_id=-1, host="", port=-1, error_message=None)
        return await dispatch(broker, request)
    denied = [k for k in body.coordinator_keys if not az.allows(request, Op.DESCRIBE, rtype, k)]
    body.coordinator_keys = [k for k in body.coordinator_keys if k not in denied]
    from trio_broker.protocol._generated.find_coordinator_response import Coordinator

    extra = [
        Coordinator(key=k, node_id=-1, host="", port=-1, error_code=code, error_message=None)
        for k in denied
    ]
    return await then_add(broker, request, dispatch, "coordinators", extra)


async def describe_groups(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    body = request.body
    denied = [g for g in body.groups if not az.allows(request, Op.DESCRIBE, G, g)]
    body.groups = [g for g in body.groups if g not in denied]
    response = await dispatch(broker, request)
    if getattr(body, "include_authorized_operations", False):
        for g in response.groups:
            g.authorized_operations = operations(az, request, G, g.group_id, GROUP_OPS)
    response.groups.extend(
        describe_groups_response.DescribedGroup(group_id=g, error_code=GROUP_DENIED) for g in denied
    )
    return response


async def describe_cluster(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    # Anyone may list the brokers (as with Metadata); what it may do is the principal's.
    response = await dispatch(broker, request)
    fill_operations(az, request, response)
    return response


async def list_groups(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    response = await dispatch(broker, request)
    if not az.allows(request, Op.DESCRIBE, C, CLUSTER_NAME):
        response.groups = [
            g for g in response.groups if az.allows(request, Op.DESCRIBE, G, g.group_id)
        ]
    return response


async def delete_groups(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    from trio_broker.protocol._generated.delete_groups_response import DeletableGroupResult

    body = request.body
    denied = [g for g in body.groups_names if not az.allows(request, Op.DELETE, G, g)]
    body.groups_names = [g for g in body.groups_names if g not in denied]
    extra = [DeletableGroupResult(group_id=g, error_code=GROUP_DENIED) for g in denied]
    return await then_add(broker, request, dispatch, "results", extra)
