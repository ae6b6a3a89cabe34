"""The broker's lifecycle: `serve(config)` and `open_broker(config)`.

    serve(config, task_status)                 the broker's nursery, shielded from outside
    ├── M handler tasks (num.io.threads)       on the one request channel
    ├── background: log maintenance, coordinators, purgatory
    └── SocketServer.run: acceptors, processors, connections

Cancelling `serve` is a graceful shutdown: stop accepting, let in-flight requests finish
within `shutdown.grace.period.ms`, then close the logs (flush, checkpoints, clean-shutdown
marker) and return.

With `zookeeper.connect` the broker is one of a cluster: before anything else it opens its
ZooKeeper session and agrees on the cluster id (cluster/zookeeper/membership.py), and one more
service runs first in its nursery: its registration, view of the cluster and the
controller election (BrokerMembership, with cluster/controller/kafka_controller.py). The session is
closed last, so its ephemeral registration goes as the broker stops. Without it, nothing
about ZooKeeper is imported.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from trio_broker.config import BrokerConfig, Listener
from trio_broker.server import log_safe
from trio_broker.server.handler_pool import HandlerPool
from trio_broker.server.readiness import Readiness
from trio_broker.server.requests import NOT_NOW, Request
from trio_broker.server.socket_server import BoundListener, SocketServer

logger = logging.getLogger(__name__)

__all__ = ["Broker", "open_broker", "serve"]


def _as_config(config: BrokerConfig | Mapping[str, str] | None) -> BrokerConfig:
    if config is None:
        return BrokerConfig()
    if isinstance(config, BrokerConfig):
        return config
    return BrokerConfig.from_properties(dict(config))


class Broker:
    """Everything a handler may touch: config, cluster metadata, logs, coordinators."""

    def __init__(
        self, config: BrokerConfig, *, zk: Any = None, cluster_id: str | None = None
    ) -> None:
        from trio_broker.apis.registry import (
            advertised_versions,
            answer_batch_now,
            answer_now,
            dispatch,
            supported_versions,
        )

        self.config = config
        self.zk = zk  # the ZooKeeperSession of a cluster, or None for a lone broker
        # Kafka's broker epoch (KIP-380): the czxid of this broker's /brokers/ids znode,
        # set at each registration; -1 for a lone broker.
        self.broker_epoch = -1
        self._cluster_id = cluster_id
        self.node_id = config.node_id
        self.started_at_ms = int(time.time() * 1000)
        # What the broker serves (min.api.versions: Kafka 3.9's table or 4.0's baseline),
        # and what its ApiVersions answer lists.
        self.supported = supported_versions(config.min_api_versions)
        self.api_versions_listed = advertised_versions(config.min_api_versions)
        self._dispatch = dispatch
        # The registry's own dispatch, and its answers made without a wait (answer_now()).
        self._plain_dispatch = dispatch
        self._answer_now = answer_now
        self._answer_batch_now = answer_batch_now
        self.listeners: list[BoundListener] = []
        # metrics.BrokerMetrics when metrics.listener is set (hooks test it for None).
        self.metrics: Any = None
        self._dynamic_config: Any = None
        self.socket_server: Any = None  # set by _serve; dynamic configs reach the quotas
        self.handler_pool: Any = None
        self.advertised: list[Listener] = []
        # ACLs: None unless authorizer.class.name is set (then security/authorizer.py
        # installs one and routes requests through its checks).
        self.authorizer: Any = None
        # Client quotas: None until one exists (security/client_quotas.py, then loaded).
        self.client_quotas: Any = None
        # How far start-up has come (/ready, systemd's STATUS=): _serve hands its own in.
        self.readiness = Readiness()
        self._setup()
        if config.authorizer_class_name:
            from trio_broker.security.authorizer import install

            install(self)
        if (self.log_dirs[0] / "client-quotas.json").exists():
            from trio_broker.security.client_quotas import install as install_quotas

            install_quotas(self)

    @property
    def replication_quotas(self) -> Any:
        if self._replication_quotas is None:
            from trio_broker.cluster.replication.replication_quota import ReplicationQuotas

            self._replication_quotas = ReplicationQuotas(self)
        return self._replication_quotas

    def _setup(self) -> None:
        from trio_broker.cluster.metadata import METADATA_FILE, BrokerNode, ClusterMetadata
        from trio_broker.cluster.topic_config import resolve_log_config
        from trio_broker.cluster.topics import TopicManager
        from trio_broker.config import new_cluster_id
        from trio_broker.log import LogManager

        config = self.config
        self.log_dirs = [Path(d) for d in config.log_dirs]
        first = self.log_dirs[0]
        first.mkdir(parents=True, exist_ok=True)
        # Dynamic broker configs (cluster/dynamic_broker_config.py, its FILE_NAME), applied
        # before anything reads the config; the module is imported only when there are any.
        # In a cluster they are in ZooKeeper instead (cluster/zookeeper/broker_configs.py).
        if self.zk is None and (first / "dynamic-broker-configs.json").exists():
            self.dynamic_config.load()
        cluster_id = (
            self._cluster_id or config.cluster_id or _read_cluster_id(first) or new_cluster_id()
        )
        # A lone broker is its own controller; a cluster's is known once ZooKeeper answers.
        self.metadata = ClusterMetadata.load(
            first / METADATA_FILE,
            cluster_id=cluster_id,
            controller_id=-1 if self.zk is not None else self.node_id,
            zk_mode=self.zk is not None,
        )
        self._broker_node = BrokerNode
        _budget_descriptors()
        self.log_manager = LogManager(
            list(config.log_dirs),
            node_id=self.node_id,
            cluster_id=cluster_id,
            default_config=resolve_log_config({}, config),
            retention_check_interval_ms=config.log_retention_check_interval_ms,
            flush_offset_checkpoint_interval_ms=config.log_flush_offset_checkpoint_interval_ms,
            recovery_threads_per_data_dir=config.num_recovery_threads_per_data_dir,
        )
        topic_configs = {
            name: resolve_log_config(t.configs, config) for name, t in self.metadata.topics.items()
        }
        # Listed only: the logs load in the background once serving (or on first use).
        self.log_manager.open(topic_configs, lazy=True)
        # Replication quotas (cluster/replication/replication_quota.py), made on first use: a lone
        # broker uses only the log dir moves' (AlterReplicaLogDirs).
        self._replication_quotas: Any = None
        self.log_manager.move_quota = lambda: self.replication_quotas.alter_log_dirs
        self.topics = TopicManager(config, self.metadata, self.log_manager)
        self.topics.open()
        from trio_broker.cluster.transactions.producer_id_manager import ProducerIdManager

        self.producer_ids = ProducerIdManager(first / "producer-id-block")
        # Long-lived parts with background work (coordinators, purgatory): each has
        # `async def run(*, task_status)`, started in the broker's nursery in this order.
        self.services: list[Any] = []
        if self.zk is not None:
            from trio_broker.cluster.controller.kafka_controller import ControllerElector
            from trio_broker.cluster.zk_topics import ZkTopics
            from trio_broker.cluster.zookeeper.broker_configs import ZkBrokerConfigs
            from trio_broker.cluster.zookeeper.membership import BrokerMembership

            # First: the dynamic broker configs apply before the other services read them.
            self.zk_broker_configs: Any = ZkBrokerConfigs(self)
            self.services.append(self.zk_broker_configs)
            from trio_broker.cluster.zookeeper.group_configs import ZkGroupConfigs

            # Before the group coordinator, which reads the groups' configs.
            self.zk_group_configs: Any = ZkGroupConfigs(self)
            self.services.append(self.zk_group_configs)

            self.controller_elector = ControllerElector(self, self.zk)
            self.membership = BrokerMembership(self, self.zk, self.controller_elector)
            self.topics.zk_topics = ZkTopics(self.topics, self.zk)
            self.services.append(self.topics.zk_topics)
            from trio_broker.cluster.transactions.zk_producer_id_manager import ZkProducerIdManager

            self.producer_ids = ZkProducerIdManager(self.node_id, self.zk)
            self.services.append(self.producer_ids)
            # SCRAM credentials and client quotas live in ZooKeeper's /config in a cluster.
            from trio_broker.security.zk_quotas import ZkQuotas
            from trio_broker.security.zk_store import ZkScram

            self.services.append(ZkScram(self))
            self.services.append(ZkQuotas(self))
        from trio_broker.cluster.groups.group_coordinator import GroupCoordinator
        from trio_broker.log.cleaner import LogCleaner

        self.services.append(GroupCoordinator(self))
        from trio_broker.cluster.transactions.transaction_coordinator import TransactionCoordinator

        self.services.append(TransactionCoordinator(self))
        self.services.append(LogCleaner(self.log_manager, backoff_ms=config.log_cleaner_backoff_ms))
        from trio_broker.cluster.replication.purgatory import Purgatory

        self.fetch_purgatory = Purgatory("fetch")
        self.services.append(self.fetch_purgatory)
        # A cluster's replicas: leaders, followers and their fetchers, acks=all.
        self.replica_manager: Any = None
        if self.zk is not None:
            from trio_broker.cluster.replication.replica_manager import ReplicaManager

            self.replica_manager = ReplicaManager(self)
            self.services.append(self.replica_manager)
            self.membership.on_session_expired.append(
                self.replica_manager.resign_after_session_expired
            )
        self._flush_send, self._flush_receive = trio.open_memory_channel[Any](1000)
        self.services.append(self)
        if self.zk is not None:
            # Registered last, as Kafka's KafkaServer registers once its replica manager
            # runs: the controller's LeaderAndIsr, sent as soon as this broker appears in
            # /brokers/ids, must find the replica manager and its fetchers running.
            self.services.append(self.membership)

    @property
    def dynamic_config(self) -> Any:
        """The broker's DynamicBrokerConfig (AlterConfigs on BROKER resources)."""
        if self._dynamic_config is None:
            from trio_broker.cluster.dynamic_broker_config import DynamicBrokerConfig

            self._dynamic_config = DynamicBrokerConfig(self.config, Path(self.config.log_dirs[0]))
            self._dynamic_config.broker = self
        return self._dynamic_config

    def schedule_flush(self, log: Any) -> None:
        """flush.messages reached on `log`: fsync it in a worker thread, off the event loop."""
        try:
            self._flush_send.send_nowait(log)
        except trio.WouldBlock:
            pass  # a flush is already queued; it will cover this append too

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The broker's own background work: flushes asked for by appends."""
        task_status.started()
        async for log in self._flush_receive:
            if not log.closed:
                try:
                    started = time.perf_counter()
                    await trio.to_thread.run_sync(log.flush)
                    if self.metrics is not None:
                        self.metrics.flush_times.observe((time.perf_counter() - started) * 1000)
                except OSError as exc:
                    # A full disk must not stop the broker; the log manager flushes again.
                    logger.error("flush of %s failed: %s", log.name, exc)

    async def auto_create_topic(self, name: str) -> tuple[Any, Any]:
        return await self.topics.auto_create(name)

    def dispatch(self, request: Request) -> Awaitable[Any]:
        # Not a coroutine of its own: the handler awaits the dispatch's directly.
        return self._dispatch(self, request)  # type: ignore[no-any-return]

    def answer_now(self, request: Request) -> Any:
        """The handler's answer to `request` if it needs no wait (apis/registry.py
        answer_now), else NOT_NOW: always so while an authorizer or client quotas wrap the
        dispatch (their checks are coroutines), so that every request still passes them."""
        if self._dispatch is not self._plain_dispatch:
            return NOT_NOW
        return self._answer_now(self, request)

    def answer_batch(self, requests: list[Request]) -> list[Any] | None:
        """answer_now() for a batch of one connection's produces (server/requests.py Batch):
        their answers in order, or None (then each is answered on its own)."""
        if self._dispatch is not self._plain_dispatch:
            return None
        return self._answer_batch_now(self, requests)  # type: ignore[no-any-return]

    def security_state(self) -> Any:
        """The broker's SecurityState (credentials, ACLs), made and imported on first need."""
        from trio_broker.security.credentials import security_state

        return security_state(self)

    def secure_listener(self, name: str, protocol: str) -> Any:
        """The connection factory of a listener that is not PLAINTEXT (its TLS and SASL), for
        the socket server: trio_broker.security is imported only when such a listener exists."""
        from trio_broker.apis.api_versions import handle
        from trio_broker.security.listener import ListenerSecurity

        security = ListenerSecurity.build(
            self.config,
            name,
            protocol,
            self.security_state(),
            api_versions=lambda _broker, request: handle(self, request),
        )
        return security.connection_factory()

    def advertise(self, bound: list[BoundListener]) -> None:
        """Decide the addresses clients are told, and register this broker in the metadata."""
        self.listeners = bound
        if self.config.advertised_listeners:
            self.advertised = list(self.config.advertised_listeners)
        else:
            self.advertised = [
                Listener(name=b.listener.name, host=_advertisable(b.host), port=b.port)
                for b in bound
            ]
        first = self.advertised[0]
        self.metadata.brokers[self.node_id] = self._broker_node(
            node_id=self.node_id, host=first.host, port=first.port
        )


