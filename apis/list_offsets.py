"""ListOffsets (key 2): earliest, latest, max timestamp, or the offset for a timestamp.

Special timestamps, as Kafka's: -2 EARLIEST (the log start offset), -1 LATEST (the high
watermark; the last stable offset for read_committed), -3 MAX_TIMESTAMP (the record with
the largest timestamp), -4 EARLIEST_LOCAL (the same as earliest: no tiered storage), -5
LATEST_TIERED (nothing tiered: offset -1). Any other value finds the first record whose
timestamp is at least it; records at or beyond the high watermark (the LSO for
read_committed) are never answered, and "none" is offset -1, timestamp -1, error NONE.

Version 0 (Kafka 3.x still answers it; Kafka 4 dropped it) asks for up to
`max_num_offsets` offsets before a time and gets `old_style_offsets`, Kafka's legacy
answer built from the segments: each segment's base offset (the log start offset for the
first) with its file's modification time, and the log end offset with "now" when the
active segment has data. LATEST starts at the last of those, EARLIEST at the first, a time
at the last segment modified at or before it; the answer counts down from there, newest
first, and a consumer never gets an offset above the high watermark. Old tools send it:
Burrow's lag checks, Kafka's GetOffsetShell before 2.x, sarama before 1.25.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from trio_broker.apis.partition_lookup import leader_log
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.protocol._generated.list_offsets_response import (
    ListOffsetsPartitionResponse,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.cluster.metadata import PartitionState
    from trio_broker.log import PartitionLog
    from trio_broker.protocol._generated.list_offsets_request import ListOffsetsPartition
    from trio_broker.server.requests import Request

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5

NO_TIMESTAMP = -1
READ_COMMITTED = 1


def _epoch_of(log: PartitionLog, offset: int) -> int:
    epoch = log.leader_epoch_cache.epoch_for_offset(offset)
    return -1 if epoch is None else epoch


def _lookup(
    part: PartitionState, log: PartitionLog, timestamp: int, isolation_level: int
) -> tuple[int, int, int]:
    """(timestamp, offset, leader epoch) for one partition."""
    # read_committed consumers see up to the last stable offset, others the high watermark.
    fetchable = log.last_stable_offset if isolation_level == READ_COMMITTED else log.high_watermark
    if timestamp == LATEST:
        return NO_TIMESTAMP, fetchable, part.leader_epoch
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        start = log.log_start_offset
        return NO_TIMESTAMP, start, _epoch_of(log, start)
    if timestamp == LATEST_TIERED:
        return NO_TIMESTAMP, -1, -1
    if timestamp == MAX_TIMESTAMP:
        found = log.max_timestamp_offset()
    elif timestamp < 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid timestamp {timestamp}")
    else:
        found = log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= fetchable:
        return NO_TIMESTAMP, -1, -1
    offset, ts = found
    return ts, offset, _epoch_of(log, offset)


def _legacy_offsets(log: PartitionLog, timestamp: int, max_num_offsets: int) -> list[int]:
    """Kafka's legacyFetchOffsetsBefore, capped at the high watermark (see the docstring)."""
    import os
    import time

    segments = list(log.segments)
    points = []
    for segment in segments:
        try:
            modified = int(os.stat(segment.log_path).st_mtime * 1000)
        except OSError:
            modified = 0
        points.append((max(segment.base_offset, log.log_start_offset), modified))
    if segments and segments[-1].size > 0:
        points.append((log.log_end_offset, int(time.time() * 1000)))
    if timestamp == LATEST:
        start = len(points) - 1
    elif timestamp == EARLIEST:
        start = 0
    else:
        start = len(points) - 1
        while start >= 0 and points[start][1] > timestamp:
            start -= 1
    found = sorted((points[i][0] for i in range(start, -1, -1)), reverse=True)
    found = found[: max(0, min(max_num_offsets, start + 1))]
    hw = log.high_watermark
    if any(o > hw for o in found):
        found = [hw] + [o for o in found if o <= hw]
    return found


def _partition_v0(broker: Broker, topic: str, p: ListOffsetsPartition, duplicate: bool) -> Any:
    try:
        if duplicate:
            raise KafkaError(ErrorCode.INVALID_REQUEST)
        _part, log = leader_log(broker, topic, p.partition_index)
        offsets = _legacy_offsets(log, p.timestamp, p.max_num_offsets)
    except KafkaError as exc:
        return ListOffsetsPartitionResponse(
            partition_index=p.partition_index, error_code=exc.code, old_style_offsets=[]
        )
    return ListOffsetsPartitionResponse(
        partition_index=p.partition_index, error_code=ErrorCode.NONE, old_style_offsets=offsets
    )


def _partition(
    broker: Broker, topic: str, p: ListOffsetsPartition, isolation_level: int, duplicate: bool
) -> ListOffsetsPartitionResponse:
    try:
        if duplicate:
            raise KafkaError(ErrorCode.INVALID_REQUEST)
        part, log = leader_log(broker, topic, p.partition_index, p.current_leader_epoch)
        ts, offset, epoch = _lookup(part, log, p.timestamp, isolation_level)
    except KafkaError as exc:
        return ListOffsetsPartitionResponse(
            partition_index=p.partition_index, error_code=exc.code, timestamp=-1, offset=-1
        )
    return ListOffsetsPartitionResponse(
        partition_index=p.partition_index,
        error_code=ErrorCode.NONE,
        timestamp=ts,
        offset=offset,
        leader_epoch=epoch,
    )


async def handle(broker: Broker, request: Request) -> ListOffsetsResponse:
    body = request.body
    isolation = body.isolation_level if request.api_version >= 2 else 0
    counts = Counter((t.name, p.partition_index) for t in body.topics for p in t.partitions)
    topics = []
    for t in body.topics:
        topics.append(
            ListOffsetsTopicResponse(
                name=t.name,
                partitions=[
                    _partition_v0(broker, t.name, p, counts[(t.name, p.partition_index)] > 1)
                    if request.api_version == 0
                    else _partition(
                        broker, t.name, p, isolation, counts[(t.name, p.partition_index)] > 1
                    )
                    for p in t.partitions
                ],
            )
        )
    return ListOffsetsResponse(topics=topics)
