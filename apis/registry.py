"""The registry of implemented APIs: which versions the broker serves, and who handles them.

ApiVersions answers from this table, so a client is never offered a version without a
handler. Handler modules are imported on first use: start-up needs only the table.

The table is Kafka 3.9's: every version it serves, down to Produce v0 and Fetch v0 with
message formats 0 and 1 (converted by apis/old_formats/, never on the v3+/v4+ paths).
`min.api.versions=4.0` serves Kafka 4.0's baseline instead (KIP-896): the lowest versions
below are raised to `KAFKA_40_MIN_VERSIONS`. A request of a version the broker knows the
layout of but does not serve is answered UNSUPPORTED_VERSION (apis/unsupported.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import attrs

from trio_broker.server.requests import NOT_NOW

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

__all__ = [
    "API_SPECS",
    "KAFKA_40_MIN_VERSIONS",
    "NOT_ADVERTISED",
    "ApiSpec",
    "advertised_versions",
    "answer_batch_now",
    "answer_now",
    "dispatch",
    "supported_versions",
]


@attrs.frozen
class ApiSpec:
    api_key: int
    name: str
    min_version: int
    max_version: int
    module: str  # under trio_broker.apis; provides `async def handle(broker, request)`


API_SPECS: tuple[ApiSpec, ...] = (
    ApiSpec(18, "ApiVersions", 0, 4, "api_versions"),
    ApiSpec(3, "Metadata", 0, 12, "metadata"),
    ApiSpec(2, "ListOffsets", 0, 9, "list_offsets"),
    ApiSpec(19, "CreateTopics", 0, 7, "create_topics"),
    ApiSpec(20, "DeleteTopics", 0, 6, "delete_topics"),
    ApiSpec(21, "DeleteRecords", 0, 2, "delete_records"),
    ApiSpec(23, "OffsetForLeaderEpoch", 0, 4, "offset_for_leader_epoch"),
    ApiSpec(32, "DescribeConfigs", 0, 4, "describe_configs"),
    ApiSpec(33, "AlterConfigs", 0, 2, "alter_configs"),
    ApiSpec(35, "DescribeLogDirs", 0, 4, "describe_log_dirs"),
    ApiSpec(34, "AlterReplicaLogDirs", 0, 2, "alter_replica_log_dirs"),
    ApiSpec(37, "CreatePartitions", 0, 3, "create_partitions"),
    ApiSpec(44, "IncrementalAlterConfigs", 0, 1, "incremental_alter_configs"),
    ApiSpec(60, "DescribeCluster", 0, 1, "describe_cluster"),
    ApiSpec(75, "DescribeTopicPartitions", 0, 0, "describe_topic_partitions"),
    ApiSpec(0, "Produce", 0, 11, "produce"),
    ApiSpec(1, "Fetch", 0, 17, "fetch"),
    ApiSpec(22, "InitProducerId", 0, 5, "init_producer_id"),
    ApiSpec(10, "FindCoordinator", 0, 6, "find_coordinator"),  # v6: share-partition keys
    ApiSpec(11, "JoinGroup", 0, 9, "join_group"),
    ApiSpec(12, "Heartbeat", 0, 4, "heartbeat"),
    ApiSpec(13, "LeaveGroup", 0, 5, "leave_group"),
    ApiSpec(14, "SyncGroup", 0, 5, "sync_group"),
    ApiSpec(15, "DescribeGroups", 0, 5, "describe_groups"),
    ApiSpec(16, "ListGroups", 0, 5, "list_groups"),
    ApiSpec(42, "DeleteGroups", 0, 2, "delete_groups"),
    # KIP-848 consumer groups (v1 of 68 from protocol/spec_newer/, newer than the shared files)
    ApiSpec(68, "ConsumerGroupHeartbeat", 0, 1, "consumer_group_heartbeat"),
    ApiSpec(69, "ConsumerGroupDescribe", 0, 0, "consumer_group_describe"),
    # KIP-932 share groups at Kafka 4.1's stable version 1 (SPEC_ADDITIONS in gen_schema),
    # the only one librdkafka sends; v0 was early access, as Kafka 4.1 dropped it.
    ApiSpec(76, "ShareGroupHeartbeat", 1, 1, "share_group_heartbeat"),
    ApiSpec(77, "ShareGroupDescribe", 0, 1, "share_group_describe"),
    ApiSpec(78, "ShareFetch", 1, 1, "share_fetch"),
    ApiSpec(79, "ShareAcknowledge", 1, 1, "share_acknowledge"),
    # The share coordinator's, between brokers (CLUSTER_ACTION): version 0 of Kafka 4.0.
    ApiSpec(83, "InitializeShareGroupState", 0, 0, "initialize_share_group_state"),
    ApiSpec(84, "ReadShareGroupState", 0, 0, "read_share_group_state"),
    ApiSpec(85, "WriteShareGroupState", 0, 0, "write_share_group_state"),
    ApiSpec(86, "DeleteShareGroupState", 0, 0, "delete_share_group_state"),
    ApiSpec(87, "ReadShareGroupStateSummary", 0, 0, "read_share_group_state_summary"),
    ApiSpec(90, "DescribeShareGroupOffsets", 0, 0, "describe_share_group_offsets"),
    ApiSpec(91, "AlterShareGroupOffsets", 0, 0, "alter_share_group_offsets"),
    ApiSpec(92, "DeleteShareGroupOffsets", 0, 0, "delete_share_group_offsets"),
    ApiSpec(8, "OffsetCommit", 0, 9, "offset_commit"),
    ApiSpec(9, "OffsetFetch", 0, 9, "offset_fetch"),
    ApiSpec(47, "OffsetDelete", 0, 0, "offset_delete"),
    ApiSpec(24, "AddPartitionsToTxn", 0, 4, "add_partitions_to_txn"),
    ApiSpec(25, "AddOffsetsToTxn", 0, 3, "add_offsets_to_txn"),
    ApiSpec(26, "EndTxn", 0, 3, "end_txn"),
    ApiSpec(27, "WriteTxnMarkers", 0, 1, "write_txn_markers"),
    ApiSpec(28, "TxnOffsetCommit", 0, 3, "txn_offset_commit"),
    ApiSpec(65, "DescribeTransactions", 0, 0, "describe_transactions"),
    ApiSpec(66, "ListTransactions", 0, 1, "list_transactions"),
    ApiSpec(61, "DescribeProducers", 0, 0, "describe_producers"),
    # The controller's requests to brokers (ZooKeeper mode), and the brokers' to it.
    ApiSpec(4, "LeaderAndIsr", 0, 7, "leader_and_isr"),
    ApiSpec(5, "StopReplica", 0, 4, "stop_replica"),
    ApiSpec(6, "UpdateMetadata", 0, 8, "update_metadata"),
    ApiSpec(7, "ControlledShutdown", 0, 3, "controlled_shutdown"),
    ApiSpec(43, "ElectLeaders", 0, 2, "elect_leaders"),
    # Brokers' heartbeats to the controller (KRaft's, for broker fencing): not advertised.
    ApiSpec(63, "BrokerHeartbeat", 0, 1, "broker_heartbeat"),
    # security (issue 16): SASL, SCRAM credentials
    ApiSpec(17, "SaslHandshake", 0, 1, "sasl_handshake"),
    ApiSpec(36, "SaslAuthenticate", 0, 2, "sasl_authenticate"),
    ApiSpec(50, "DescribeUserScramCredentials", 0, 0, "describe_user_scram_credentials"),
    ApiSpec(51, "AlterUserScramCredentials", 0, 0, "alter_user_scram_credentials"),
    # security (issue 16): ACLs
    ApiSpec(29, "DescribeAcls", 0, 3, "describe_acls"),
    ApiSpec(30, "CreateAcls", 0, 3, "create_acls"),
    ApiSpec(31, "DeleteAcls", 0, 3, "delete_acls"),
    # security (issue 16): client quotas
    ApiSpec(48, "DescribeClientQuotas", 0, 1, "describe_client_quotas"),
    ApiSpec(49, "AlterClientQuotas", 0, 1, "alter_client_quotas"),
    ApiSpec(45, "AlterPartitionReassignments", 0, 0, "alter_partition_reassignments"),
    ApiSpec(46, "ListPartitionReassignments", 0, 0, "list_partition_reassignments"),
)

# Kafka 4.0's lowest versions where they are above Kafka 3.9's (KIP-896; each one is the
# "Version N is the new baseline" comment of that API's 4.0 message file). The ZooKeeper-era
# inter-broker APIs (LeaderAndIsr, UpdateMetadata, StopReplica, ControlledShutdown) are gone
# from Kafka 4.0 altogether; this broker keeps them, it is their cluster's only protocol.
KAFKA_40_MIN_VERSIONS: dict[int, int] = {
    0: 3,  # Produce: message format 2 only
    1: 4,  # Fetch
    2: 1,  # ListOffsets
    8: 2,  # OffsetCommit
    9: 1,  # OffsetFetch
    19: 2,  # CreateTopics
    20: 1,  # DeleteTopics
    23: 2,  # OffsetForLeaderEpoch
    27: 1,  # WriteTxnMarkers
    29: 1,  # DescribeAcls
    30: 1,  # CreateAcls
    31: 1,  # DeleteAcls
    32: 1,  # DescribeConfigs
    34: 1,  # AlterReplicaLogDirs
    35: 1,  # DescribeLogDirs
}
# Kafka 4.0 still lists Produce from v0 in its ApiVersions answer, serving it from v3
# (KAFKA-18659: librdkafka before 2.10 turned compression off against a broker whose
# Produce range starts above 0).
_KAFKA_40_ADVERTISED_MIN = {0: 0}

# Served between the brokers of a cluster, not listed in ApiVersions: BrokerHeartbeat is a
# controller listener's API in Kafka, never a broker listener's, and clients need not see it
# (the broker's own heartbeats name their version: cluster/replication/heartbeats.py).
NOT_ADVERTISED = frozenset({63})

_BY_KEY = {spec.api_key: spec for spec in API_SPECS}
_handlers: dict[int, Any] = {}


def supported_versions(baseline: str = "3.9") -> dict[int, tuple[int, int]]:
    """api key -> (min, max) version served; `baseline` is min.api.versions ("3.9", "4.0")."""
    raised = KAFKA_40_MIN_VERSIONS if baseline == "4.0" else {}
    return {
        spec.api_key: (max(spec.min_version, raised.get(spec.api_key, 0)), spec.max_version)
        for spec in API_SPECS
    }


def advertised_versions(baseline: str = "3.9") -> dict[int, tuple[int, int]]:
    """What ApiVersions lists: the served ranges, but for Kafka 4.0's Produce quirk."""
    served = supported_versions(baseline)
    for key in NOT_ADVERTISED:
        served.pop(key, None)
    if baseline == "4.0":
        for key, low in _KAFKA_40_ADVERTISED_MIN.items():
            served[key] = (low, served[key][1])
    return served