# In a cluster, the APIs whose handlers write or read ZooKeeper (or wait for the
# controller, which does): ControlledShutdown, LeaderAndIsr, StopReplica, UpdateMetadata,
# CreateTopics, DeleteTopics, InitProducerId (producer id blocks), CreateAcls, DeleteAcls,
# AlterConfigs, CreatePartitions, ElectLeaders, IncrementalAlterConfigs,
# AlterPartitionReassignments, ListPartitionReassignments, AlterClientQuotas,
# AlterUserScramCredentials.
_ZOOKEEPER_APIS = frozenset({4, 5, 6, 7, 19, 20, 22, 30, 31, 33, 37, 43, 44, 45, 46, 49, 51})


def _may_wait_on_zookeeper(request: Request) -> bool:
    """Answered outside the handler tasks (server/handler_pool.py): requests that may
    wait on ZooKeeper, and Metadata that may auto-create a topic."""
    key = request.api_key
    if key in _ZOOKEEPER_APIS:
        return True
    if key == 3:
        body = request.body
        return (
            body is not None
            and bool(body.topics)
            and (request.api_version < 4 or body.allow_auto_topic_creation)
        )
    return False


def _loading_status(config: BrokerConfig) -> str:
    """What the blocking log load is about to do: after an unclean stop, recovery."""
    from trio_broker.log.manager import CLEAN_SHUTDOWN_FILE

    dirs = [Path(d) for d in config.log_dirs]
    unclean = [
        d
        for d in dirs
        if d.is_dir() and any(d.iterdir()) and not (d / CLEAN_SHUTDOWN_FILE).exists()
    ]
    if unclean:
        return f"recovering logs after an unclean shutdown in {', '.join(map(str, unclean))}"
    return f"loading logs from {', '.join(map(str, dirs))}"


