"""Every API's authorization, in one place: what each request needs, and the error codes
Kafka answers when it is missing (KafkaApis' checks, rewritten as a table).

A check sees the decoded request before its handler: resources the principal may not
touch are taken out of the request, the handler answers the rest, and the denied ones
come back with TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED. Requests
about one group or transactional id are refused whole. Only a broker with an authorizer
imports this module (security/authorizer.py wraps its dispatch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trio_broker.protocol._generated import (
    alter_configs_response,
    describe_configs_response,
    incremental_alter_configs_response,
)
from trio_broker.security.acl import Op
from trio_broker.security.authorize_admin import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    configs_check,
    create_partitions,
    create_topics,
    delete_records,
    delete_topics,
    describe_log_dirs,
    describe_producers,
    describe_transactions,
    init_producer_id,
    list_transactions,
)
from trio_broker.security.authorize_common import (
    Check,
    Dispatch,
    cluster_check,
    group_check,
    txn_check,
)
from trio_broker.security.authorize_data import (
    delete_groups,
    describe_cluster,
    describe_groups,
    fetch,
    find_coordinator,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    txn_offset_commit,
)
from trio_broker.security.authorize_share import (
    STATE_CHECKS,
    alter_share_group_offsets,
    delete_share_group_offsets,
    describe_share_group_offsets,
    group_describe,
    group_heartbeat,
    share_group_read,
)

if TYPE_CHECKING:
    from trio_broker.server.requests import Request

__all__ = ["authorizing_dispatch"]


async def authorizing_dispatch(broker: Any, request: Request, dispatch: Dispatch) -> Any:
    key = request.api_key
    if key in _CHECKED_BY_HANDLER:
        return await dispatch(broker, request)
    # An API this table does not know yet (inter-broker ones, as they are added) is
    # for brokers only: Kafka's CLUSTER_ACTION.
    check = _CHECKS.get(key, _CLUSTER_ACTION)
    return await check(broker.authorizer, broker, request, dispatch)


# ApiVersions and SASL need no permission; the ACL, quota and SCRAM APIs check in their
# handlers.


_CHECKED_BY_HANDLER = frozenset({17, 18, 36, 29, 30, 31, 48, 49, 50, 51})


_CLUSTER_ACTION = cluster_check(Op.CLUSTER_ACTION)


_CHECKS: dict[int, Check] = {
    0: produce,
    1: fetch,
    2: list_offsets,
    3: metadata,
    8: offset_commit,
    9: offset_fetch,
    10: find_coordinator,
    11: group_check(Op.READ),  # JoinGroup
    12: group_check(Op.READ),  # Heartbeat
    13: group_check(Op.READ),  # LeaveGroup
    14: group_check(Op.READ),  # SyncGroup
    15: describe_groups,
    16: list_groups,
    19: create_topics,
    20: delete_topics,
    21: delete_records,
    22: init_producer_id,
    23: offset_for_leader_epoch,
    24: add_partitions_to_txn,
    25: add_offsets_to_txn,
    26: txn_check(),  # EndTxn
    27: cluster_check(Op.CLUSTER_ACTION),  # WriteTxnMarkers
    28: txn_offset_commit,
    32: configs_check(
        Op.DESCRIBE_CONFIGS, "results", describe_configs_response.DescribeConfigsResult
    ),
    33: configs_check(
        Op.ALTER_CONFIGS, "responses", alter_configs_response.AlterConfigsResourceResponse
    ),
    34: cluster_check(Op.ALTER),  # AlterReplicaLogDirs
    35: describe_log_dirs,
    37: create_partitions,
    42: delete_groups,
    44: configs_check(
        Op.ALTER_CONFIGS,
        "responses",
        incremental_alter_configs_response.AlterConfigsResourceResponse,
    ),
    47: offset_delete,
    60: describe_cluster,
    61: describe_producers,
    65: describe_transactions,
    66: list_transactions,
    68: group_heartbeat,  # ConsumerGroupHeartbeat
    69: group_describe,  # ConsumerGroupDescribe
    76: group_heartbeat,  # ShareGroupHeartbeat
    77: group_describe,  # ShareGroupDescribe
    78: share_group_read,  # ShareFetch
    79: share_group_read,  # ShareAcknowledge
    **STATE_CHECKS,  # the share coordinator's, 83-87
    90: describe_share_group_offsets,
    91: alter_share_group_offsets,
    92: delete_share_group_offsets,
}
