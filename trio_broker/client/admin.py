"""The admin client: topics, partitions, configs, groups and records.

    async with Admin("127.0.0.1:9092") as admin:
        await admin.create_topics({"events": 3}, configs={"events": {"retention.ms": "60000"}})
        print(await admin.describe_topics(["events"]))
        await admin.alter_configs("events", updates={"retention.ms": "120000"})
        print(await admin.list_group_offsets("my-group"))   # committed offsets and lag

Each call raises a KafkaError naming the first error a broker answered (topic-level
errors included), so a caller never has to read error codes. Requests go where Kafka's
AdminClient sends them: topic changes to the controller, record deletion and offset
listing to each partition's leader, group requests to the group's coordinator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from trio_broker.client.config import ClientConfig
from trio_broker.client.errors import error_for
from trio_broker.client.metadata import ClusterMetadata, TopicMetadata
from trio_broker.client.network_client import NetworkClient
from trio_broker.errors import ErrorCode

__all__ = ["Admin", "ConfigEntry", "GroupDescription", "GroupMember", "PartitionOffsets"]

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
_SET, _DELETE = 0, 1  # IncrementalAlterConfigs operations
LATEST_TIMESTAMP = -1


@attrs.frozen(kw_only=True)
class ConfigEntry:
    name: str
    value: str | None
    is_default: bool
    read_only: bool
    is_sensitive: bool
    source: int


@attrs.frozen(kw_only=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: bytes


@attrs.frozen(kw_only=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[GroupMember, ...]


@attrs.frozen(kw_only=True)
class PartitionOffsets:
    """A group's committed offset on one partition, the log end offset, and the lag."""

    topic: str
    partition: int
    committed: int
    end: int

    @property
    def lag(self) -> int:
        return max(self.end - self.committed, 0) if self.committed >= 0 else self.end


def _check(code: int, what: str, message: str | None = None) -> None:
    if code:
        raise error_for(code, f"{what}: {message}" if message else what)


