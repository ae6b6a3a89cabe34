"""WriteTxnMarkers (key 27): a transaction coordinator asks this broker, the leader of the
listed partitions, to append COMMIT or ABORT markers. The local coordinator uses the same
code path (`trio_broker.cluster.transactions.markers`) directly.

In a cluster the markers are appended as acks=-1 appends are: the answer goes once the ISR
of every partition has them (or request.timeout.ms passed), from the produce purgatory, so
a coordinator that hears NONE knows the marker survives a change of leader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trio_broker.cluster.transactions.markers import write_markers
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.write_txn_markers_response import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


def _result(producer_id: int, codes: dict[tuple[str, int], int]) -> WritableTxnMarkerResult:
    by_topic: dict[str, list[WritableTxnMarkerPartitionResult]] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append(
            WritableTxnMarkerPartitionResult(partition_index=partition, error_code=code)
        )
    return WritableTxnMarkerResult(
        producer_id=producer_id,
        topics=[
            WritableTxnMarkerTopicResult(name=name, partitions=parts)
            for name, parts in by_topic.items()
        ],
    )


async def handle(broker: Broker, request: Request) -> Any:
    written: list[tuple[int, dict[tuple[str, int], int]]] = []
    for marker in request.body.markers:
        codes = write_markers(
            broker,
            [(t.name, p) for t in marker.topics for p in t.partition_indexes],
            producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch,
            coordinator_epoch=marker.coordinator_epoch,
            commit=bool(marker.transaction_result),
        )
        written.append((marker.producer_id, dict(codes)))

    def answer(replicated: dict[tuple[str, int], ErrorCode]) -> WriteTxnMarkersResponse:
        for _pid, codes in written:
            for tp, code in codes.items():
                if code == ErrorCode.NONE:
                    codes[tp] = replicated.get(tp, ErrorCode.NONE)
        return WriteTxnMarkersResponse(markers=[_result(pid, codes) for pid, codes in written])

    appended = [tp for _pid, codes in written for tp, code in codes.items() if code == 0]
    if getattr(broker, "replica_manager", None) is None or not appended:
        return answer({})  # one broker: the append is committed at once
    from trio_broker.cluster.replication.isr_wait import respond_when_replicated

    return respond_when_replicated(
        broker, request, appended, broker.config.request_timeout_ms, answer
    )
