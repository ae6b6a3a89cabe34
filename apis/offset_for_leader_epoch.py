"""OffsetForLeaderEpoch (key 23): where a leader epoch ends in this partition's log.

Consumers ask it after a leader change to detect a truncated log. The answer is the
largest epoch at most the one asked for and the offset where it ends (the log end offset
for the current epoch); (-1, -1) when the log knows no such epoch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.apis.partition_lookup import leader_log
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.offset_for_leader_epoch_response import (
    EpochEndOffset,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.protocol._generated.offset_for_leader_epoch_request import (
        OffsetForLeaderPartition,
    )
    from trio_broker.server.requests import Request


def _end_offset(broker: Broker, topic: str, p: OffsetForLeaderPartition) -> EpochEndOffset:
    try:
        _, log = leader_log(broker, topic, p.partition, p.current_leader_epoch)
        epoch, end_offset = log.end_offset_for_epoch(p.leader_epoch)
    except KafkaError as exc:
        return EpochEndOffset(error_code=exc.code, partition=p.partition)
    return EpochEndOffset(
        error_code=ErrorCode.NONE, partition=p.partition, leader_epoch=epoch, end_offset=end_offset
    )


async def handle(broker: Broker, request: Request) -> OffsetForLeaderEpochResponse:
    return OffsetForLeaderEpochResponse(
        topics=[
            OffsetForLeaderTopicResult(
                topic=t.topic, partitions=[_end_offset(broker, t.topic, p) for p in t.partitions]
            )
            for t in request.body.topics
        ]
    )
