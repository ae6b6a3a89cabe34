"""UpdateMetadata (key 6): the controller's view of the cluster into this broker's cache
(Kafka's ZkMetadataCache.updateMetadata).

Fenced by the controller epoch: a request from an older controller than one already heard
is STALE_CONTROLLER_EPOCH. Then the live brokers and the controller id are replaced, and
each partition's leader, leader epoch, ISR, replicas, offline replicas and state znode
version. A partition with leader -2 (Kafka's LeaderDuringDelete) is dropped; a full
update (v8 `type` FULL, what this project's controller sends) drops every topic it does
not name. A partition whose cached state, or this broker's own replica as its leader, has
the same leader epoch and a newer znode version (its leader changed the ISR since the
controller read it) keeps the newer ISR.

Only the cache changes here: logs are made and dropped by LeaderAndIsr and StopReplica.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.update_metadata_response import UpdateMetadataResponse

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.protocol._generated.update_metadata_request import (
        UpdateMetadataPartitionState,
    )
    from trio_broker.server.requests import Request

logger = logging.getLogger(__name__)

LEADER_DURING_DELETE = -2
_FULL = 2


async def handle(broker: Broker, request: Request) -> UpdateMetadataResponse:
    from trio_broker.cluster.metadata import BrokerNode, PartitionState, TopicState
    from trio_broker.cluster.topics import INTERNAL_TOPICS

    body = request.body
    meta = broker.metadata
    if not meta.zk_mode:
        return UpdateMetadataResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    from trio_broker.cluster.zookeeper.broker_epoch import is_stale

    if is_stale(broker, body.broker_epoch, "UpdateMetadata"):
        return UpdateMetadataResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
    if body.controller_epoch < meta.controller_epoch:
        logger.warning(
            "UpdateMetadata from controller %d with stale epoch %d (current %d)",
            body.controller_id,
            body.controller_epoch,
            meta.controller_epoch,
        )
        return UpdateMetadataResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
    meta.controller_epoch = body.controller_epoch

    # A node's own address is the one brokers reach it on (inter.broker.listener.name,
    # as the registration in cluster/zookeeper/membership.py reads it); every endpoint is kept so
    # that a client is told the address of the listener it came in on (apis/endpoints.py).
    listener = _inter_broker_listener(broker)
    brokers: dict[int, BrokerNode] = {}
    for b in body.live_brokers:
        if request.api_version == 0:
            brokers[b.id] = BrokerNode(node_id=b.id, host=b.v0_host, port=b.v0_port)
            continue
        endpoint = next((e for e in b.endpoints if e.listener == listener), None)
        endpoint = endpoint or (b.endpoints[0] if b.endpoints else None)
        if endpoint is not None:
            brokers[b.id] = BrokerNode(
                node_id=b.id,
                host=endpoint.host,
                port=endpoint.port,
                rack=b.rack or None,
                endpoints=tuple((e.listener, e.host, e.port) for e in b.endpoints),
            )
    meta.set_live_brokers(brokers)
    meta.set_controller(body.controller_id)

    by_topic: dict[str, list[UpdateMetadataPartitionState]] = {}
    topic_ids = {}
    if request.api_version < 5:
        for p in body.ungrouped_partition_states:
            by_topic.setdefault(p.topic_name, []).append(p)
    else:
        for t in body.topic_states:
            topic_ids[t.topic_name] = t.topic_id
            for p in t.partition_states:
                p.topic_name = t.topic_name
            by_topic.setdefault(t.topic_name, []).extend(t.partition_states)

    replicas = getattr(broker, "replica_manager", None)
    new_topics = []
    for name, states in by_topic.items():
        topic = meta.topics.get(name)
        topic_id = topic_ids.get(name)
        if topic is None or (topic_id is not None and topic_id != topic.topic_id):
            topic = TopicState(
                name=name,
                topic_id=topic_id or (topic.topic_id if topic else _zero_uuid()),
                internal=name in INTERNAL_TOPICS,
            )
            new_topics.append(topic)
        for p in states:
            if p.leader == LEADER_DURING_DELETE:
                topic.partitions.pop(p.partition_index, None)
                continue
            cached = topic.partitions.get(p.partition_index)
            isr, zk_version = list(p.isr), p.zk_version
            led = replicas.leader_partition(name, p.partition_index) if replicas else None
            if (
                led is not None
                and led.leader_epoch == p.leader_epoch
                and led.zk_version > zk_version
            ):
                # This broker leads it and changed the ISR after the controller read it.
                isr, zk_version = list(led.isr), led.zk_version
            if (
                cached is not None
                and cached.leader_epoch == p.leader_epoch
                and cached.zk_version > zk_version
            ):
                # Its leader changed the ISR after the controller read the state.
                isr, zk_version = list(cached.isr), cached.zk_version
            if cached is None:
                cached = topic.partitions[p.partition_index] = PartitionState(
                    topic=name, partition=p.partition_index, leader=p.leader
                )
            cached.leader = p.leader
            cached.leader_epoch = p.leader_epoch
            cached.replicas = list(p.replicas)
            cached.isr = isr
            cached.offline_replicas = list(p.offline_replicas)
            cached.zk_version = zk_version
            cached.controller_epoch = p.controller_epoch
        if topic.partitions:
            meta.topics[name] = topic
        else:
            meta.topics.pop(name, None)
    if request.api_version >= 8 and body.type == _FULL:
        for name in [t for t in meta.topics if t not in by_topic]:
            del meta.topics[name]
    if replicas is not None and replicas.shutting_down:
        # A stopping broker hears of its leaderships moved (cluster/controller/controlled_shutdown.py).
        replicas.resign_moved_leaderships()
    for topic in new_topics:
        if topic.name in meta.topics and broker.zk is not None:
            await _load_configs(broker, topic)
    return UpdateMetadataResponse(error_code=ErrorCode.NONE)


async def _load_configs(broker: Broker, topic) -> None:
    """A topic new to this broker: its configs from /config/topics (DescribeConfigs reads
    them from the cache)."""
    import trio
    from kazoo.exceptions import KazooException

    from trio_broker.cluster.zookeeper.admin_zk_client import read_topic_config

    with trio.move_on_after(5) as scope:  # ZooKeeper down must not hold the controller
        try:
            topic.configs = await read_topic_config(broker.zk, topic.name)
        except (KazooException, ValueError) as exc:
            logger.warning("cannot read the configs of topic %s: %r", topic.name, exc)
    if scope.cancelled_caught:
        logger.warning("no answer from ZooKeeper for the configs of topic %s", topic.name)


def _zero_uuid():
    import uuid

    return uuid.UUID(int=0)


def _inter_broker_listener(broker: Broker) -> str | None:
    if not broker.advertised:
        return None
    from trio_broker.security.inter_broker import inter_broker_listener

    return inter_broker_listener(broker.config)
