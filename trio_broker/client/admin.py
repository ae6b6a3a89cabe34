"""The admin client (Kafka's Admin), in Trio. Its cluster calls (elections,
reassignments, log dirs) are in admin_replicas.py and its security calls (ACLs, SCRAM
credentials, client quotas) in admin_security.py, mixed into `Admin`.

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

from trio_broker.client.admin_replicas import ReplicaCalls
from trio_broker.client.admin_security import SecurityCalls
from trio_broker.client.admin_share import ShareGroupCalls
from trio_broker.client.admin_types import (
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
    check_errors,
    error_with,
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
from trio_broker.protocol._generated.consumer_group_describe_request import (
    ConsumerGroupDescribeRequest,
)
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


_check = check_errors
_error = error_with


class Admin(ReplicaCalls, SecurityCalls, ShareGroupCalls):
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
        # Broker configs and log levels go to that broker; topic configs to any.
        if (
            resource.type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER)
            and resource.name
        ):
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
                    group_id=g.group_id,
                    protocol_type=g.protocol_type,
                    state=g.group_state,
                    group_type=g.group_type or "classic",
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
            described = await self._describe_consumer_group(coordinator, group_id)
            if isinstance(described, GroupDescription):
                results[group_id] = described
                continue
            if described is not None:
                errors[group_id] = described
                continue
            share = await self.describe_share_group(group_id)
            if share is not None:
                results[group_id] = share
                continue
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

    async def _describe_consumer_group(
        self, coordinator: Any, group_id: str
    ) -> GroupDescription | KafkaError | None:
        """ConsumerGroupDescribe, as Kafka's admin asks first; None for a classic group (or
        a broker without KIP-848), which DescribeGroups describes."""
        try:
            await self.client.api_version(coordinator, ConsumerGroupDescribeRequest.API_KEY)
        except KafkaError:
            return None
        response = await self.client.send(
            coordinator, ConsumerGroupDescribeRequest(group_ids=[group_id])
        )
        g = response.groups[0]
        if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            return None
        if g.error_code:
            return error_for(g.error_code, g.error_message or f"group {group_id!r}")

        def partitions(assignment: Any) -> frozenset[TopicPartition]:
            return frozenset(
                TopicPartition(t.topic_name, p)
                for t in assignment.topic_partitions
                for p in t.partitions
            )

        members = tuple(
            MemberDescription(
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                topics=tuple(m.subscribed_topic_names),
                assignment=partitions(m.assignment),
                member_epoch=m.member_epoch,
                target_assignment=partitions(m.target_assignment),
            )
            for m in g.members
        )
        return GroupDescription(
            group_id=group_id,
            state=g.group_state,
            protocol_type="consumer",
            protocol=g.assignor_name,
            members=members,
            group_type="consumer",
            group_epoch=g.group_epoch,
            assignment_epoch=g.assignment_epoch,
        )

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
