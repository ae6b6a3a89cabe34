"""DescribeCluster (key 60): cluster id, controller and brokers, for admin clients."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.apis.endpoints import node_on_listener
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.describe_cluster_response import (
    DescribeClusterBroker,
    DescribeClusterResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

ENDPOINT_BROKERS = 1

# With no authorizer, Kafka reports every operation the CLUSTER resource supports:
# ALTER(7) DESCRIBE(8) CREATE(5) CLUSTER_ACTION(9) DESCRIBE_CONFIGS(10) ALTER_CONFIGS(11)
# IDEMPOTENT_WRITE(12), as a bit field.
_CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
_OPERATIONS_OMITTED = -(2**31)


async def handle(broker: Broker, request: Request) -> DescribeClusterResponse:
    body = request.body
    meta = broker.metadata
    if request.api_version >= 1 and body.endpoint_type != ENDPOINT_BROKERS:
        # Controllers are described by controllers (KIP-919); a broker answers so.
        return DescribeClusterResponse(
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message="The broker only handles the BROKER endpoint type",
            endpoint_type=body.endpoint_type,
            cluster_id=meta.cluster_id,
        )
    return DescribeClusterResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        endpoint_type=ENDPOINT_BROKERS,
        cluster_id=meta.cluster_id,
        controller_id=meta.controller_id,
        brokers=[
            DescribeClusterBroker(broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
            for b in (
                node_on_listener(broker, n, request.connection.listener)
                for n in sorted(meta.brokers.values(), key=lambda b: b.node_id)
            )
        ],
        cluster_authorized_operations=_CLUSTER_OPERATIONS
        if body.include_cluster_authorized_operations
        else _OPERATIONS_OMITTED,
    )
