"""A request of a version this broker knows the layout of but does not serve.

Kafka answers what it can: each API's error response (AbstractRequest.getErrorResponse)
carries UNSUPPORTED_VERSION where the client looks for an error, per partition, topic or
resource when the version has no top-level error code. That is what a client gets here
when it sends a version `min.api.versions=4.0` removed (Produce v2, say), or one newer than
this broker serves. An API whose answer at that version has no error field anywhere is not
answered: the connection is closed, and the log line says why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated import response_class
from trio_broker.protocol.quirks import api_name

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

__all__ = ["answer_unsupported"]

logger = logging.getLogger(__name__)

_CODE = ErrorCode.UNSUPPORTED_VERSION


def _produce(body: Any, version: int) -> Any:
    from trio_broker.protocol._generated import produce_response as r

    return r.ProduceResponse(
        responses=[
            r.TopicProduceResponse(
                name=t.name,
                partition_responses=[
                    r.PartitionProduceResponse(index=p.index, error_code=_CODE, base_offset=-1)
                    for p in t.partition_data
                ],
            )
            for t in body.topic_data
        ]
    )


def _fetch(body: Any, version: int) -> Any:
    from trio_broker.protocol._generated import fetch_response as r

    return r.FetchResponse(
        error_code=_CODE,
        responses=[]
        if version >= 7
        else [
            r.FetchableTopicResponse(
                topic=t.topic,
                partitions=[
                    r.PartitionData(
                        partition_index=p.partition,
                        error_code=_CODE,
                        high_watermark=-1,
                        records=b"",
                    )
                    for p in t.partitions
                ],
            )
            for t in body.topics
        ],
    )


def _list_offsets(body: Any, version: int) -> Any:
    from trio_broker.protocol._generated import list_offsets_response as r

    return r.ListOffsetsResponse(
        topics=[
            r.ListOffsetsTopicResponse(
                name=t.name,
                partitions=[
                    r.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index, error_code=_CODE
                    )
                    for p in t.partitions
                ],
            )
            for t in body.topics
        ]
    )


def _offset_commit(body: Any, version: int) -> Any:
    from trio_broker.protocol._generated import offset_commit_response as r

    return r.OffsetCommitResponse(
        topics=[
            r.OffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    r.OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=_CODE
                    )
                    for p in t.partitions
                ],
            )
            for t in body.topics
        ]
    )


def _offset_fetch(body: Any, version: int) -> Any:
    from trio_broker.protocol._generated import offset_fetch_response as r

    if version >= 2:
        return None  # a top-level error code
    return r.OffsetFetchResponse(
        topics=[
            r.OffsetFetchResponseTopic(
                name=t.name,
                partitions=[
                    r.OffsetFetchResponsePartition(
                        partition_index=i, committed_offset=-1, error_code=_CODE
                    )
                    for i in t.partition_indexes
                ],
            )
            for t in body.topics or []
        ]
    )


def _find_coordinator(body: Any, version: int) -> Any:
    from trio_broker.protocol._generated import find_coordinator_response as r

    if version < 4:
        return None  # a top-level error code
    return r.FindCoordinatorResponse(
        coordinators=[
            r.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=_CODE)
            for k in body.coordinator_keys
        ]
    )


def _create_topics(body: Any, version: int) -> Any:
    from trio_broker.protocol._generated import create_topics_response as r

    return r.CreateTopicsResponse(
        topics=[r.CreatableTopicResult(name=t.name, error_code=_CODE) for t in body.topics]
    )


def _delete_topics(body: Any, version: int) -> Any:
    from trio_broker.protocol._generated import delete_topics_response as r

    names = body.topic_names if version < 6 else [t.name for t in body.topics]
    return r.DeleteTopicsResponse(
        responses=[r.DeletableTopicResult(name=n, error_code=_CODE) for n in names]
    )


def _describe_configs(body: Any, version: int) -> Any:
    from trio_broker.protocol._generated import describe_configs_response as r

    return r.DescribeConfigsResponse(
        results=[
            r.DescribeConfigsResult(
                error_code=_CODE,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
            )
            for res in body.resources
        ]
    )


def _offset_for_leader_epoch(body: Any, version: int) -> Any:
    from trio_broker.protocol._generated import offset_for_leader_epoch_response as r

    return r.OffsetForLeaderEpochResponse(
        topics=[
            r.OffsetForLeaderTopicResult(
                topic=t.topic,
                partitions=[
                    r.EpochEndOffset(
                        partition=p.partition, error_code=_CODE, leader_epoch=-1, end_offset=-1
                    )
                    for p in t.partitions
                ],
            )
            for t in body.topics
        ]
    )


def _alter_replica_log_dirs(body: Any, version: int) -> Any:
    from trio_broker.protocol._generated import alter_replica_log_dirs_response as r

    return r.AlterReplicaLogDirsResponse(
        results=[
            r.AlterReplicaLogDirTopicResult(
                topic_name=t.name,
                partitions=[
                    r.AlterReplicaLogDirPartitionResult(partition_index=i, error_code=_CODE)
                    for i in t.partitions
                ],
            )
            for d in body.dirs
            for t in d.topics
        ]
    )


def _create_acls(body: Any, version: int) -> Any:
    from trio_broker.protocol._generated import create_acls_response as r

    return r.CreateAclsResponse(
        results=[r.AclCreationResult(error_code=_CODE) for _ in body.creations]
    )


def _delete_acls(body: Any, version: int) -> Any:
    from trio_broker.protocol._generated import delete_acls_response as r

    return r.DeleteAclsResponse(
        filter_results=[r.DeleteAclsFilterResult(error_code=_CODE) for _ in body.filters]
    )


# APIs whose answer carries its errors per item (at least at the versions Kafka 4.0
# removed); a builder returning None falls back to the top-level error code.
_PER_ITEM: dict[int, Callable[[Any, int], Any]] = {
    0: _produce,
    1: _fetch,
    2: _list_offsets,
    8: _offset_commit,
    9: _offset_fetch,
    10: _find_coordinator,
    19: _create_topics,
    20: _delete_topics,
    23: _offset_for_leader_epoch,
    30: _create_acls,
    31: _delete_acls,
    32: _describe_configs,
    34: _alter_replica_log_dirs,
}


def _top_level(api_key: int, version: int) -> Any:
    cls = response_class(api_key)
    for name, _type, (low, high), *_ in cls._SCHEMA:
        if name == "error_code" and low <= version <= high:
            return cls(error_code=_CODE)
    return None


def answer_unsupported(broker: Broker, request: Request) -> Any:
    """The UNSUPPORTED_VERSION answer to `request`, or None after closing its connection."""
    key, version = request.api_key, request.api_version
    low, high = broker.supported[key]
    build = _PER_ITEM.get(key)
    response = build(request.body, version) if build is not None else None
    if response is None:
        response = _top_level(key, version)
    baseline = broker.config.min_api_versions
    if response is None:
        request.connection.log_client(
            f"unsupported api {key}",
            logging.INFO,
            "[conn %s] %s v%d from client %r is not served (v%d-v%d here, min.api.versions=%s) "
            "and its answer has no error code; closing",
            request.connection.id,
            api_name(key),
            version,
            request.parsed.client_id,
            low,
            high,
            baseline,
        )
        request.connection.close()
        return None
    request.connection.log_client(
        f"unsupported api {key}",
        logging.INFO,
        "[conn %s] %s v%d from client %r is not served (v%d-v%d here, min.api.versions=%s); "
        "answered UNSUPPORTED_VERSION",
        request.connection.id,
        api_name(key),
        version,
        request.parsed.client_id,
        low,
        high,
        baseline,
    )
    if key == 0 and request.body.acks == 0:
        # acks=0 gets no answer; Kafka closes the connection of a failed one.
        request.connection.close()
        return None
    return response
