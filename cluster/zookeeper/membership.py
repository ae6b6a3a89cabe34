"""A broker joins the cluster through ZooKeeper (Kafka's KafkaServer start-up, ZooKeeper era).

    join_cluster(zk, config)      Kafka's top-level znodes; the cluster id agreed in /cluster/id
                                  and checked against every log dir's meta.properties
    BrokerMembership.run          per session: the ephemeral /brokers/ids/<id>; then the
                                  controller election (cluster/controller/kafka_controller.py); on every
                                  broker: live brokers and the controller id into the metadata

Every broker also reads the live brokers and the controller straight from ZooKeeper, so
that Metadata on any broker lists the whole cluster from its start; the controller's
UpdateMetadata (apis/update_metadata.py) brings the same brokers and every partition.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import trio

from trio_broker.cluster.metadata import BrokerNode
from trio_broker.cluster.zookeeper import zk_data
from trio_broker.cluster.zookeeper.session import ZooKeeperSession
from trio_broker.errors import FatalBrokerError

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.config import BrokerConfig

logger = logging.getLogger(__name__)

__all__ = [
    "BrokerMembership",
    "InconsistentClusterIdError",
    "NodeIdRegisteredError",
    "join_cluster",
    "registered_brokers",
]


class InconsistentClusterIdError(FatalBrokerError):
    """Kafka's InconsistentClusterIdException: a log dir belongs to another cluster."""


class NodeIdRegisteredError(FatalBrokerError):
    """Another live broker holds /brokers/ids/<node.id>."""


async def registered_brokers(zk: ZooKeeperSession) -> set[int]:
    """The ids under /brokers/ids, as ZooKeeper has them now."""
    return {int(c) for c in await zk.get_children(zk_data.BROKER_IDS_PATH) if c.isdigit()}


async def join_cluster(zk: ZooKeeperSession, config: BrokerConfig) -> str:
    """Make Kafka's top-level znodes, agree on the cluster id, check the log dirs against it;
    returns the cluster id."""
    for path in zk_data.PERSISTENT_PATHS:
        await zk.create_if_missing(path)
    cluster_id = await _agree_cluster_id(zk, config.cluster_id)
    check_meta_properties(config.log_dirs, cluster_id, zk.connect.hosts + zk.connect.chroot)
    return cluster_id


async def _agree_cluster_id(zk: ZooKeeperSession, configured: str) -> str:
    """Kafka's getOrGenerateClusterId: the first broker writes /cluster/id, the others adopt
    it. A configured `cluster.id` is what the first broker writes, and must match later."""
    from kazoo.exceptions import NoNodeError

    from trio_broker.config import new_cluster_id

    try:
        data, _ = await zk.get(zk_data.CLUSTER_ID_PATH)
        cluster_id = zk_data.decode_cluster_id(data)
    except NoNodeError:
        proposed = configured or new_cluster_id()
        if await zk.create_if_missing(zk_data.CLUSTER_ID_PATH, zk_data.encode_cluster_id(proposed)):
            logger.info("created cluster id %s in ZooKeeper", proposed)
            return proposed
        data, _ = await zk.get(zk_data.CLUSTER_ID_PATH)  # another broker was first
        cluster_id = zk_data.decode_cluster_id(data)
    if configured and configured != cluster_id:
        raise InconsistentClusterIdError(
            f"The cluster id {cluster_id} in ZooKeeper doesn't match cluster.id={configured} "
            "in the configuration. Configured zookeeper.connect may be wrong."
        )
    return cluster_id


def check_meta_properties(log_dirs: Sequence[str], cluster_id: str, where: str) -> None:
    """Kafka's check at start: a log dir that already belongs to a cluster must belong to
    this one (a broker pointed at the wrong ZooKeeper, or a missing chroot, stops here)."""
    from trio_broker.log.checkpoints import read_meta_properties

    for log_dir in log_dirs:
        props = read_meta_properties(Path(log_dir)) or {}
        stored = props.get("cluster.id")
        if stored is not None and stored != cluster_id:
            raise InconsistentClusterIdError(
                f"The cluster id {cluster_id} (from ZooKeeper at {where}) doesn't match "
                f"cluster.id={stored} stored in {Path(log_dir) / 'meta.properties'}. The "
                "broker is trying to join the wrong cluster. Configured zookeeper.connect "
                "may be wrong."
            )


