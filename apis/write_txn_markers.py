"""WriteTxnMarkers (key 27): a transaction coordinator asks this broker, the leader of the
listed partitions, to append COMMIT or ABORT markers. The local coordinator uses the same
code path (`trio_broker.cluster.transaction_markers`) directly."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.cluster.transaction_markers import write_markers
from trio_broker.protocol._generated.write_txn_markers_response import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


async def handle(broker: Broker, request: Request) -> WriteTxnMarkersResponse:
    results = []
    for marker in request.body.markers:
        codes = write_markers(
            broker,
            [(t.name, p) for t in marker.topics for p in t.partition_indexes],
            producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch,
            coordinator_epoch=marker.coordinator_epoch,
            commit=bool(marker.transaction_result),
        )
        by_topic: dict[str, list[WritableTxnMarkerPartitionResult]] = {}
        for (topic, partition), code in codes.items():
            by_topic.setdefault(topic, []).append(
                WritableTxnMarkerPartitionResult(partition_index=partition, error_code=code)
            )
        results.append(
            WritableTxnMarkerResult(
                producer_id=marker.producer_id,
                topics=[
                    WritableTxnMarkerTopicResult(name=name, partitions=parts)
                    for name, parts in by_topic.items()
                ],
            )
        )
    return WriteTxnMarkersResponse(markers=results)
