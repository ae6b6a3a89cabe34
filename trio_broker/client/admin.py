"""The admin client (Kafka's Admin), in Trio.

    async with Admin("127.0.0.1:9092") as admin:
        await admin.create_topics([NewTopic("events", num_partitions=6, configs={"retention.ms": "60000"})])
        described = await admin.describe_topics(["events"])
        lag = await admin.group_lag("my-group")        # {TopicPartition: PartitionLag}

Every call sends its requests to the broker Kafka sends them to (the controller for
topic changes, each partition's leader for ListOffsets and DeleteRecords, the group's
coordinator for group calls, any broker for ACLs, SCRAM credentials and client quotas,
which every broker of a cluster serves) and returns small frozen values. Errors are per resource,
as Kafka answers them: a call whose answer carries errors raises one `AdminError` naming
each failed resource and its Kafka error (`.errors`: resource -> KafkaError), after every
resource was tried; `.results` holds what succeeded (as confluent-kafka's per-resource
futures would, folded into one exception as aiokafka raises).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import trio

from trio_broker.client.admin_types import (
    SCRAM_MECHANISMS,
    AclBinding,
    AclBindingFilter,
    AdminError,
    ClientQuotaEntity,
    ClientQuotaFilterComponent,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    GroupDescription,
    GroupListing,
    LogDirDescription,
    MemberDescription,
    NewTopic,
    PartitionInfo,
    PartitionLag,
    PartitionReassignment,
    ReplicaLogDirInfo,
    TopicDescription,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from trio_broker.client.config import AdminConfig
from trio_broker.client.consumer_protocol import decode_assignment, decode_subscription
from trio_broker.client.errors import KafkaConnectionError, error_for
from trio_broker.client.fetcher import EARLIEST, LATEST, list_offsets
from trio_broker.client.metadata import ClusterMetadata, find_group_coordinator
from trio_broker.client.network_client import NetworkClient
from trio_broker.client.subscription import TopicPartition
from trio_broker.errors import ErrorCode, KafkaError, is_retriable
from trio_broker.protocol._generated import alter_configs_request as _alter
from trio_broker.protocol._generated import incremental_alter_configs_request as _incremental
from trio_broker.protocol._generated.create_partitions_request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from trio_broker.protocol._generated.create_topics_request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from trio_broker.protocol._generated.delete_groups_request import DeleteGroupsRequest
from trio_broker.protocol._generated.delete_records_request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from trio_broker.protocol._generated.delete_topics_request import (
    DeleteTopicsRequest,
    DeleteTopicState,
)
from trio_broker.protocol._generated.describe_configs_request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from trio_broker.protocol._generated.describe_groups_request import DescribeGroupsRequest
from trio_broker.protocol._generated.list_groups_request import ListGroupsRequest
from trio_broker.protocol._generated.metadata_request import MetadataRequest, MetadataRequestTopic
from trio_broker.protocol._generated.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
)

__all__ = [
    "AclBinding",
    "AclBindingFilter",
    "Admin",
    "AdminError",
    "ClientQuotaEntity",
    "ClientQuotaFilterComponent",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "GroupDescription",
    "GroupListing",
    "LogDirDescription",
    "MemberDescription",
    "NewTopic",
    "PartitionInfo",
    "PartitionLag",
    "PartitionReassignment",
    "ReplicaLogDirInfo",
    "TopicDescription",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
]

_DEFAULT_TIMEOUT_MS = 30_000


def _check(what: str, errors: dict, results: Any = None) -> None:
    if errors:
        raise AdminError(what, errors, results)


def _error(code: int, message: str | None, what: str) -> KafkaError:
    return error_for(code, f"{what}: {message}" if message else what)


def _acl_filter_fields(f: AclBindingFilter) -> dict[str, Any]:
    """An ACL filter as DescribeAcls and DeleteAcls both carry it."""
    return {
        "resource_type_filter": f.resource_type,
        "resource_name_filter": f.resource_name,
        "pattern_type_filter": f.pattern_type,
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": f.operation,
        "permission_type": f.permission_type,
    }


class Admin:
    """`async with Admin(bootstrap_servers, **config)`; see the module docstring."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "localhost:9092",
        *,
        config: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.config = AdminConfig.build(config, bootstrap_servers=bootstrap_servers, **kwargs)
        self.client = NetworkClient(self.config)
        self.metadata = ClusterMetadata(self.client)
        self._backoff_s = self.config.retry_backoff_ms / 1000

    async def __aenter__(self) -> Admin:
        await self.client.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self.client.__aexit__(*exc_info)

    # -- routing ------------------------------------------------------------------------

    async def _controller(self) -> int:
        cluster = await self.metadata.refresh([])
        if cluster.controller_id in cluster.brokers:
            return cluster.controller_id
        if not cluster.brokers:
            raise KafkaConnectionError("the cluster's metadata names no broker")
        return next(iter(cluster.brokers))

    async def _coordinator(self, group_id: str) -> tuple[str, int]:
        with trio.fail_after(self.config.request_timeout_ms / 1000):
            while True:
                node = self.client.least_loaded_node()
                code, host, port = await find_group_coordinator(self.client, node, group_id)
                if not code:
                    return (host, port)
                if not is_retriable(code):
                    raise error_for(code, f"FindCoordinator for group {group_id!r}")
                await trio.sleep(self._backoff_s)

    async def _leaders(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[int, list[TopicPartition]]:
        partitions = list(partitions)
        cluster = await self.metadata.refresh({tp.topic for tp in partitions})
        by_node: dict[int, list[TopicPartition]] = {}
        errors = {}
        for tp in partitions:
            leader = cluster.leader_for(tp.topic, tp.partition)
            if leader is None:
                meta = cluster.topics.get(tp.topic)
                code = (
                    meta.error_code
                    if meta and meta.error_code
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
                errors[tp] = error_for(code, f"{tp.topic}-{tp.partition}")
            else:
                by_node.setdefault(leader, []).append(tp)
        _check("finding leaders", errors)
        return by_node

    # -- topics -------------------------------------------------------------------------

    async def create_topics(
        self,
        topics: Iterable[NewTopic] | Mapping[str, int],
        *,
        configs: Mapping[str, Mapping[str, str]] | None = None,
        validate_only: bool = False,
        timeout_ms: int = _DEFAULT_TIMEOUT_MS,
    ) -> dict[str, NewTopic]:
        """CreateTopics; returns each topic as created (partition count, replication factor).

        `topics` is NewTopics, or {name: partition count} with `configs` {name: {key: value}}.
        """
        if isinstance(topics, Mapping):
            configs = configs or {}
            topics = [NewTopic(n, count, -1, configs.get(n)) for n, count in topics.items()]
        topics = list(topics)
        request = CreateTopicsRequest(
            topics=[
                CreatableTopic(
                    name=t.name,
                    num_partitions=t.num_partitions,
                    replication_factor=t.replication_factor,
                    configs=[CreatableTopicConfig(name=k, value=v) for k, v in t.configs.items()],
                )
                for t in topics
            ],
            timeout_ms=timeout_ms,
            validate_only=validate_only,
        )
        response = await self.client.send(await self._controller(), request)
        results, errors = {}, {}
        for t in response.topics:
            if t.error_code:
                errors[t.name] = _error(t.error_code, t.error_message, f"topic {t.name!r}")
            else:
                results[t.name] = NewTopic(
                    t.name,
                    t.num_partitions,
                    t.replication_factor,
                    {c.name: c.value for c in t.configs or ()},
                )
        _check("CreateTopics", errors, results)
        return results

    async def delete_topics(
        self, names: Iterable[str], *, timeout_ms: int = _DEFAULT_TIMEOUT_MS
    ) -> None:
        names = list(names)
        node = await self._controller()
        version = await self.client.api_version(node, DeleteTopicsRequest.API_KEY)
        if version >= 6:
            request = DeleteTopicsRequest(
                topics=[DeleteTopicState(name=n) for n in names], timeout_ms=timeout_ms
            )
        else:
            request = DeleteTopicsRequest(topic_names=names, timeout_ms=timeout_ms)
        response = await self.client.send(node, request, version)
        errors = {
            r.name: _error(r.error_code, r.error_message, f"topic {r.name!r}")
            for r in response.responses
            if r.error_code
        }
        _check("DeleteTopics", errors)

    async def describe_cluster(self) -> dict[str, Any]:
        """{"cluster_id", "controller_id", "brokers": {id: (host, port, rack)}} from a
        Metadata answer (Kafka's describeCluster)."""
        node = self.client.least_loaded_node()
        response = await self.client.send(node, MetadataRequest(topics=[]))
        return {
            "cluster_id": response.cluster_id,
            "controller_id": response.controller_id,
            "brokers": {b.node_id: (b.host, b.port, b.rack) for b in response.brokers},
        }

    async def list_topics(self) -> list[str]:
        """The names of every topic, internal ones included."""
        return sorted(await self.describe_topics())

    async def describe_topics(
        self, names: Iterable[str] | None = None
    ) -> dict[str, TopicDescription]:
        """Partitions with leader, replicas and ISR; every topic when `names` is None."""
        node = self.client.least_loaded_node()
        topics = None if names is None else [MetadataRequestTopic(name=n) for n in names]
        request = MetadataRequest(topics=topics, allow_auto_topic_creation=False)
        response = await self.client.send(node, request)
        results, errors = {}, {}
        for t in response.topics:
            if t.error_code:
                errors[t.name] = error_for(t.error_code, f"topic {t.name!r}")
                continue
            partitions = sorted(
                (
                    PartitionInfo(
                        partition=p.partition_index,
                        leader=p.leader_id,
                        replicas=tuple(p.replica_nodes),
                        isr=tuple(p.isr_nodes),
                        offline_replicas=tuple(getattr(p, "offline_replicas", None) or ()),
                    )
                    for p in t.partitions
                ),
                key=lambda p: p.partition,
            )
            results[t.name] = TopicDescription(
                name=t.name,
                topic_id=str(getattr(t, "topic_id", "")),
                is_internal=t.is_internal,
                partitions=tuple(partitions),
            )
        _check("describing topics", errors, results)
        return results

    async def create_partitions(
        self,
        new_totals: Mapping[str, int],
        *,
        validate_only: bool = False,
        timeout_ms: int = _DEFAULT_TIMEOUT_MS,
    ) -> None:
        """Grow each topic to the given total number of partitions."""
        request = CreatePartitionsRequest(
            topics=[
                CreatePartitionsTopic(name=t, count=n, assignments=None)
                for t, n in new_totals.items()
            ],
            timeout_ms=timeout_ms,
            validate_only=validate_only,
        )
        response = await self.client.send(await self._controller(), request)
        errors = {
            r.name: _error(r.error_code, r.error_message, f"topic {r.name!r}")
            for r in response.results
            if r.error_code
        }
        _check("CreatePartitions", errors)

    # -- configs ------------------------------------------------------------------------

    async def _config_node(self, resource: ConfigResource) -> int | str:
        # Broker configs go to that broker; topic configs to any.
        if resource.type == ConfigResourceType.BROKER and resource.name:
            await self.metadata.refresh([])
            return int(resource.name)
        return self.client.least_loaded_node()

    async def describe_configs(
        self, resources: Iterable[ConfigResource]
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        results, errors = {}, {}
        for resource in resources:
            request = DescribeConfigsRequest(
                resources=[
                    DescribeConfigsResource(
                        resource_type=int(resource.type),
                        resource_name=resource.name,
                        configuration_keys=None,
                    )
                ]
            )
            response = await self.client.send(await self._config_node(resource), request)
            r = response.results[0]
            if r.error_code:
                errors[resource] = _error(r.error_code, r.error_message, str(resource))
                continue
            results[resource] = {
                c.name: ConfigEntry(
                    name=c.name,
                    value=c.value,
                    read_only=c.read_only,
                    is_default=c.is_default or c.config_source == 5,
                    is_sensitive=c.is_sensitive,
                    source=c.config_source,
                )
                for c in r.configs
            }
        _check("DescribeConfigs", errors, results)
        return results

    async def alter_configs(
        self, configs: Mapping[ConfigResource, Mapping[str, str]], *, validate_only: bool = False
    ) -> None:
        """AlterConfigs: each resource's whole set of dynamic configs becomes `configs`."""
        errors = {}
        for resource, entries in configs.items():
            request = _alter.AlterConfigsRequest(
                resources=[
                    _alter.AlterConfigsResource(
                        resource_type=int(resource.type),
                        resource_name=resource.name,
                        configs=[
                            _alter.AlterableConfig(name=k, value=v) for k, v in entries.items()
                        ],
                    )
                ],
                validate_only=validate_only,
            )
            response = await self.client.send(await self._config_node(resource), request)
            r = response.responses[0]
            if r.error_code:
                errors[resource] = _error(r.error_code, r.error_message, str(resource))
        _check("AlterConfigs", errors)

    _OPS = {"set": 0, "delete": 1, "append": 2, "subtract": 3}

    async def incremental_alter_configs(
        self,
        configs: Mapping[ConfigResource, Mapping[str, str | None | tuple[str, str | None]]],
        *,
        validate_only: bool = False,
    ) -> None:
        """IncrementalAlterConfigs: per key a value to set, None to delete (back to the
        default), or ("append" | "subtract" | "set" | "delete", value)."""
        errors = {}
        for resource, entries in configs.items():
            ops = []
            for name, value in entries.items():
                if isinstance(value, tuple):
                    op, value = value
                else:
                    op = "delete" if value is None else "set"
                ops.append(
                    _incremental.AlterableConfig(
                        name=name, config_operation=self._OPS[op], value=value
                    )
                )
            request = _incremental.IncrementalAlterConfigsRequest(
                resources=[
                    _incremental.AlterConfigsResource(
                        resource_type=int(resource.type), resource_name=resource.name, configs=ops
                    )
                ],
                validate_only=validate_only,
            )
            response = await self.client.send(await self._config_node(resource), request)
            r = response.responses[0]
            if r.error_code:
                errors[resource] = _error(r.error_code, r.error_message, str(resource))
        _check("IncrementalAlterConfigs", errors)

    # -- groups -------------------------------------------------------------------------

    async def list_groups(self) -> list[GroupListing]:
        """Every group on every broker."""
        cluster = await self.metadata.refresh([])
        listings, errors = [], {}
        for node in sorted(cluster.brokers):
            response = await self.client.send(node, ListGroupsRequest())
            if response.error_code:
                errors[f"broker {node}"] = error_for(
                    response.error_code, f"ListGroups on broker {node}"
                )
                continue
            listings += [
                GroupListing(
                    group_id=g.group_id, protocol_type=g.protocol_type, state=g.group_state
                )
                for g in response.groups
            ]
        _check("ListGroups", errors, listings)
        return sorted(listings, key=lambda g: g.group_id)

    async def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        """State, protocol and members, with consumer subscriptions and assignments decoded."""
        results, errors = {}, {}
        for group_id in group_ids:
            coordinator = await self._coordinator(group_id)
            response = await self.client.send(coordinator, DescribeGroupsRequest(groups=[group_id]))
            g = response.groups[0]
            if g.error_code:
                errors[group_id] = error_for(g.error_code, f"group {group_id!r}")
                continue
            members = []
            for m in g.members:
                topics: tuple[str, ...] = ()
                assignment: frozenset[TopicPartition] = frozenset()
                if g.protocol_type == "consumer":
                    if m.member_metadata:
                        topics = decode_subscription(m.member_id, m.member_metadata, None).topics
                    assignment = frozenset(decode_assignment(m.member_assignment))
                members.append(
                    MemberDescription(
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        topics=topics,
                        assignment=assignment,
                    )
                )
            results[group_id] = GroupDescription(
                group_id=group_id,
                state=g.group_state,
                protocol_type=g.protocol_type,
                protocol=g.protocol_data,
                members=tuple(members),
            )
        _check("DescribeGroups", errors, results)
        return results

    async def list_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """The group's committed offsets (all of them when `partitions` is None)."""
        coordinator = await self._coordinator(group_id)
        version = await self.client.api_version(coordinator, OffsetFetchRequest.API_KEY)
        wanted = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            wanted = by_topic
        if version >= 8:
            from trio_broker.protocol._generated.offset_fetch_request import (
                OffsetFetchRequestTopics,
            )

            topics = (
                None
                if wanted is None
                else [
                    OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                    for t, ps in wanted.items()
                ]
            )
            request = OffsetFetchRequest(
                groups=[OffsetFetchRequestGroup(group_id=group_id, topics=topics)]
            )
        else:
            from trio_broker.protocol._generated.offset_fetch_request import OffsetFetchRequestTopic

            topics = (
                None
                if wanted is None
                else [
                    OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                    for t, ps in wanted.items()
                ]
            )
            request = OffsetFetchRequest(group_id=group_id, topics=topics)
        response = await self.client.send(coordinator, request, version)
        if version >= 8:
            code, answer = response.groups[0].error_code, response.groups[0].topics
        else:
            code, answer = response.error_code, response.topics
        if code:
            raise AdminError("OffsetFetch", {group_id: error_for(code, f"group {group_id!r}")})
        result, errors = {}, {}
        for t in answer:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if p.error_code:
                    errors[tp] = error_for(p.error_code, f"{t.name}-{p.partition_index}")
                elif p.committed_offset >= 0:
                    result[tp] = p.committed_offset
        _check("OffsetFetch", errors, result)
        return result

    async def list_offsets(
        self, specs: Mapping[TopicPartition, str | int], *, isolation_level: int = 0
    ) -> dict[TopicPartition, int]:
        """ListOffsets: per partition "earliest" (the log start), "latest" (the log end) or a
        timestamp in ms (the first offset at or after it)."""
        timestamps = {
            TopicPartition(*tp): {"earliest": EARLIEST, "latest": LATEST}.get(spec, spec)  # type: ignore[arg-type]
            for tp, spec in specs.items()
        }
        result, errors = {}, {}
        for node, tps in (await self._leaders(timestamps)).items():
            answers = await list_offsets(
                self.client, node, {tp: timestamps[tp] for tp in tps}, isolation_level
            )
            for tp, (code, offset) in answers.items():
                if code:
                    errors[tp] = error_for(code, f"{tp.topic}-{tp.partition}")
                else:
                    result[tp] = offset
        _check("ListOffsets", errors, result)
        return result

    async def group_lag(self, group_id: str) -> dict[TopicPartition, PartitionLag]:
        """Per partition the group committed: committed offset, log end offset, lag."""
        committed = await self.list_group_offsets(group_id)
        ends = await self.list_offsets({tp: "latest" for tp in committed})
        return {
            tp: PartitionLag(committed=committed[tp], log_end_offset=ends[tp])
            for tp in sorted(committed)
        }

    async def delete_records(
        self, before: Mapping[TopicPartition, int], *, timeout_ms: int = _DEFAULT_TIMEOUT_MS
    ) -> dict[TopicPartition, int]:
        """Delete the records before each offset (-1: the high watermark); returns the new
        low watermarks (log start offsets)."""
        before = {TopicPartition(*tp): o for tp, o in before.items()}
        result, errors = {}, {}
        for node, tps in (await self._leaders(before)).items():
            by_topic: dict[str, list[DeleteRecordsPartition]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(
                    DeleteRecordsPartition(partition_index=tp.partition, offset=before[tp])
                )
            request = DeleteRecordsRequest(
                topics=[DeleteRecordsTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
                timeout_ms=timeout_ms,
            )
            response = await self.client.send(node, request)
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if p.error_code:
                        errors[tp] = error_for(p.error_code, f"{t.name}-{p.partition_index}")
                    else:
                        result[tp] = p.low_watermark
        _check("DeleteRecords", errors, result)
        return result

    async def alter_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int]
    ) -> None:
        """Commit `offsets` for a group with no active members (Kafka's
        alterConsumerGroupOffsets: an OffsetCommit outside any generation, which the
        coordinator refuses with UNKNOWN_MEMBER_ID while the group has members)."""
        from trio_broker.protocol._generated.offset_commit_request import (
            OffsetCommitRequest,
            OffsetCommitRequestPartition,
            OffsetCommitRequestTopic,
        )

        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        for tp, offset in offsets.items():
            tp = TopicPartition(*tp)
            by_topic.setdefault(tp.topic, []).append(
                OffsetCommitRequestPartition(partition_index=tp.partition, committed_offset=offset)
            )
        request = OffsetCommitRequest(
            group_id=group_id,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
        )
        response = await self.client.send(await self._coordinator(group_id), request)
        errors = {
            TopicPartition(t.name, p.partition_index): error_for(
                p.error_code, f"{t.name}-{p.partition_index}"
            )
            for t in response.topics
            for p in t.partitions
            if p.error_code
        }
        _check("OffsetCommit", errors)

    async def delete_groups(self, group_ids: Iterable[str]) -> None:
        errors = {}
        for group_id in group_ids:
            coordinator = await self._coordinator(group_id)
            response = await self.client.send(
                coordinator, DeleteGroupsRequest(groups_names=[group_id])
            )
            for r in response.results:
                if r.error_code:
                    errors[r.group_id] = error_for(r.error_code, f"group {r.group_id!r}")
        _check("DeleteGroups", errors)

    # -- replicas: elections, reassignments, log dirs ------------------------------------

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

    # -- security: ACLs, SCRAM credentials, client quotas ---------------------------------

    async def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """CreateAcls. Adding a binding that exists already is not an error (as Kafka)."""
        from trio_broker.protocol._generated.create_acls_request import (
            AclCreation,
            CreateAclsRequest,
        )

        bindings = list(bindings)
        if not bindings:
            return
        request = CreateAclsRequest(
            creations=[
                AclCreation(
                    resource_type=b.resource_type,
                    resource_name=b.resource_name,
                    resource_pattern_type=b.pattern_type,
                    principal=b.principal,
                    host=b.host,
                    operation=b.operation,
                    permission_type=b.permission_type,
                )
                for b in bindings
            ]
        )
        response = await self.client.send(self.client.least_loaded_node(), request)
        errors = {
            b: _error(r.error_code, r.error_message, str(b))
            for b, r in zip(bindings, response.results, strict=True)
            if r.error_code
        }
        _check("CreateAcls", errors)

    async def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """DescribeAcls: the bindings matching `acl_filter` (every binding when None)."""
        from trio_broker.protocol._generated.describe_acls_request import DescribeAclsRequest

        f = acl_filter or AclBindingFilter()
        request = DescribeAclsRequest(**_acl_filter_fields(f))
        response = await self.client.send(self.client.least_loaded_node(), request)
        if response.error_code:
            _check("DescribeAcls", {f: _error(response.error_code, response.error_message, str(f))})
        return [
            AclBinding(
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                pattern_type=r.pattern_type,
                principal=a.principal,
                host=a.host,
                operation=a.operation,
                permission_type=a.permission_type,
            )
            for r in response.resources
            for a in r.acls
        ]

    async def delete_acls(
        self, filters: Iterable[AclBindingFilter]
    ) -> dict[AclBindingFilter, list[AclBinding]]:
        """DeleteAcls: per filter the bindings it matched, which are gone now."""
        from trio_broker.protocol._generated.delete_acls_request import (
            DeleteAclsFilter,
            DeleteAclsRequest,
        )

        filters = list(dict.fromkeys(filters))
        if not filters:
            return {}
        request = DeleteAclsRequest(
            filters=[DeleteAclsFilter(**_acl_filter_fields(f)) for f in filters]
        )
        response = await self.client.send(self.client.least_loaded_node(), request)
        results: dict[AclBindingFilter, list[AclBinding]] = {}
        errors: dict[Any, KafkaError] = {}
        for f, r in zip(filters, response.filter_results, strict=True):
            if r.error_code:
                errors[f] = _error(r.error_code, r.error_message, str(f))
                continue
            results[f] = []
            for m in r.matching_acls:
                binding = AclBinding(
                    resource_type=m.resource_type,
                    resource_name=m.resource_name,
                    pattern_type=m.pattern_type,
                    principal=m.principal,
                    host=m.host,
                    operation=m.operation,
                    permission_type=m.permission_type,
                )
                if m.error_code:
                    errors[binding] = _error(m.error_code, m.error_message, str(binding))
                else:
                    results[f].append(binding)
        _check("DeleteAcls", errors, results)
        return results

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, list[tuple[str, int]]]:
        """DescribeUserScramCredentials: per user [(mechanism, iterations)], for `users` or
        every user with a credential. Salts and keys never leave the broker."""
        from trio_broker.protocol._generated.describe_user_scram_credentials_request import (
            DescribeUserScramCredentialsRequest,
            UserName,
        )

        wanted = None if users is None else [UserName(name=u) for u in users]
        request = DescribeUserScramCredentialsRequest(users=wanted)
        response = await self.client.send(self.client.least_loaded_node(), request)
        if response.error_code:
            raise _error(
                response.error_code, response.error_message, "DescribeUserScramCredentials"
            )
        names = {v: k for k, v in SCRAM_MECHANISMS.items()}
        results, errors = {}, {}
        for r in response.results:
            if r.error_code:
                errors[r.user] = _error(r.error_code, r.error_message, f"user {r.user!r}")
                continue
            results[r.user] = [
                (names.get(c.mechanism, f"UNKNOWN({c.mechanism})"), c.iterations)
                for c in r.credential_infos
            ]
        _check("DescribeUserScramCredentials", errors, results)
        return results

    async def alter_user_scram_credentials(
        self,
        upsertions: Iterable[UserScramCredentialUpsertion] = (),
        deletions: Iterable[UserScramCredentialDeletion] = (),
    ) -> None:
        """AlterUserScramCredentials, on the controller (as Kafka's admin sends it). Each
        password is salted and hashed here, PBKDF2-HMAC with the mechanism's hash over
        `iterations` (KIP-554): the broker sees only the salted password."""
        import hashlib
        import secrets

        from trio_broker.protocol._generated.alter_user_scram_credentials_request import (
            AlterUserScramCredentialsRequest,
            ScramCredentialDeletion,
            ScramCredentialUpsertion,
        )

        hashes = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
        upserts = []
        for u in upsertions:
            salt = u.salt if u.salt is not None else secrets.token_bytes(32)
            password = u.password.encode() if isinstance(u.password, str) else u.password
            upserts.append(
                ScramCredentialUpsertion(
                    name=u.user,
                    mechanism=SCRAM_MECHANISMS[u.mechanism],
                    iterations=u.iterations,
                    salt=salt,
                    salted_password=hashlib.pbkdf2_hmac(
                        hashes[u.mechanism], password, salt, u.iterations
                    ),
                )
            )
        deletes = [
            ScramCredentialDeletion(name=d.user, mechanism=SCRAM_MECHANISMS[d.mechanism])
            for d in deletions
        ]
        if not upserts and not deletes:
            return
        request = AlterUserScramCredentialsRequest(deletions=deletes, upsertions=upserts)
        response = await self.client.send(await self._controller(), request)
        errors = {
            r.user: _error(r.error_code, r.error_message, f"user {r.user!r}")
            for r in response.results
            if r.error_code
        }
        _check("AlterUserScramCredentials", errors)

    async def describe_client_quotas(
        self,
        components: Iterable[ClientQuotaFilterComponent] | Mapping[str, str | None] = (),
        *,
        strict: bool = False,
    ) -> dict[ClientQuotaEntity, dict[str, float]]:
        """DescribeClientQuotas: the entities matching every component, with their quota
        values. `components` as {entity type: name, or None for the default entity} is
        short for exact and default matches; no component matches every entity. `strict`
        leaves out entities with entity types the filter does not name."""
        from trio_broker.protocol._generated.describe_client_quotas_request import (
            ComponentData,
            DescribeClientQuotasRequest,
        )

        if isinstance(components, Mapping):
            components = [
                ClientQuotaFilterComponent.of_default_entity(t)
                if n is None
                else ClientQuotaFilterComponent.of_entity(t, n)
                for t, n in components.items()
            ]
        request = DescribeClientQuotasRequest(
            components=[
                ComponentData(entity_type=c.entity_type, match_type=c.match_type, match=c.match)
                for c in components
            ],
            strict=strict,
        )
        response = await self.client.send(self.client.least_loaded_node(), request)
        if response.error_code:
            raise _error(response.error_code, response.error_message, "DescribeClientQuotas")
        return {
            ClientQuotaEntity([(e.entity_type, e.entity_name) for e in entry.entity]): {
                v.key: v.value for v in entry.values
            }
            for entry in response.entries or ()
        }

    async def alter_client_quotas(
        self,
        entries: Mapping[ClientQuotaEntity, Mapping[str, float | None]],
        *,
        validate_only: bool = False,
    ) -> None:
        """AlterClientQuotas: per entity, quota keys (producer_byte_rate,
        consumer_byte_rate, request_percentage) to set to a value, or None to remove.
        An entity may also be given as its ((type, name), ...) pairs."""
        from trio_broker.protocol._generated.alter_client_quotas_request import (
            AlterClientQuotasRequest,
            EntityData,
            EntryData,
            OpData,
        )

        wanted = {ClientQuotaEntity.of(e): ops for e, ops in entries.items()}
        if not wanted:
            return
        request = AlterClientQuotasRequest(
            entries=[
                EntryData(
                    entity=[EntityData(entity_type=t, entity_name=n) for t, n in entity.entries],
                    ops=[
                        OpData(key=k, value=0.0 if v is None else float(v), remove=v is None)
                        for k, v in ops.items()
                    ],
                )
                for entity, ops in wanted.items()
            ],
            validate_only=validate_only,
        )
        response = await self.client.send(self.client.least_loaded_node(), request)
        errors = {}
        for r in response.entries:
            if r.error_code:
                entity = ClientQuotaEntity([(e.entity_type, e.entity_name) for e in r.entity])
                errors[entity] = _error(r.error_code, r.error_message, f"quotas of {entity}")
        _check("AlterClientQuotas", errors)