async def dispatch(broker: Broker, request: Request) -> Any:
    if request.parsed.unsupported_version and request.api_key != 18:
        # A version whose layout is known but which is not served (min.api.versions=4.0,
        # or newer than this broker): an UNSUPPORTED_VERSION answer, or a closed connection.
        from trio_broker.apis.unsupported import answer_unsupported

        return answer_unsupported(broker, request)
    handle = _handlers.get(request.api_key)
    if handle is None:
        module = importlib.import_module(f"trio_broker.apis.{_BY_KEY[request.api_key].module}")
        handle = _handlers[request.api_key] = module.handle
    return await handle(broker, request)


# APIs whose module also has `handle_now(broker, request)`: the same answer as its
# handle() (or DELAYED), made without awaiting anything, which the handler task calls
# directly instead of a chain of coroutines (server/requests.py NOT_NOW).
_ANSWERED_NOW = frozenset({0})  # Produce
_now_handlers: dict[int, Any] = {}


def answer_now(broker: Broker, request: Request) -> Any:
    """The answer of a request whose handler needs no wait, or NOT_NOW (use dispatch())."""
    key = request.api_key
    if key not in _ANSWERED_NOW or request.parsed.unsupported_version:
        return NOT_NOW
    handle = _now_handlers.get(key)
    if handle is None:
        module = importlib.import_module(f"trio_broker.apis.{_BY_KEY[key].module}")
        handle = _now_handlers[key] = module.handle_now
    return handle(broker, request)


def answer_batch_now(broker: Broker, requests: list[Request]) -> list | None:
    """The answers to a batch of produces (server/requests.py Batch), in order, made
    without a wait; None when they are to be answered one by one."""
    if any(r.api_key not in _ANSWERED_NOW or r.parsed.unsupported_version for r in requests):
        return None
    module = importlib.import_module(f"trio_broker.apis.{_BY_KEY[0].module}")
    return module.handle_batch_now(broker, requests)  # type: ignore[no-any-return]