class Admin:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "localhost:9092",
        *,
        config: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("client_id", "trio-broker-admin")
        self.config = ClientConfig.build(config, bootstrap_servers=bootstrap_servers, **kwargs)
        self.client = NetworkClient(self.config)
        self.metadata = ClusterMetadata(self.client)
        self._timeout_ms = self.config.request_timeout_ms

    async def __aenter__(self) -> Admin:
        await self.client.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self.client.__aexit__(*exc_info)

    async def _controller(self) -> Any:
        cluster = await self.metadata.refresh([])
        if cluster.controller_id in cluster.brokers:
            return cluster.controller_id
        return self.client.least_loaded_node()

    # -- topics -------------------------------------------------------------------------------

    async def create_topics(
        self,
        topics: Mapping[str, int],
        *,
        replication_factor: int = 1,
        configs: Mapping[str, Mapping[str, str]] | None = None,
        validate_only: bool = False,
    ) -> None:
        """Create `{name: partitions}`; raises TOPIC_ALREADY_EXISTS and the like."""
        from trio_broker.protocol._generated.create_topics_request import (
            CreatableTopic,
            CreatableTopicConfig,
            CreateTopicsRequest,
        )

        request = CreateTopicsRequest(
            topics=[
                CreatableTopic(
                    name=name,
                    num_partitions=count,
                    replication_factor=replication_factor,
                    configs=[
                        CreatableTopicConfig(name=k, value=v)
                        for k, v in (configs or {}).get(name, {}).items()
                    ],
                )
                for name, count in topics.items()
            ],
            timeout_ms=self._timeout_ms,
            validate_only=validate_only,
        )
        response = await self.client.send(await self._controller(), request)
        for result in response.topics:
            _check(result.error_code, f"create topic {result.name!r}", result.error_message)

    async def delete_topics(self, topics: Iterable[str]) -> None:
        from trio_broker.protocol._generated.delete_topics_request import (
            DeleteTopicsRequest,
            DeleteTopicState,
        )

        names = list(topics)
        request = DeleteTopicsRequest(
            topics=[DeleteTopicState(name=name) for name in names],
            topic_names=names,
            timeout_ms=self._timeout_ms,
        )
        response = await self.client.send(await self._controller(), request)
        for result in response.responses:
            _check(result.error_code, f"delete topic {result.name!r}", result.error_message)

    async def describe_topics(self, topics: Iterable[str]) -> dict[str, TopicMetadata]:
        names = list(topics)
        cluster = await self.metadata.refresh(names)
        out = {}
        for name in names:
            meta = cluster.topics.get(name)
            if meta is None:
                raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r}")
            _check(meta.error_code, f"describe topic {name!r}")
            out[name] = meta
        return out

    async def list_topics(self) -> list[str]:
        from trio_broker.protocol._generated.metadata_request import MetadataRequest

        response = await self.client.send(
            self.client.least_loaded_node(), MetadataRequest(topics=None)
        )
        return sorted(t.name for t in response.topics if not t.is_internal)

    async def create_partitions(self, counts: Mapping[str, int]) -> None:
        """Grow each topic to `counts[topic]` partitions in total."""
        from trio_broker.protocol._generated.create_partitions_request import (
            CreatePartitionsRequest,
            CreatePartitionsTopic,
        )

        request = CreatePartitionsRequest(
            topics=[
                CreatePartitionsTopic(name=name, count=count, assignments=None)
                for name, count in counts.items()
            ],
            timeout_ms=self._timeout_ms,
        )
        response = await self.client.send(await self._controller(), request)
        for result in response.results:
            _check(result.error_code, f"create partitions of {result.name!r}", result.error_message)

    # -- configs ------------------------------------------------------------------------------

    async def describe_configs(
        self, topic: str | None = None, *, broker: int | None = None
    ) -> dict[str, ConfigEntry]:
        """A topic's (or a broker's) configuration entries by name."""
        from trio_broker.protocol._generated.describe_configs_request import (
            DescribeConfigsRequest,
            DescribeConfigsResource,
        )

        kind, name = (
            (TOPIC_RESOURCE, topic) if topic is not None else (BROKER_RESOURCE, str(broker))
        )
        request = DescribeConfigsRequest(
            resources=[
                DescribeConfigsResource(
                    resource_type=kind, resource_name=name, configuration_keys=None
                )
            ]
        )
        node = broker if broker is not None else self.client.least_loaded_node()
        if broker is not None:
            await self.metadata.refresh([])
        response = await self.client.send(node, request)
        result = response.results[0]
        _check(result.error_code, f"describe configs of {name!r}", result.error_message)
        return {
            c.name: ConfigEntry(
                name=c.name,
                value=c.value,
                is_default=c.is_default or c.config_source == 5,
                read_only=c.read_only,
                is_sensitive=c.is_sensitive,
                source=c.config_source,
            )
            for c in result.configs
        }

    async def alter_configs(
        self, topic: str, updates: Mapping[str, str] | None = None, delete: Iterable[str] = ()
    ) -> None:
        """Set and delete (reset to default) a topic's config entries, incrementally."""
        from trio_broker.protocol._generated.incremental_alter_configs_request import (
            AlterableConfig,
            AlterConfigsResource,
            IncrementalAlterConfigsRequest,
        )

        configs = [
            AlterableConfig(name=k, config_operation=_SET, value=v)
            for k, v in (updates or {}).items()
        ]
        configs += [AlterableConfig(name=k, config_operation=_DELETE, value=None) for k in delete]
        request = IncrementalAlterConfigsRequest(
            resources=[
                AlterConfigsResource(
                    resource_type=TOPIC_RESOURCE, resource_name=topic, configs=configs
                )
            ]
        )
        response = await self.client.send(self.client.least_loaded_node(), request)
        for result in response.responses:
            _check(result.error_code, f"alter configs of {topic!r}", result.error_message)

    # -- records and offsets ---------------------------------------------------------------------

    async def _by_leader(self, topic_partitions: Iterable[tuple[str, int]]) -> dict[int, list]:
        return await partitions_by_leader(self.metadata, topic_partitions)

    async def delete_records(self, before: Mapping[tuple[str, int], int]) -> dict:
        """Delete records before `{(topic, partition): offset}`; returns the new low watermarks."""
        from trio_broker.protocol._generated.delete_records_request import (
            DeleteRecordsPartition,
            DeleteRecordsRequest,
            DeleteRecordsTopic,
        )

        out: dict[tuple[str, int], int] = {}
        for leader, tps in (await self._by_leader(before)).items():
            topics: dict[str, list] = {}
            for topic, partition in tps:
                topics.setdefault(topic, []).append(
                    DeleteRecordsPartition(
                        partition_index=partition, offset=before[(topic, partition)]
                    )
                )
            request = DeleteRecordsRequest(
                topics=[DeleteRecordsTopic(name=t, partitions=p) for t, p in topics.items()],
                timeout_ms=self._timeout_ms,
            )
            response = await self.client.send(leader, request)
            for topic in response.topics:
                for part in topic.partitions:
                    _check(
                        part.error_code, f"delete records of {topic.name}-{part.partition_index}"
                    )
                    out[(topic.name, part.partition_index)] = part.low_watermark
        return out

    async def list_offsets(
        self, topic_partitions: Iterable[tuple[str, int]], timestamp: int = LATEST_TIMESTAMP
    ) -> dict[tuple[str, int], int]:
        """Offsets by timestamp (-1 latest, -2 earliest) from each partition's leader."""
        return await list_offsets(self.client, self.metadata, topic_partitions, timestamp)

    # -- groups -------------------------------------------------------------------------------

    async def _coordinator(self, group_id: str) -> int:
        from trio_broker.protocol._generated.find_coordinator_request import (
            FindCoordinatorRequest,
        )

        node = self.client.least_loaded_node()
        version = await self.client.api_version(node, FindCoordinatorRequest.API_KEY)
        request = FindCoordinatorRequest(key=group_id, key_type=0, coordinator_keys=[group_id])
        response = await self.client.send(node, request, version)
        if version >= 4:
            found = response.coordinators[0]
            code, message, node_id = found.error_code, found.error_message, found.node_id
            host, port = found.host, found.port
        else:
            code, message, node_id = response.error_code, response.error_message, response.node_id
            host, port = response.host, response.port
        _check(code, f"find coordinator of group {group_id!r}", message)
        self.client.set_nodes({**self.client.nodes, node_id: (host, port)})
        return node_id

    async def list_groups(self) -> list[tuple[str, str]]:
        """(group id, state) of every group on every broker."""
        from trio_broker.protocol._generated.list_groups_request import ListGroupsRequest

        cluster = await self.metadata.refresh([])
        out = []
        for node in cluster.brokers:
            response = await self.client.send(node, ListGroupsRequest())
            _check(response.error_code, "list groups")
            out += [(g.group_id, g.group_state) for g in response.groups]
        return sorted(out)

    async def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        from trio_broker.protocol._generated.describe_groups_request import DescribeGroupsRequest

        out = {}
        for group_id in group_ids:
            node = await self._coordinator(group_id)
            response = await self.client.send(node, DescribeGroupsRequest(groups=[group_id]))
            group = response.groups[0]
            _check(group.error_code, f"describe group {group_id!r}")
            out[group_id] = GroupDescription(
                group_id=group.group_id,
                state=group.group_state,
                protocol_type=group.protocol_type,
                protocol=group.protocol_data,
                members=tuple(
                    GroupMember(
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        assignment=bytes(m.member_assignment),
                    )
                    for m in group.members
                ),
            )
        return out

    async def list_group_offsets(self, group_id: str) -> list[PartitionOffsets]:
        """The group's committed offsets, with each partition's end offset and the lag."""
        from trio_broker.protocol._generated.offset_fetch_request import (
            OffsetFetchRequest,
            OffsetFetchRequestGroup,
        )

        node = await self._coordinator(group_id)
        version = await self.client.api_version(node, OffsetFetchRequest.API_KEY)
        request = OffsetFetchRequest(
            group_id=group_id,
            topics=None,
            groups=[OffsetFetchRequestGroup(group_id=group_id, topics=None)],
        )
        response = await self.client.send(node, request, version)
        if version >= 8:
            group = response.groups[0]
            _check(group.error_code, f"fetch offsets of group {group_id!r}")
            topics = group.topics
        else:
            _check(response.error_code, f"fetch offsets of group {group_id!r}")
            topics = response.topics
        committed = {}
        for topic in topics:
            for part in topic.partitions:
                _check(part.error_code, f"offset of {topic.name}-{part.partition_index}")
                committed[(topic.name, part.partition_index)] = part.committed_offset
        ends = await self.list_offsets(committed) if committed else {}
        return [
            PartitionOffsets(topic=t, partition=p, committed=offset, end=ends[(t, p)])
            for (t, p), offset in sorted(committed.items())
        ]


