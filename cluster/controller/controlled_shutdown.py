"""The broker's side of controlled shutdown (Kafka's KafkaServer.controlledShutdown).

A broker of a cluster stopping gracefully (SIGTERM, or `serve()` cancelled) first asks the
controller, with ControlledShutdown, to move its leaderships to other replicas and take it
out of the ISRs, while it still serves requests. The controller answers the partitions it
still leads; the broker asks again after `controlled.shutdown.retry.backoff.ms`, at most
`controlled.shutdown.max.retries` more times, each request bounded by
`controller.socket.timeout.ms`, then stops whatever the answer (a broker must be able to
stop without a controller). Unlike Kafka it does not ask again when no live broker holds
another replica of what it still leads (the last broker of a cluster stopping): nothing
could move. Nor, after a refusal (ZooKeeper unreachable) or no answer, when it knows no
other live broker. (After a refusal the controller did nothing, not even take this broker
out of the ISRs it follows in: with another broker alive it asks again, as Kafka does.)
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import trio

from trio_broker.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from trio_broker.broker import Broker

logger = logging.getLogger(__name__)

__all__ = ["controlled_shutdown"]


async def controlled_shutdown(broker: Broker) -> bool:
    """True once the controller says this broker leads nothing it could hand over."""
    from trio_broker.client.network_client import NetworkClient
    from trio_broker.protocol._generated.controlled_shutdown_request import (
        ControlledShutdownRequest,
    )
    from trio_broker.security.inter_broker import inter_broker_client_config

    config = broker.config
    node_id = broker.node_id
    started = time.monotonic()
    replicas = getattr(broker, "replica_manager", None)
    if replicas is not None:
        # From now on an UpdateMetadata naming another leader takes the leadership away.
        replicas.shutting_down = True
    client_config = inter_broker_client_config(
        config,
        bootstrap_servers="127.0.0.1:9",  # unused: requests go to the controller's node id
        client_id=f"broker-{node_id}-controlled-shutdown",
        request_timeout_ms=config.controller_socket_timeout_ms,
    )
    async with NetworkClient(client_config) as client:
        for attempt in range(config.controlled_shutdown_max_retries + 1):
            if attempt:
                await trio.sleep(config.controlled_shutdown_retry_backoff_ms / 1000)
            controller = broker.metadata.controller_id
            node = broker.metadata.brokers.get(controller)
            if node is None:
                logger.info("controlled shutdown of broker %d: no controller known", node_id)
                continue
            client.set_nodes({controller: (node.host, node.port)})
            try:
                response = await client.send(
                    controller,
                    ControlledShutdownRequest(broker_id=node_id, broker_epoch=broker.broker_epoch),
                )
            except KafkaError as exc:
                logger.info("controlled shutdown request to broker %d failed: %s", controller, exc)
                if _hopeless(broker):
                    return False
                continue
            if response.error_code != ErrorCode.NONE:
                logger.info(
                    "controlled shutdown refused by broker %d: %s",
                    controller,
                    ErrorCode(response.error_code).name,
                )
                if _hopeless(broker):
                    return False
                continue
            if replicas is not None:
                # The controller moved these (its LeaderAndIsr goes to the others only).
                replicas.resign_moved_leaderships(everything=not response.remaining_partitions)
            if not response.remaining_partitions:
                logger.info(
                    "controlled shutdown of broker %d done in %.3f s",
                    node_id,
                    time.monotonic() - started,
                )
                return True
            logger.info(
                "controlled shutdown of broker %d: still leading %s",
                node_id,
                ", ".join(
                    f"{p.topic_name}-{p.partition_index}" for p in response.remaining_partitions
                ),
            )
            remaining = [(p.topic_name, p.partition_index) for p in response.remaining_partitions]
            if _hopeless(broker, remaining):
                return False
    logger.warning("controlled shutdown of broker %d did not complete; stopping anyway", node_id)
    return False


def _hopeless(broker: Broker, remaining: list[tuple[str, int]] | None = None) -> bool:
    """Whether asking again cannot change anything: no other broker is alive, or (after an
    answer listing what this broker still leads, `remaining`) every other replica of those
    is on a broker that is down. Kafka asks again regardless; this broker stops now
    instead, and says so."""
    others = set(broker.metadata.brokers) - {broker.node_id}
    if not others:
        why = "no other broker is alive"
    elif remaining and not _anyone_could_take_over(broker, others, remaining):
        why = "no live broker holds another replica of what it leads"
    else:
        return False
    logger.info("controlled shutdown of broker %d: %s; stopping", broker.node_id, why)
    return True


def _anyone_could_take_over(
    broker: Broker, others: set[int], partitions: list[tuple[str, int]]
) -> bool:
    """Whether one of the live brokers `others` holds a replica of any of `partitions`
    (one out of the ISR may catch up before the next attempt)."""
    metadata = broker.metadata
    for topic_name, index in partitions:
        topic = metadata.topics.get(topic_name)
        state = topic.partitions.get(index) if topic is not None else None
        if state is None or others.intersection(state.replicas):
            return True  # unknown here: ask again, as before
    return False