def _budget_descriptors() -> None:
    """Raise the soft descriptor limit to the hard one and size the cache of open segment
    files from it (log/file_cache.py): a quarter at most, the rest for connections."""
    from trio_broker.log.file_cache import budget_from_limit, raise_descriptor_limit, segment_files

    soft, _ = raise_descriptor_limit()
    segment_files.configure(budget_from_limit(soft))
    logger.info(
        "at most %d segment files open at once; %d descriptors left for connections and others",
        segment_files.capacity,
        soft - segment_files.capacity,
    )


def _advertisable(host: str) -> str:
    # A wildcard bind address is not an address a client can connect to.
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def _read_cluster_id(log_dir: Path) -> str | None:
    path = log_dir / "meta.properties"
    if not path.exists():
        return None
    from trio_broker.config import parse_properties

    return parse_properties(path.read_text()).get("cluster.id") or None


async def serve(
    config: BrokerConfig | Mapping[str, str] | None = None,
    *,
    task_status: trio.TaskStatus[list[tuple[str, int]]] = trio.TASK_STATUS_IGNORED,
    readiness: Readiness | None = None,
) -> None:
    """Run a broker until cancelled. `task_status.started()` gets the bound (host, port)s.
    `readiness`, if given, follows start-up and shutdown (trio_broker/server/readiness.py)."""
    # Client-supplied strings (ids, names) are escaped in every line the broker logs.
    log_safe.install()
    config = _as_config(config)
    readiness = readiness or Readiness()
    if not config.zookeeper_connect:
        await _serve(config, None, task_status=task_status, readiness=readiness)
        return
    from trio_broker.cluster.zookeeper.session import ZooKeeperSession

    zk = ZooKeeperSession(
        config.zookeeper_connect,
        session_timeout_ms=config.zookeeper_session_timeout_ms,
        connection_timeout_ms=config.zookeeper_connection_timeout_ms,
    )
    readiness.registered = False
    readiness.set_status(f"connecting to ZooKeeper at {config.zookeeper_connect}")
    await zk.open()
    try:
        await _serve(config, zk, task_status=task_status, readiness=readiness)
    finally:
        await zk.close()


