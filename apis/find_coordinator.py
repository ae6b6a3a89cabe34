"""FindCoordinator (key 10): this broker coordinates every group (a cluster of one); in
a ZooKeeper cluster, the leader of the key's `__consumer_offsets` / `__transaction_state`
partition does.

v4+ asks for several keys at once (KIP-699). Transactional ids (key type 1) are answered
by the transaction coordinator's broker (this one), creating `__transaction_state` on
first use as Kafka does. v6 adds share-partition keys (key type 2, KIP-932),
"group:topic id:partition": the share coordinator of that share-partition, the leader of
the key's `__share_group_state` partition (the topic made on first use); brokers ask it
(CLUSTER_ACTION when ACLs are on).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.apis.endpoints import node_on_listener
from trio_broker.cluster.groups.share.share_state import (
    SHARE_STATE_TOPIC,
    parse_share_key,
    state_partition,
)
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.find_coordinator_response import (
    Coordinator,
    FindCoordinatorResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

GROUP, TRANSACTION, SHARE = 0, 1, 2


def _refused(key: str, error: int) -> Coordinator:
    return Coordinator(key=key, node_id=-1, host="", port=-1, error_code=error, error_message=None)


def _share_coordinator(broker: Broker, key: str, listener: str) -> Coordinator:
    parsed = parse_share_key(key)
    if parsed is None:
        return _refused(key, ErrorCode.INVALID_REQUEST)
    state = broker.metadata.topics.get(SHARE_STATE_TOPIC)
    if state is None:
        try:
            broker.group_coordinator.share_partitions.store._ensure_topic()
        except KafkaError:
            pass  # being made (in a cluster, by the controller): the client asks again
        state = broker.metadata.topics.get(SHARE_STATE_TOPIC)
    node = None
    if state is not None and state.partitions:
        pstate = state.partitions.get(state_partition(*parsed, len(state.partitions)))
        if pstate is not None and pstate.leader >= 0:
            node = broker.metadata.brokers.get(pstate.leader)
    if node is not None:
        node = node_on_listener(broker, node, listener)
    if node is None:
        return _refused(key, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return Coordinator(
        key=key, node_id=node.node_id, host=node.host, port=node.port, error_message=None
    )


def _leader_of_partition(broker: Broker, key: str, key_type: int, listener: str) -> Coordinator:
    """A cluster: the coordinator of `key` is the leader of its partition of the internal
    topic; COORDINATOR_NOT_AVAILABLE while the topic or a leader is missing."""
    if key_type == GROUP:
        store = broker.group_coordinator.store
        topic = "__consumer_offsets"
    else:
        store = broker.transaction_coordinator.store
        topic = "__transaction_state"
    node = None
    state = broker.metadata.topics.get(topic)
    if state is None:
        try:
            store.ensure_topic()  # the controller creates it
        except KafkaError:
            pass
    else:
        pstate = state.partitions.get(store.partition_for(key))
        if pstate is not None and pstate.leader >= 0:
            node = broker.metadata.brokers.get(pstate.leader)
            if node is not None:
                node = node_on_listener(broker, node, listener)
    if node is None:
        return Coordinator(
            key=key,
            node_id=-1,
            host="",
            port=-1,
            error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
            error_message=None,
        )
    return Coordinator(
        key=key, node_id=node.node_id, host=node.host, port=node.port, error_message=None
    )


def _find(broker: Broker, key: str, key_type: int, listener: str) -> Coordinator:
    if key_type == SHARE:
        return _share_coordinator(broker, key, listener)
    if (
        getattr(broker, "replica_manager", None) is not None
        and key
        and (key_type == GROUP or key_type == TRANSACTION)
    ):
        return _leader_of_partition(broker, key, key_type, listener)
    node = broker.metadata.brokers.get(broker.node_id)
    if node is not None:
        node = node_on_listener(broker, node, listener)
    error = ErrorCode.NONE
    if key_type == GROUP:
        coordinator = broker.group_coordinator
        try:
            coordinator.store.ensure_topic()
        except KafkaError as exc:
            # Kafka answers COORDINATOR_NOT_AVAILABLE when the offsets topic cannot be
            # created; a full disk (KAFKA_STORAGE_ERROR) is one way that happens.
            error = (
                ErrorCode.COORDINATOR_NOT_AVAILABLE
                if exc.code == ErrorCode.KAFKA_STORAGE_ERROR
                else exc.code
            )
        if not error and not key:
            error = ErrorCode.INVALID_REQUEST
    elif key_type == TRANSACTION and getattr(broker, "transaction_coordinator", None) is not None:
        try:
            broker.transaction_coordinator.store.ensure_topic()
        except KafkaError as exc:
            error = exc.code
        if not error and not key:
            error = ErrorCode.INVALID_REQUEST
    else:
        error = (
            ErrorCode.COORDINATOR_NOT_AVAILABLE
            if key_type == TRANSACTION
            else ErrorCode.INVALID_REQUEST
        )
    if error or node is None:
        return Coordinator(
            key=key,
            node_id=-1,
            host="",
            port=-1,
            error_code=error or ErrorCode.COORDINATOR_NOT_AVAILABLE,
            error_message=None,
        )
    return Coordinator(
        key=key, node_id=node.node_id, host=node.host, port=node.port, error_message=None
    )


async def handle(broker: Broker, request: Request) -> FindCoordinatorResponse:
    body = request.body
    listener = request.connection.listener
    key_type = body.key_type if request.api_version >= 1 else GROUP

    def find(key: str) -> Coordinator:
        if key_type == SHARE and request.api_version < 6:
            return _refused(key, ErrorCode.INVALID_REQUEST)  # share keys came with v6
        return _find(broker, key, key_type, listener)

    if request.api_version >= 4:
        return FindCoordinatorResponse(coordinators=[find(key) for key in body.coordinator_keys])
    found = find(body.key)
    return FindCoordinatorResponse(
        error_code=found.error_code,
        error_message=None,
        node_id=found.node_id,
        host=found.host,
        port=found.port,
    )
