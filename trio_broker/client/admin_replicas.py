"""The admin client's cluster calls (mixed into `Admin`): leader elections, partition
reassignments, and log dirs, each sent where Kafka sends it (the controller, or the broker
holding the replicas)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trio_broker.client.admin_types import (
    LogDirDescription,
    PartitionReassignment,
    ReplicaLogDirInfo,
    check_errors,
    error_with,
)
from trio_broker.client.errors import KafkaConnectionError, error_for
from trio_broker.client.subscription import TopicPartition
from trio_broker.errors import ErrorCode

_check = check_errors
_error = error_with
_DEFAULT_TIMEOUT_MS = 30_000


class ReplicaCalls:
    """Admin's calls on replicas; `Admin` provides `client`, `metadata`, `_controller` and
    `describe_topics`."""

    client: Any
    metadata: Any

    async def elect_leaders(
        self,
        election_type: str = "preferred",
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: int = _DEFAULT_TIMEOUT_MS,
    ) -> dict[TopicPartition, ErrorCode]:
        """ElectLeaders on the controller: "preferred" (the first assigned replica, if in
        the ISR) or "unclean" (any live replica, for a partition without a leader). Every
        partition when `partitions` is None. Per partition its outcome: NONE (elected),
        ELECTION_NOT_NEEDED (it already has the leader asked for), or the error (e.g.
        PREFERRED_LEADER_NOT_AVAILABLE), as Kafka's kafka-leader-election reports them."""
        from trio_broker.protocol._generated.elect_leaders_request import (
            ElectLeadersRequest,
            TopicPartitions,
        )

        kinds = {"preferred": 0, "unclean": 1}
        if election_type not in kinds:
            raise ValueError(f"election_type must be one of {sorted(kinds)}")
        topic_partitions = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                tp = TopicPartition(*tp)
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topic_partitions = [
                TopicPartitions(topic=t, partitions=sorted(ps))
                for t, ps in sorted(by_topic.items())
            ]
        request = ElectLeadersRequest(
            election_type=kinds[election_type],
            topic_partitions=topic_partitions,
            timeout_ms=timeout_ms,
        )
        response = await self.client.send(await self._controller(), request)
        if getattr(response, "error_code", 0):
            raise error_for(response.error_code, "ElectLeaders")
        return {
            TopicPartition(r.topic, p.partition_id): ErrorCode(p.error_code)
            for r in response.replica_election_results
            for p in r.partition_result
        }

    async def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        *,
        timeout_ms: int = _DEFAULT_TIMEOUT_MS,
    ) -> None:
        """Move partitions to new replica sets (AlterPartitionReassignments, on the
        controller); None for a partition cancels its ongoing reassignment. Returns once
        the controller accepted them: the moves go on in the background
        (list_partition_reassignments shows what is left)."""
        from trio_broker.protocol._generated.alter_partition_reassignments_request import (
            AlterPartitionReassignmentsRequest,
            ReassignablePartition,
            ReassignableTopic,
        )

        by_topic: dict[str, list[ReassignablePartition]] = {}
        for tp, replicas in reassignments.items():
            tp = TopicPartition(*tp)
            by_topic.setdefault(tp.topic, []).append(
                ReassignablePartition(
                    partition_index=tp.partition,
                    replicas=None if replicas is None else list(replicas),
                )
            )
        request = AlterPartitionReassignmentsRequest(
            timeout_ms=timeout_ms,
            topics=[ReassignableTopic(name=t, partitions=ps) for t, ps in sorted(by_topic.items())],
        )
        response = await self.client.send(await self._controller(), request)
        if response.error_code:
            raise _error(response.error_code, response.error_message, "AlterPartitionReassignments")
        errors = {
            TopicPartition(t.name, p.partition_index): _error(
                p.error_code, p.error_message, f"{t.name}-{p.partition_index}"
            )
            for t in response.responses
            for p in t.partitions
            if p.error_code
        }
        _check("AlterPartitionReassignments", errors)

    async def list_partition_reassignments(
        self,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: int = _DEFAULT_TIMEOUT_MS,
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The reassignments in progress (of `partitions`, or all)."""
        from trio_broker.protocol._generated.list_partition_reassignments_request import (
            ListPartitionReassignmentsRequest,
            ListPartitionReassignmentsTopics,
        )

        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                tp = TopicPartition(*tp)
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topics = [
                ListPartitionReassignmentsTopics(name=t, partition_indexes=sorted(ps))
                for t, ps in sorted(by_topic.items())
            ]
        request = ListPartitionReassignmentsRequest(timeout_ms=timeout_ms, topics=topics)
        response = await self.client.send(await self._controller(), request)
        if response.error_code:
            raise _error(response.error_code, response.error_message, "ListPartitionReassignments")
        return {
            TopicPartition(t.name, p.partition_index): PartitionReassignment(
                replicas=tuple(p.replicas),
                adding_replicas=tuple(p.adding_replicas),
                removing_replicas=tuple(p.removing_replicas),
            )
            for t in response.topics
            for p in t.partitions
        }

    async def describe_log_dirs(
        self, brokers: Iterable[int] | None = None, topics: Iterable[str] | None = None
    ) -> dict[int, dict[str, LogDirDescription]]:
        """Each broker's log dirs (every live broker when `brokers` is None) with the
        replicas in them (of `topics`, or all) and their sizes (DescribeLogDirs)."""
        from trio_broker.protocol._generated.describe_log_dirs_request import (
            DescribableLogDirTopic,
            DescribeLogDirsRequest,
        )

        cluster = await self.metadata.refresh([])
        wanted = sorted(cluster.brokers) if brokers is None else sorted(set(brokers))
        asked = None
        if topics is not None:
            names = sorted(set(topics))
            described = await self.describe_topics(names) if names else {}
            asked = [
                DescribableLogDirTopic(
                    topic=name, partitions=[p.partition for p in described[name].partitions]
                )
                for name in names
            ]
        results: dict[int, dict[str, LogDirDescription]] = {}
        errors = {}
        for broker in wanted:
            if broker not in cluster.brokers:
                errors[broker] = KafkaConnectionError(f"broker {broker} is not in the cluster")
                continue
            response = await self.client.send(broker, DescribeLogDirsRequest(topics=asked))
            if getattr(response, "error_code", 0):
                errors[broker] = error_for(response.error_code, f"broker {broker}")
                continue
            results[broker] = {
                r.log_dir: LogDirDescription(
                    path=r.log_dir,
                    error=ErrorCode(r.error_code),
                    replicas={
                        TopicPartition(t.name, p.partition_index): ReplicaLogDirInfo(
                            size=p.partition_size,
                            offset_lag=p.offset_lag,
                            is_future=p.is_future_key,
                        )
                        for t in r.topics
                        for p in t.partitions
                    },
                    total_bytes=r.total_bytes,
                    usable_bytes=r.usable_bytes,
                )
                for r in response.results
            }
        _check("DescribeLogDirs", errors, results)
        return results

    async def alter_replica_log_dirs(self, moves: Mapping[tuple[str, int, int], str]) -> None:
        """Move replicas between their brokers' log dirs (AlterReplicaLogDirs):
        {(topic, partition, broker id): log dir path}. Each request goes to the broker
        holding the replica; the copy goes on in the background (describe_log_dirs shows
        it as a future replica until it swaps in)."""
        from trio_broker.protocol._generated.alter_replica_log_dirs_request import (
            AlterReplicaLogDir,
            AlterReplicaLogDirsRequest,
            AlterReplicaLogDirTopic,
        )

        by_broker: dict[int, dict[str, dict[str, list[int]]]] = {}
        for (topic, partition, broker), path in moves.items():
            by_broker.setdefault(broker, {}).setdefault(path, {}).setdefault(topic, []).append(
                partition
            )
        await self.metadata.refresh([])
        errors = {}
        for broker, dirs in sorted(by_broker.items()):
            request = AlterReplicaLogDirsRequest(
                dirs=[
                    AlterReplicaLogDir(
                        path=path,
                        topics=[
                            AlterReplicaLogDirTopic(name=t, partitions=sorted(ps))
                            for t, ps in sorted(topics.items())
                        ],
                    )
                    for path, topics in sorted(dirs.items())
                ]
            )
            response = await self.client.send(broker, request)
            for t in response.results:
                for p in t.partitions:
                    if p.error_code:
                        errors[(t.topic_name, p.partition_index, broker)] = error_for(
                            p.error_code, f"{t.topic_name}-{p.partition_index} on broker {broker}"
                        )
        _check("AlterReplicaLogDirs", errors)
