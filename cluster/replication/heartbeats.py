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
        # When the latest heartbeat answered by the controller was sent (trio time).
        self.answered_at = float("-inf")
        self.fenced = False  # as the controller's latest answer said
        self.began_at = float("inf")  # when `run` began

    @property
    def lease_s(self) -> float:
        return 2 * self.interval_s

    def is_controller(self) -> bool:
        elector = getattr(self.broker, "controller_elector", None)
        return elector is not None and elector.controller is not None

    def silent_for(self) -> float:
        """Seconds since the latest heartbeat the controller answered was sent (or since
        heartbeats began)."""
        return trio.current_time() - max(self.answered_at, self.began_at)

    def lease(self) -> bool:
        """Whether this broker may shrink an ISR now (see the module's docstring)."""
        elector = getattr(self.broker, "controller_elector", None)
        controller = elector.controller if elector is not None else None
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
