"""The controller: one broker of the cluster, elected through ZooKeeper (Kafka's
KafkaController, ZooKeeper era).

    ControllerElector.run         on every broker, per ZooKeeper session:
        /controller missing   ->  try to win it: one ZooKeeper multi creates the ephemeral
                                  /controller and bumps /controller_epoch at the version read,
                                  so exactly one broker wins each epoch
        /controller ours      ->  run the Controller (with its epoch) while it stays ours
        /controller another's ->  wait for it to change (the broker dies, its session ends)
    Controller.run                while elected: watches /brokers/ids, holds the live brokers

The epoch fences a deposed controller: it grows by one per election, and (next step) every
controller request carries it, so brokers refuse one from an older epoch.

Built so far: the election and the live-broker set. The partition and replica state
machines, the controller RPCs (LeaderAndIsr, UpdateMetadata, StopReplica, over the client
connection layer) and the topic watches are the next steps of issue 14; their places are
`Controller.on_broker_startup`, `on_broker_failure` and `Controller.run`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from trio_broker.cluster import zk_data
from trio_broker.cluster.zookeeper import ZooKeeperSession

if TYPE_CHECKING:
    from trio_broker.broker import Broker

logger = logging.getLogger(__name__)

__all__ = ["Controller", "ControllerElector"]


class Controller:
    """This broker's controller for one epoch; `run` lasts while it is elected."""

    def __init__(self, broker: Broker, zk: ZooKeeperSession, epoch: int) -> None:
        self.broker = broker
        self.zk = zk
        self.epoch = epoch
        self.live_brokers: frozenset[int] = frozenset()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        logger.info("broker %d is the controller, epoch %d", self.broker.node_id, self.epoch)
        send, receive = trio.open_memory_channel[list[str]](1)
        try:
            async with trio.open_nursery() as nursery:
                # Next: watches on /brokers/topics, /admin/delete_topics,
                # /admin/reassign_partitions and /isr_change_notification start here too.
                nursery.start_soon(self.zk.watch_children, zk_data.BROKER_IDS_PATH, send)
                async with receive:
                    self._on_brokers(await receive.receive())
                    task_status.started()
                    async for children in receive:
                        self._on_brokers(children)
        finally:
            logger.info(
                "broker %d resigned as controller, epoch %d", self.broker.node_id, self.epoch
            )

    def _on_brokers(self, children: list[str]) -> None:
        live = frozenset(int(c) for c in children if c.isdigit())
        started, failed = live - self.live_brokers, self.live_brokers - live
        self.live_brokers = live
        if started:
            self.on_broker_startup(started)
        if failed:
            self.on_broker_failure(failed)

    def on_broker_startup(self, broker_ids: frozenset[int]) -> None:
        """Kafka's onBrokerStartup. Not built yet: UpdateMetadata to every live broker,
        the new brokers' replicas to OnlineReplica (LeaderAndIsr), and offline partitions
        they can lead to OnlinePartition. For now the set is only recorded and logged."""
        logger.info(
            "controller epoch %d: brokers started %s, live %s",
            self.epoch,
            sorted(broker_ids),
            sorted(self.live_brokers),
        )

    def on_broker_failure(self, broker_ids: frozenset[int]) -> None:
        """Kafka's onBrokerFailure. Not built yet: partitions led by these brokers to
        OfflinePartition then a new leader from the ISR (LeaderAndIsr), their replicas to
        OfflineReplica (shrinking ISRs), UpdateMetadata. For now only logged."""
        logger.info(
            "controller epoch %d: brokers failed %s, live %s",
            self.epoch,
            sorted(broker_ids),
            sorted(self.live_brokers),
        )


class ControllerElector:
    """Kafka's controller election, on every broker of the cluster; a broker service."""

    def __init__(self, broker: Broker, zk: ZooKeeperSession) -> None:
        self.broker = broker
        self.zk = zk
        self.node_id = broker.node_id
        self.controller: Controller | None = None  # while this broker is the controller

    @property
    def epoch(self) -> int | None:
        """This broker's controller epoch while it is the controller."""
        return self.controller.epoch if self.controller is not None else None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await self.zk.each_session(self._elect)

    async def _elect(self, session_id: int) -> None:
        """For one session: win /controller when it is free, run the controller while it is
        ours, resign when it is not (or when the session ends: this scope is cancelled)."""
        async with trio.open_nursery() as nursery:
            running: trio.CancelScope | None = None
            try:
                while True:
                    fired = trio.Event()
                    stat = await self.zk.exists(zk_data.CONTROLLER_PATH, watch=fired)
                    ours = stat is not None and stat.ephemeralOwner == session_id
                    if ours and running is None:
                        # Won (the watch fired on our own create), or a create retried after
                        # a lost connection: the epoch is the one written with it.
                        epoch = await self._read_epoch()
                        running = await nursery.start(self._run_controller, epoch)
                    elif not ours and running is not None:
                        logger.info("/controller is no longer broker %d's", self.node_id)
                        running.cancel()
                        running = None
                    if stat is None:
                        await self._try_to_win()
                    await fired.wait()
                    await self.zk.wait_connected()
            finally:
                self.controller = None

    async def _run_controller(
        self, epoch: int, *, task_status: trio.TaskStatus[trio.CancelScope]
    ) -> None:
        with trio.CancelScope() as scope:
            self.controller = Controller(self.broker, self.zk, epoch)
            try:
                task_status.started(scope)
                await self.controller.run()
            finally:
                self.controller = None

    async def _read_epoch(self) -> int:
        data, _ = await self.zk.get(zk_data.CONTROLLER_EPOCH_PATH)
        return zk_data.decode_controller_epoch(data)

    async def _try_to_win(self) -> int | None:
        """Kafka's registerControllerAndIncrementControllerEpoch: one multi that creates the
        ephemeral /controller and writes epoch+1 to /controller_epoch only at the version
        read. Returns the new epoch, or None when another broker won."""
        from kazoo.exceptions import NoNodeError

        while True:
            try:
                data, stat = await self.zk.get(zk_data.CONTROLLER_EPOCH_PATH)
                break
            except NoNodeError:
                await self.zk.create_if_missing(
                    zk_data.CONTROLLER_EPOCH_PATH,
                    zk_data.encode_controller_epoch(zk_data.INITIAL_CONTROLLER_EPOCH),
                )
        epoch = zk_data.decode_controller_epoch(data) + 1
        results: list[Any] = await self.zk.transaction(
            [
                (
                    "create",
                    (zk_data.CONTROLLER_PATH, zk_data.encode_controller(self.node_id)),
                    {"ephemeral": True},
                ),
                (
                    "set_data",
                    (zk_data.CONTROLLER_EPOCH_PATH, zk_data.encode_controller_epoch(epoch)),
                    {"version": stat.version},
                ),
            ]
        )
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            logger.debug("broker %d lost the controller election: %r", self.node_id, failed)
            return None
        logger.info("broker %d won the controller election, epoch %d", self.node_id, epoch)
        return epoch