async def _serve(
    config: BrokerConfig,
    zk: Any,
    *,
    task_status: trio.TaskStatus[list[tuple[str, int]]],
    readiness: Readiness,
) -> None:
    cluster_id = None
    if zk is not None:
        from trio_broker.cluster.zookeeper.membership import join_cluster

        cluster_id = await join_cluster(zk, config)
    readiness.set_status(_loading_status(config))
    broker = Broker(config, zk=zk, cluster_id=cluster_id)
    broker.readiness = readiness
    readiness.set_status(f"found {len(broker.log_manager.partitions())} logs; starting listeners")
    request_send, request_receive = trio.open_memory_channel[Request](config.queued_max_requests)
    server = SocketServer(config, request_send, broker.supported, secure=broker.secure_listener)
    broker.socket_server = server
    if config.metrics_listener:
        from trio_broker.metrics import BrokerMetrics

        broker.metrics = server.metrics = BrokerMetrics(broker)
        broker.log_manager.flush_observer = broker.metrics.flush_times.observe
    if config.request_log_enable:
        from trio_broker.request_log import RequestLog

        server.metrics = RequestLog(broker.metrics)
    bound = await server.bind()
    broker.advertise(bound)

    def begin_shutdown() -> None:
        logger.info("broker %d shutting down", broker.node_id)
        readiness.stopping = True
        readiness.set_status("shutting down")
        broker_scope.deadline = trio.current_time() + config.shutdown_grace_period_ms / 1000
        server.stop_accepting()
        # Connections close once their request in flight is answered: parked fetches
        # answer now instead of at their max_wait_ms.
        broker.fetch_purgatory.expire_all()
        loading.cancel()
        # The logs' close syncs what they wrote: its write-back starts now, while the
        # broker drains.
        broker.log_manager.start_write_back()

    loading = trio.CancelScope()  # the wait for the logs found at start to load

    try:
        async with trio.open_nursery() as guard:
            # The broker's tasks run shielded, so that cancelling serve() becomes a
            # graceful shutdown (by deadline) rather than an abrupt one.
            with trio.CancelScope(shield=True) as broker_scope:
                async with trio.open_nursery() as nursery:
                    # num.io.threads handler tasks; resized by a dynamic config change.
                    broker.handler_pool = HandlerPool(
                        request_receive,
                        broker.dispatch,
                        new_sender=request_send.clone,
                        detach=_may_wait_on_zookeeper if broker.zk is not None else None,
                        answer_now=broker.answer_now,
                        answer_batch=broker.answer_batch,
                    )
                    await nursery.start(broker.handler_pool.run, config.num_io_threads)
                    await nursery.start(server.run)
                    readiness.listening = True
                    readiness.set_status("listening; starting services")
                    # Before the services: /health and /ready answer while they start (in
                    # a cluster, while the broker waits to register).
                    if broker.metrics is not None:
                        from trio_broker.metrics_http import serve_metrics

                        await nursery.start(serve_metrics, broker, server)
                    await nursery.start(broker.log_manager.run)
                    for service in broker.services:
                        if service is getattr(broker, "membership", None):
                            readiness.set_status(f"registering broker {broker.node_id}")
                        await nursery.start(service.run)
                    if zk is not None:
                        readiness.registered = True
                    guard.start_soon(_watch_for_cancel, begin_shutdown, _before_shutdown(broker))
                    # Requests are answered meanwhile (a log asked for is loaded first); a
                    # stop does not wait for the rest.
                    with loading:
                        async with trio.open_nursery() as progress:
                            progress.start_soon(_report_loading, broker.log_manager, readiness)
                            await broker.log_manager.wait_loaded()
                            progress.cancel_scope.cancel()
                        readiness.logs_loaded = True
                    addresses = [b.address for b in bound]
                    logger.info(
                        "broker %d started (cluster %s), advertised %s",
                        broker.node_id,
                        broker.metadata.cluster_id,
                        ", ".join(str(a) for a in broker.advertised),
                    )
                    readiness.started = True
                    readiness.set_status("serving")
                    task_status.started(addresses)
                    # Background tasks run until the socket server has drained.
                    await server.finished.wait()
                    nursery.cancel_scope.cancel()
            guard.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            # Not released one by one: `trio-broker serve` ends its process next (os._exit),
            # and an in-process broker's objects go with it, by the cyclic collector.
            broker.log_manager.close(release=False)
            logger.info("broker %d stopped", broker.node_id)