class ControllerElection(Protocol):
    """What membership needs of the controller election: a service to start."""

    async def run(self, *, task_status: trio.TaskStatus[None] = ...) -> None: ...


class BrokerMembership:
    """The broker's part in the cluster, as one service of the broker's nursery.

    `run` registers the broker (again after every session expiry, since its ephemeral
    znode goes with the session) and keeps `broker.metadata.brokers` and
    `.controller_id` equal to ZooKeeper's /brokers/ids and /controller. It reports started
    once registered and once the metadata holds ZooKeeper's first answer.
    """

    def __init__(self, broker: Broker, zk: ZooKeeperSession, elector: ControllerElection) -> None:
        self.broker = broker
        self.zk = zk
        self.node_id = broker.node_id
        self.registrations = 0  # how many sessions this broker registered in
        # The controller election (cluster/controller/kafka_controller.py's ControllerElector),
        # started once the broker is registered: passed in, so that ZooKeeper's layer does
        # not import the controller that stands on it.
        self.elector = elector
        # Called when a new session opens after one expired, before registering again
        # (the replica manager gives up its leaderships: cluster/replication/).
        self.on_session_expired: list[Callable[[], object]] = []
        # Awaited before every registration after the first (the replica manager waits
        # until the controller has decided anew the leaderships it gave up on its own).
        self.before_registering: list[Callable[[], Awaitable[object]]] = []

    def broker_info(self) -> zk_data.BrokerInfo:
        return zk_data.BrokerInfo(
            broker_id=self.node_id,
            endpoints=zk_data.endpoints_of(
                self.broker.advertised, self.broker.config.security_protocol
            ),
            rack=self.broker.config.broker_rack,
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        registered = trio.Event()
        brokers_send, brokers_receive = trio.open_memory_channel[list[str]](1)
        controller_send, controller_receive = trio.open_memory_channel[Any](1)
        async with trio.open_nursery() as nursery:

            async def register(session_id: int) -> None:
                if self.registrations:
                    logger.warning(
                        "broker %d: ZooKeeper session expired; registering again (session 0x%x)",
                        self.node_id,
                        session_id,
                    )
                    for callback in self.on_session_expired:
                        callback()
                    for wait in self.before_registering:
                        await wait()
                await self._register(session_id)
                registered.set()

            nursery.start_soon(self.zk.each_session, register)
            await registered.wait()
            # Kafka's order: registered first, then the controller starts (and may win).
            await nursery.start(self.elector.run)
            nursery.start_soon(self.zk.watch_children, zk_data.BROKER_IDS_PATH, brokers_send)
            nursery.start_soon(self.zk.watch_data, zk_data.CONTROLLER_PATH, controller_send)
            await self._update_brokers(await brokers_receive.receive())
            # Started once a controller is known, so that the first Metadata names it; a
            # cluster that elects none within a session timeout is reported as it is.
            value = await controller_receive.receive()
            with trio.move_on_after(self.zk.session_timeout_ms / 1000):
                while value is None:
                    value = await controller_receive.receive()
            self._update_controller(value)
            nursery.start_soon(self._follow_brokers, brokers_receive)
            nursery.start_soon(self._follow_controller, controller_receive)
            task_status.started()

    async def _register(self, session_id: int) -> None:
        """Kafka's registerBroker: create the ephemeral /brokers/ids/<id>. If it exists, it is
        ours only when this session owns it (a create retried after a lost connection).

        Another session's znode is usually this broker's own previous life: restarted at
        once after a crash (kill -9), its old session lives on in ZooKeeper until it times
        out. So wait, watching the znode, until it goes, up to the session timeout plus a
        margin (ZooKeeper expires sessions on its tick, which may be half the shortest
        session); a znode still there then belongs to a live broker with this node.id."""
        from kazoo.exceptions import NodeExistsError

        path = zk_data.broker_path(self.node_id)
        info = self.broker_info()
        timeout_ms = self.zk.session_timeout_ms
        wait_s = (timeout_ms + max(2000, timeout_ms // 2)) / 1000
        deadline: float | None = None
        while True:
            try:
                await self.zk.create(path, info.encode(), ephemeral=True)
                break
            except NodeExistsError:
                gone = trio.Event()
                stat = await self.zk.exists(path, watch=gone)
                if stat is None:
                    continue  # its session just ended: try again
                if stat.ephemeralOwner == session_id:
                    break
                now = trio.current_time()
                if deadline is None:
                    deadline = now + wait_s
                    logger.warning(
                        "node.id %d is registered by another session (0x%x); waiting up to "
                        "%.1f s for it to expire (a restart before the old session timed out)",
                        self.node_id,
                        stat.ephemeralOwner,
                        wait_s,
                    )
                if now >= deadline:
                    raise NodeIdRegisteredError(
                        f"node.id {self.node_id} is already registered in ZooKeeper "
                        f"({self.zk.connect.hosts}{self.zk.connect.chroot}{path}, session "
                        f"0x{stat.ephemeralOwner:x}, still there after {wait_s:.1f} s): "
                        "another broker runs with this node.id"
                    ) from None
                with trio.move_on_at(deadline):
                    await gone.wait()
        self.registrations += 1
        # This incarnation's broker epoch: requests the controller built for an earlier
        # registration carry a smaller one and are refused (STALE_BROKER_EPOCH).
        stat = await self.zk.exists(path)
        if stat is not None:
            self.broker.broker_epoch = stat.czxid
        logger.info(
            "registered broker %d at %s with endpoints %s (session 0x%x)",
            self.node_id,
            path,
            ", ".join(str(e) for e in info.endpoints),
            session_id,
        )

    async def _follow_brokers(self, receive: trio.MemoryReceiveChannel[list[str]]) -> None:
        async with receive:
            async for children in receive:
                await self._update_brokers(children)

    async def _update_brokers(self, children: list[str]) -> None:
        from kazoo.exceptions import NoNodeError

        from trio_broker.security.inter_broker import inter_broker_listener

        # Brokers reach each other on inter.broker.listener.name (else the listener named
        # by security.inter.broker.protocol, else the first one): security/inter_broker.py.
        listener = self.broker.config.inter_broker_listener_name or (
            inter_broker_listener(self.broker.config) if self.broker.advertised else None
        )
        live: dict[int, BrokerNode] = {}
        for child in children:
            if not child.isdigit():
                continue
            broker_id = int(child)
            try:
                data, _ = await self.zk.get(zk_data.broker_path(broker_id))
                info = zk_data.BrokerInfo.decode(broker_id, data)
            except NoNodeError:
                continue  # gone since the listing; the watch has fired again
            except (ValueError, KeyError, json.JSONDecodeError):
                logger.warning("ignoring unreadable registration of broker %d", broker_id)
                continue
            endpoint = info.endpoint(listener) or info.endpoint()
            if endpoint is not None:
                live[broker_id] = BrokerNode(
                    node_id=broker_id,
                    host=endpoint.host,
                    port=endpoint.port,
                    rack=info.rack,
                    endpoints=tuple((e.listener, e.host, e.port) for e in info.endpoints),
                )
        self.broker.metadata.set_live_brokers(live)

    async def _follow_controller(self, receive: trio.MemoryReceiveChannel[Any]) -> None:
        async with receive:
            async for value in receive:
                self._update_controller(value)

    def _update_controller(self, value: tuple[bytes, Any] | None) -> None:
        controller_id = -1
        if value is not None:
            try:
                controller_id = zk_data.decode_controller(value[0])
            except (ValueError, KeyError, json.JSONDecodeError):
                logger.warning("unreadable /controller: %r", value[0][:200])
        self.broker.metadata.set_controller(controller_id)
