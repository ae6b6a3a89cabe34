"""Authorization of the share group APIs (KIP-932), as Kafka 4.2's KafkaApis does it, and
of the consumer group ones (KIP-848), which it checks the same way.

- ShareGroupHeartbeat, ConsumerGroupHeartbeat: READ on the group, DESCRIBE on every
  subscribed topic (else the whole answer is TOPIC_AUTHORIZATION_FAILED).
- ShareGroupDescribe, ConsumerGroupDescribe: DESCRIBE on each group; a group whose members
  are assigned a topic the principal may not describe (or, in a consumer group, will be:
  the target assignment) is answered TOPIC_AUTHORIZATION_FAILED, without members.
- ShareFetch, ShareAcknowledge: READ on the group; READ on each topic, partition by
  partition. The partitions of a share session are named once and fetched on every later
  request, so the topic check is made where the session is known (the share-partition
  manager asks `broker.authorizer`, cluster/groups/share/share_fetch.py).
- DescribeShareGroupOffsets: DESCRIBE on each group and on each topic (a topic the
  principal may not describe is left out of an answer for all topics).
- AlterShareGroupOffsets: READ on the group and on each topic.
- DeleteShareGroupOffsets: DELETE on the group, READ on each topic.
- The share coordinator's state APIs (Initialize, Read, Write, Delete,
  ReadShareGroupStateSummary): CLUSTER_ACTION, brokers only; refused partition by
  partition with CLUSTER_AUTHORIZATION_FAILED (their answers have no top-level error).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from trio_broker.protocol._generated import (
    alter_share_group_offsets_response,
    consumer_group_describe_response,
    delete_share_group_offsets_response,
    delete_share_group_state_response,
    describe_share_group_offsets_response,
    initialize_share_group_state_response,
    read_share_group_state_response,
    read_share_group_state_summary_response,
    response_class,
    share_group_describe_response,
    write_share_group_state_response,
)
from trio_broker.security.acl import Op
from trio_broker.security.authorize_common import (
    CLUSTER_DENIED,
    CLUSTER_NAME,
    GROUP_DENIED,
    GROUP_OPS,
    TOPIC_DENIED,
    C,
    Check,
    Dispatch,
    G,
    T,
    error_response,
    operations,
)

if TYPE_CHECKING:
    from trio_broker.security.authorizer import Authorizer
    from trio_broker.server.requests import Request

__all__ = [
    "alter_share_group_offsets",
    "delete_share_group_offsets",
    "describe_share_group_offsets",
    "group_describe",
    "group_heartbeat",
    "share_group_read",
    "share_state_check",
]

_ZERO = uuid.UUID(int=0)
_NOT_DESCRIBABLE = "The group has described topic(s) that the client is not authorized to describe."
_DESCRIBED = {
    69: consumer_group_describe_response.DescribedGroup,
    77: share_group_describe_response.DescribedGroup,
}


async def group_heartbeat(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    """ShareGroupHeartbeat, and ConsumerGroupHeartbeat (KIP-848) alike."""
    body = request.body
    if not az.allows(request, Op.READ, G, body.group_id):
        return error_response(request, GROUP_DENIED)
    names = body.subscribed_topic_names
    if names and not all(az.allows(request, Op.DESCRIBE, T, n) for n in names):
        return error_response(request, TOPIC_DENIED)
    return await dispatch(broker, request)


async def share_group_read(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    """ShareFetch and ShareAcknowledge: the group here, the topics in the manager."""
    if not az.allows(request, Op.READ, G, request.body.group_id):
        return error_response(request, GROUP_DENIED)
    return await dispatch(broker, request)


async def group_describe(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
    """ShareGroupDescribe, and ConsumerGroupDescribe (KIP-848) alike: the topics of a
    member's assignment (and of its target assignment, which only consumer groups have)."""
    body = request.body
    group_class = _DESCRIBED[request.api_key]
    denied = [g for g in body.group_ids if not az.allows(request, Op.DESCRIBE, G, g)]
    body.group_ids = [g for g in body.group_ids if g not in denied]
    response = await dispatch(broker, request)
    groups = [group_class(group_id=g, error_code=GROUP_DENIED) for g in denied]
    for g in response.groups:
        if g.error_code == 0 and body.include_authorized_operations:
            g.authorized_operations = operations(az, request, G, g.group_id, GROUP_OPS)
        topics = set()
        for m in g.members:
            for assignment in (m.assignment, getattr(m, "target_assignment", None)):
                if assignment is not None:
                    topics.update(tp.topic_name for tp in assignment.topic_partitions)
        if any(not az.allows(request, Op.DESCRIBE, T, t) for t in topics):
            g = group_class(
                group_id=g.group_id, error_code=TOPIC_DENIED, error_message=_NOT_DESCRIBABLE
            )
        groups.append(g)
    response.groups = groups
    return response