async def partitions_by_leader(
    metadata: ClusterMetadata, topic_partitions: Iterable[tuple[str, int]]
) -> dict[int, list[tuple[str, int]]]:
    """Group partitions by their leader's node id, after a metadata refresh."""
    tps = list(topic_partitions)
    cluster = await metadata.refresh({t for t, _ in tps})
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for topic, partition in tps:
        leader = cluster.leader_for(topic, partition)
        if leader is None:
            raise error_for(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no leader for {topic}-{partition}"
            )
        by_leader.setdefault(leader, []).append((topic, partition))
    return by_leader


async def list_offsets(
    client: NetworkClient,
    metadata: ClusterMetadata,
    topic_partitions: Iterable[tuple[str, int]],
    timestamp: int = LATEST_TIMESTAMP,
) -> dict[tuple[str, int], int]:
    """ListOffsets for each partition at its leader (-1 latest, -2 earliest)."""
    from trio_broker.protocol._generated.list_offsets_request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )

    out: dict[tuple[str, int], int] = {}
    for leader, tps in (await partitions_by_leader(metadata, topic_partitions)).items():
        topics: dict[str, list] = {}
        for topic, partition in tps:
            topics.setdefault(topic, []).append(
                ListOffsetsPartition(partition_index=partition, timestamp=timestamp)
            )
        request = ListOffsetsRequest(
            replica_id=-1,
            topics=[ListOffsetsTopic(name=t, partitions=p) for t, p in topics.items()],
        )
        response = await client.send(leader, request)
        for topic in response.topics:
            for part in topic.partitions:
                _check(part.error_code, f"list offsets of {topic.name}-{part.partition_index}")
                out[(topic.name, part.partition_index)] = part.offset
    return out