async def _report_loading(log_manager: Any, readiness: Readiness) -> None:
    """How many of the logs found at start are loaded, every second until all are (for
    systemd's STATUS=)."""
    pending = log_manager.pending
    while pending:
        verb = "recovering" if pending.unclean_dirs() else "loading"
        readiness.set_status(
            f"{verb} logs: {pending.total - len(pending)} of {pending.total} loaded"
        )
        await trio.sleep(1)


async def _watch_for_cancel(begin_shutdown: Any, before: Any = None) -> None:
    try:
        await trio.sleep_forever()
    finally:
        if before is not None:
            # While everything still serves: the cluster's controlled shutdown.
            with trio.CancelScope(shield=True):
                await before()
        begin_shutdown()


def _before_shutdown(broker: Broker) -> Any:
    """What a stopping broker does first: in a cluster, ask the controller to move its
    leaderships away (cluster/controller/controlled_shutdown.py), unless controlled.shutdown.enable
    is false."""
    if broker.zk is None or not broker.config.controlled_shutdown_enable:
        return None
    from trio_broker.cluster.controller.controlled_shutdown import controlled_shutdown

    return lambda: controlled_shutdown(broker)


@asynccontextmanager
async def open_broker(
    config: BrokerConfig | Mapping[str, str] | None = None,
) -> AsyncIterator[str]:
    """Run a broker for the duration of the block; yields its bootstrap address "host:port"."""
    async with trio.open_nursery() as nursery:
        addresses = await nursery.start(serve, config)
        host, port = addresses[0][:2]
        yield f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        nursery.cancel_scope.cancel()
