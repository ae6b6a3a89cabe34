"""The broker's heartbeats to the controller, and the ISR lease they give (Kafka's
BrokerLifecycleManager, KIP-631, and KIP-497's rule that a leader changes an ISR only
through the controller).

    BrokerHeartbeats.run      every broker.heartbeat.interval.ms: BrokerHeartbeat (its
                              broker id and broker epoch) to the controller /controller
                              names, on a connection of its own (never the controller's
                              channel, whose large LeaderAndIsr requests could hold it up),
                              each bounded by two intervals; an answer from the broker
                              still named controller is remembered
    BrokerHeartbeats.lease    whether this broker may shrink an ISR: its latest heartbeat
                              was answered within two intervals (sent no earlier); on the
                              controller broker itself, whether it heard from a majority
                              of the registered brokers within two intervals
    _judge_controller         every interval: with no heartbeat answered by the
                              controller for broker.session.timeout.ms, a vote in
                              ZooKeeper that it is unheard; a majority's votes end its
                              election (cluster/zookeeper/controller_votes.py)

A leader cut from the controller (and the other brokers) but not from ZooKeeper keeps
its session; without the lease it would shrink its ISRs to itself by its own ZooKeeper
writes and then refuse acks=all for the whole cut (min.insync.replicas). With it, it
keeps its ISRs and acks=all waits, while the controller fences it and elects another
leader from the ISR (cluster/controller/fencing.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from trio_broker.broker import Broker

logger = logging.getLogger(__name__)

__all__ = ["BrokerHeartbeats"]

# BrokerHeartbeat is not listed in ApiVersions (apis/registry.py): sent at this version.
_VERSION = 0
# After a heartbeat not sent (no controller known yet, not registered yet) or failed at
# once (refused): the next one this soon, not an interval later (a broker just started
# would be without its ISR lease for an interval).
_RETRY_S = 0.1


class BrokerHeartbeats:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.interval_s = broker.config.broker_heartbeat_interval_ms / 1000
        self.session_s = broker.config.broker_session_timeout_ms / 1000
        # When the latest heartbeat answered by the controller was sent (trio time).
        self.answered_at = float("-inf")
        self.fenced = False  # as the controller's latest answer said
        # When the latest heartbeat the controller broker answered at all was sent, with
        # an error too (NOT_CONTROLLER while its failover runs): alive, not to be voted out.
        self.reached_at = float("-inf")
        self.began_at = float("inf")  # when `run` began

    @property
    def lease_s(self) -> float:
        return 2 * self.interval_s

    def _controller(self) -> Any:
        """This broker's Controller while it is the controller, else None."""
        elector = getattr(self.broker, "controller_elector", None)
        return elector.controller if elector is not None else None

    def is_controller(self) -> bool:
        return self._controller() is not None

    def silent_for(self) -> float:
        """Seconds since the latest heartbeat the controller answered was sent (or since
        heartbeats began)."""
        return trio.current_time() - max(self.answered_at, self.began_at)

    def lease(self) -> bool:
        """Whether this broker may shrink an ISR now (see the module's docstring)."""
        controller = self._controller()
        if controller is not None:
            return bool(controller.fencing.hears_majority(self.lease_s))
        metadata = self.broker.metadata
        if metadata.controller_id >= 0 and metadata.controller_id not in metadata.brokers:
            # /controller names no registered broker (a test acting as the controller):
            # nobody to heartbeat, and nobody who fences; the ZooKeeper-era rule.
            return True
        return trio.current_time() - self.answered_at < self.lease_s

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        from trio_broker.client.network_client import NetworkClient
        from trio_broker.security.inter_broker import inter_broker_client_config

        broker = self.broker
        config = inter_broker_client_config(
            broker.config,
            bootstrap_servers="127.0.0.1:9",  # unused: requests go to the controller's id
            client_id=f"broker-{broker.node_id}-heartbeat",
            request_timeout_ms=int(self.lease_s * 1000),
        )
        self.began_at = trio.current_time()
        task_status.started()
        async with NetworkClient(config) as client, trio.open_nursery() as nursery:
            nursery.start_soon(self._judge_controller)
            while True:
                started = trio.current_time()
                done = trio.Event()
                answered: list[bool] = []
                nursery.start_soon(self._beat_then_set, client, done, answered)
                with trio.move_on_after(self.interval_s):
                    await done.wait()
                if done.is_set() and not answered:
                    await trio.sleep(min(_RETRY_S, self.interval_s))
                else:
                    await trio.sleep_until(started + self.interval_s)

    async def _judge_controller(self) -> None:
        """Every interval: vote that the controller is unheard once no heartbeat was
        answered by it for a session timeout (since it was named controller; an error
        is an answer: a controller still in its failover is alive), and delete
        /controller when a majority of the registered brokers voted so
        (cluster/zookeeper/controller_votes.py). The vote stays until that controller
        answers again: a new controller reads it at its failover and fences the unheard
        one at once (cluster/controller/fencing.py)."""
        from trio_broker.cluster.zookeeper import controller_votes as cv

        broker = self.broker
        named = (-1, float("-inf"))  # the controller named, since when
        voted: tuple[Any, float] | None = None  # (our vote, when cast)
        while True:
            await trio.sleep(self.interval_s)
            controller = broker.metadata.controller_id
            now = trio.current_time()
            if controller != named[0]:
                named = (controller, now)
            if controller < 0 or controller == broker.node_id or broker.broker_epoch < 0:
                continue
            unheard = now - max(self.reached_at, self.began_at, named[1])
            try:
                if unheard >= self.session_s:
                    voted = await self._vote(controller) or voted
                elif voted is not None and voted[0].controller == controller:
                    if self.reached_at > voted[1]:
                        await cv.withdraw(broker.zk, broker.node_id)
                        voted = None
            except Exception as exc:  # noqa: BLE001 - ZooKeeper's errors: the next round
                logger.debug("broker %d: controller vote failed: %r", broker.node_id, exc)

    async def _vote(self, controller: int) -> tuple[Any, float] | None:
        """Vote that `controller` is unheard, and end its election when a majority did
        so; returns (the vote, when cast), or None when ZooKeeper names another
        controller (the metadata lags)."""
        from trio_broker.cluster.zookeeper import controller_votes as cv
        from trio_broker.cluster.zookeeper import zk_data
        from trio_broker.cluster.zookeeper.membership import registered_brokers

        zk = self.broker.zk
        # The controller and its election, read consistently: /controller_epoch's version
        # the same before and after /controller (every election changes both at once).
        _, epoch_stat = await zk.get(zk_data.CONTROLLER_EPOCH_PATH)
        data, _ = await zk.get(zk_data.CONTROLLER_PATH)
        _, again = await zk.get(zk_data.CONTROLLER_EPOCH_PATH)
        if again.version != epoch_stat.version or zk_data.decode_controller(data) != controller:
            return None
        vote = cv.Vote(controller, epoch_stat.version)
        await cv.cast(zk, self.broker.node_id, vote)
        cast = (vote, trio.current_time())
        voters = cv.majority_against(await cv.read_votes(zk), vote, await registered_brokers(zk))
        if not voters:
            return cast
        results = await zk.transaction(
            [
                ("check", (zk_data.CONTROLLER_EPOCH_PATH,), {"version": vote.epoch_zk_version}),
                ("delete", (zk_data.CONTROLLER_PATH,), {}),
            ]
        )
        if not any(isinstance(r, Exception) for r in results):
            logger.warning(
                "broker %d: controller %d unheard by brokers %s for %.1f s, a majority: its "
                "/controller deleted (election at /controller_epoch version %d)",
                self.broker.node_id,
                controller,
                voters,
                self.session_s,
                vote.epoch_zk_version,
            )
        return cast

    async def _beat_then_set(self, client: Any, done: trio.Event, answered: list[bool]) -> None:
        try:
            if await self._beat(client):
                answered.append(True)
        finally:
            done.set()

    async def _beat(self, client: Any) -> bool:
        """One heartbeat, on a task of its own: one lost in a cut does not hold up the
        next (each is bounded by the lease; a timed-out connection is dropped, so the next
        one connects afresh instead of queueing behind TCP's retransmissions)."""
        from trio_broker.errors import ErrorCode, KafkaError
        from trio_broker.protocol._generated.broker_heartbeat_request import (
            BrokerHeartbeatRequest,
        )

        broker = self.broker
        metadata = broker.metadata
        controller = metadata.controller_id
        node = metadata.brokers.get(controller)
        if controller < 0 or controller == broker.node_id or node is None:
            return False
        if broker.broker_epoch < 0:
            return False  # not registered yet
        sent_at = trio.current_time()
        client.set_nodes({**client.nodes, controller: (node.host, node.port)})
        try:
            with trio.fail_after(self.lease_s):
                response = await client.send(
                    controller,
                    BrokerHeartbeatRequest(
                        broker_id=broker.node_id, broker_epoch=broker.broker_epoch
                    ),
                    _VERSION,
                )
        except (KafkaError, trio.TooSlowError, OSError) as exc:
            logger.debug("heartbeat to controller %d failed: %r", controller, exc)
            client.disconnect(controller)
            return False
        if metadata.controller_id == controller and sent_at > self.reached_at:
            self.reached_at = sent_at
        if response.error_code != ErrorCode.NONE or metadata.controller_id != controller:
            logger.debug(
                "heartbeat to broker %d: %s", controller, ErrorCode(response.error_code).name
            )
            return False
        if sent_at > self.answered_at:
            self.answered_at = sent_at
        if response.is_fenced != self.fenced:
            self.fenced = response.is_fenced
            logger.warning(
                "broker %d is %s by controller %d",
                broker.node_id,
                "fenced" if self.fenced else "no longer fenced",
                controller,
            )
        return True
