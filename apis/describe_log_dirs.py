"""DescribeLogDirs (key 35): each log dir with its partitions' sizes and its free space."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.describe_log_dirs_response import (
    DescribeLogDirsPartition,
    DescribeLogDirsResponse,
    DescribeLogDirsResult,
    DescribeLogDirsTopic,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


def _space(log_dir: Path) -> tuple[int, int]:
    try:
        st = os.statvfs(log_dir)
    except OSError:
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


async def handle(broker: Broker, request: Request) -> DescribeLogDirsResponse:
    wanted = request.body.topics
    selected: set[tuple[str, int]] | None = None
    if wanted is not None:
        selected = {(t.topic, p) for t in wanted for p in t.partitions}
    by_dir: dict[Path, dict[str, list[DescribeLogDirsPartition]]] = {
        Path(os.path.abspath(d)): {} for d in broker.log_manager.log_dirs
    }
    for log in broker.log_manager.all_logs():
        if selected is not None and (log.topic, log.partition) not in selected:
            continue
        topics = by_dir.setdefault(Path(os.path.abspath(log.dir.parent)), {})
        topics.setdefault(log.topic, []).append(
            DescribeLogDirsPartition(
                partition_index=log.partition,
                partition_size=log.size_in_bytes,
                # A current replica has no lag here; a future one is listed below.
                offset_lag=0,
                is_future_key=False,
            )
        )
    for move in list(broker.log_manager.moves.values()):
        log = move.log
        if selected is not None and (log.topic, log.partition) not in selected:
            continue
        # The future replica a move is filling (Kafka's is_future_key), with its lag.
        topics = by_dir.setdefault(Path(os.path.abspath(move.target)), {})
        topics.setdefault(log.topic, []).append(
            DescribeLogDirsPartition(
                partition_index=log.partition,
                partition_size=move.size_in_bytes,
                offset_lag=move.offset_lag,
                is_future_key=True,
            )
        )
    offline = {Path(os.path.abspath(d)) for d in broker.log_manager.offline_dirs}
    results = []
    for log_dir, topics in by_dir.items():
        total, usable = _space(log_dir)
        if log_dir in offline:
            # As Kafka: a dir that failed I/O is listed with its error and no partitions.
            results.append(
                DescribeLogDirsResult(
                    error_code=ErrorCode.KAFKA_STORAGE_ERROR,
                    log_dir=str(log_dir),
                    topics=[],
                    total_bytes=total,
                    usable_bytes=usable,
                )
            )
            continue
        results.append(
            DescribeLogDirsResult(
                error_code=ErrorCode.NONE,
                log_dir=str(log_dir),
                topics=[
                    DescribeLogDirsTopic(
                        name=name, partitions=sorted(parts, key=lambda p: p.partition_index)
                    )
                    for name, parts in sorted(topics.items())
                ],
                total_bytes=total,
                usable_bytes=usable,
            )
        )
    return DescribeLogDirsResponse(error_code=ErrorCode.NONE, results=results)