async def describe_share_group_offsets(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    m = describe_share_group_offsets_response
    body = request.body
    order = [g.group_id for g in body.groups]
    denied: list[str] = []
    every_topic: set[str] = set()
    extra: dict[str, list[Any]] = {}
    for g in list(body.groups):
        if not az.allows(request, Op.DESCRIBE, G, g.group_id):
            denied.append(g.group_id)
            body.groups.remove(g)
        elif g.topics is None:
            every_topic.add(g.group_id)
        else:
            hidden = [t for t in g.topics if not az.allows(request, Op.DESCRIBE, T, t.topic_name)]
            g.topics = [t for t in g.topics if t not in hidden]
            extra[g.group_id] = [
                m.DescribeShareGroupOffsetsResponseTopic(
                    topic_name=t.topic_name,
                    topic_id=_ZERO,
                    partitions=[
                        m.DescribeShareGroupOffsetsResponsePartition(
                            partition_index=p, start_offset=-1, error_code=TOPIC_DENIED
                        )
                        for p in t.partitions
                    ],
                )
                for t in hidden
            ]
    response = (
        await dispatch(broker, request) if body.groups else m.DescribeShareGroupOffsetsResponse()
    )
    for group in response.groups:
        if group.error_code:
            continue
        if group.group_id in every_topic:
            group.topics = [
                t for t in group.topics if az.allows(request, Op.DESCRIBE, T, t.topic_name)
            ]
        else:
            group.topics.extend(extra.get(group.group_id, []))
    response.groups.extend(
        m.DescribeShareGroupOffsetsResponseGroup(group_id=g, error_code=GROUP_DENIED)
        for g in denied
    )
    place = {g: i for i, g in reversed(list(enumerate(order)))}
    response.groups.sort(key=lambda g: place.get(g.group_id, len(order)))
    return response


def _topic_id(broker: Any, name: str) -> uuid.UUID:
    state = broker.metadata.topics.get(name)
    return state.topic_id if state is not None else _ZERO


async def alter_share_group_offsets(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    m = alter_share_group_offsets_response
    body = request.body

    def refused(topics: list[Any], code: int) -> list[Any]:
        return [
            m.AlterShareGroupOffsetsResponseTopic(
                topic_name=t.topic_name,
                topic_id=_topic_id(broker, t.topic_name),
                partitions=[
                    m.AlterShareGroupOffsetsResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                    for p in t.partitions
                ],
            )
            for t in topics
        ]

    if not az.allows(request, Op.READ, G, body.group_id):
        return m.AlterShareGroupOffsetsResponse(
            error_code=GROUP_DENIED, responses=refused(body.topics, GROUP_DENIED)
        )
    hidden = [t for t in body.topics if not az.allows(request, Op.READ, T, t.topic_name)]
    body.topics = [t for t in body.topics if t not in hidden]
    response = await dispatch(broker, request)
    if not response.error_code:
        response.responses.extend(refused(hidden, TOPIC_DENIED))
    return response


async def delete_share_group_offsets(
    az: Authorizer, broker: Any, request: Request, dispatch: Dispatch
) -> Any:
    m = delete_share_group_offsets_response
    body = request.body
    if not az.allows(request, Op.DELETE, G, body.group_id):
        return error_response(request, GROUP_DENIED)
    hidden = [t for t in body.topics if not az.allows(request, Op.READ, T, t.topic_name)]
    body.topics = [t for t in body.topics if t not in hidden]
    response = await dispatch(broker, request)
    if not response.error_code:
        response.responses[:0] = [
            m.DeleteShareGroupOffsetsResponseTopic(
                topic_name=t.topic_name, topic_id=_ZERO, error_code=TOPIC_DENIED
            )
            for t in hidden
        ]
    return response


def share_state_check(api_key: int, module: Any, result: str) -> Check:
    """CLUSTER_ACTION for a share coordinator state API: refused, every partition of the
    request gets CLUSTER_AUTHORIZATION_FAILED (Kafka's toGlobalErrorResponse)."""
    result_cls = getattr(module, result)
    response_cls = response_class(api_key)

    async def check(az: Authorizer, broker: Any, request: Request, dispatch: Dispatch) -> Any:
        if az.allows(request, Op.CLUSTER_ACTION, C, CLUSTER_NAME):
            return await dispatch(broker, request)
        return response_cls(
            results=[
                result_cls(
                    topic_id=t.topic_id,
                    partitions=[
                        module.PartitionResult(partition=p.partition, error_code=CLUSTER_DENIED)
                        for p in t.partitions
                    ],
                )
                for t in request.body.topics
            ]
        )

    return check


STATE_CHECKS: dict[int, Check] = {
    83: share_state_check(83, initialize_share_group_state_response, "InitializeStateResult"),
    84: share_state_check(84, read_share_group_state_response, "ReadStateResult"),
    85: share_state_check(85, write_share_group_state_response, "WriteStateResult"),
    86: share_state_check(86, delete_share_group_state_response, "DeleteStateResult"),
    87: share_state_check(87, read_share_group_state_summary_response, "ReadStateSummaryResult"),
}
