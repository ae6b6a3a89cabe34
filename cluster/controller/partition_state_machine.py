"""Partition leadership: new partitions' first state, and leader elections (Kafka's
PartitionStateMachine and PartitionLeaderElectionAlgorithms, with the ISR shrink of
ReplicaStateMachine's OfflineReplica).

    initialize(ctx, zk, partitions)    NewPartition -> OnlinePartition: leader = the first
                                       live replica of the assignment, ISR = the live
                                       replicas, leader epoch 0; the state znode created
    elect(ctx, zk, partitions, why)    a fresh read of each state znode, a new leader and
                                       ISR by `why`'s rule, leader epoch + 1, written only
                                       at the version read (a leader changes the ISR too)

Elections (`Election`):
    OFFLINE     the leader is gone (or none): the first replica in assignment order that is
                alive and in the ISR; unclean (any live replica, ISR = [it]) only with
                unclean.leader.election.enable. A partition whose leader lives only loses
                its dead followers from the ISR.
    SHUTDOWN    controlled shutdown: as OFFLINE with the brokers shutting down counted dead
    PREFERRED   the first replica of the assignment, if alive and in the ISR

Every write is a ZooKeeper multi that first checks /controller_epoch at the version this
controller wrote: a deposed controller's write fails as a whole (ControllerMovedError).
"""

from __future__ import annotations

import enum
import json
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from trio_broker.cluster.controller.context import ControllerContext, PartitionLeadership
from trio_broker.cluster.zookeeper import zk_data

if TYPE_CHECKING:
    from trio_broker.cluster.zookeeper.session import ZooKeeperSession

logger = logging.getLogger(__name__)

__all__ = ["ControllerMovedError", "Election", "elect", "initialize", "read_state"]

_WRITE_ATTEMPTS = 10


class ControllerMovedError(Exception):
    """/controller_epoch moved on: another broker is the controller now."""


class Election(enum.Enum):
    OFFLINE = "offline"
    SHUTDOWN = "controlled shutdown"
    PREFERRED = "preferred"


async def read_state(
    zk: ZooKeeperSession, topic: str, partition: int
) -> PartitionLeadership | None:
    from kazoo.exceptions import NoNodeError

    try:
        data, stat = await zk.get(zk_data.partition_state_path(topic, partition))
    except NoNodeError:
        return None
    try:
        return PartitionLeadership.of(zk_data.LeaderIsrState.decode(data), stat.version)
    except (ValueError, KeyError, TypeError, json.JSONDecodeError):
        logger.error("unreadable state of %s-%d: %r", topic, partition, data[:200])
        return None


def _epoch_check(ctx: ControllerContext) -> tuple[str, tuple, dict]:
    return ("check", (zk_data.CONTROLLER_EPOCH_PATH,), {"version": ctx.epoch_zk_version})


def _raise_if_moved(ctx: ControllerContext, results: list) -> None:
    from kazoo.exceptions import BadVersionError, NoNodeError

    if results and isinstance(results[0], BadVersionError | NoNodeError):
        raise ControllerMovedError(f"controller epoch {ctx.epoch} is no longer current")


async def initialize(
    ctx: ControllerContext, zk: ZooKeeperSession, partitions: Iterable[tuple[str, int]]
) -> list[tuple[str, int]]:
    """Create the state znodes of new partitions; returns those now online (a partition
    with no live replica stays new until one of its brokers starts)."""
    from kazoo.exceptions import NodeExistsError

    done: list[tuple[str, int]] = []
    for topic, partition in partitions:
        replicas = ctx.replicas(topic, partition)
        live = tuple(r for r in replicas if ctx.is_replica_online(r, (topic, partition)))
        if not live:
            logger.error(
                "no live replica of %s-%d (replicas %s): it stays offline",
                topic,
                partition,
                list(replicas),
            )
            continue
        state = zk_data.LeaderIsrState(
            leader=live[0], leader_epoch=0, isr=live, controller_epoch=ctx.epoch
        )
        await zk.create_if_missing(zk_data.partition_path(topic, partition))
        results = await zk.transaction(
            [
                _epoch_check(ctx),
                ("create", (zk_data.partition_state_path(topic, partition), state.encode()), {}),
            ]
        )
        _raise_if_moved(ctx, results)
        if isinstance(results[1], NodeExistsError):
            # Made by an earlier controller that died before telling anyone: adopt it.
            existing = await read_state(zk, topic, partition)
            if existing is not None:
                ctx.states[(topic, partition)] = existing
                done.append((topic, partition))
            continue
        if isinstance(results[1], Exception):
            logger.error("cannot create the state of %s-%d: %r", topic, partition, results[1])
            continue
        ctx.states[(topic, partition)] = PartitionLeadership.of(state, 0)
        done.append((topic, partition))
    return done


def _choose(
    ctx: ControllerContext,
    tp: tuple[str, int],
    replicas: tuple[int, ...],
    state: PartitionLeadership,
    why: Election,
    unclean: bool,
) -> tuple[int, tuple[int, ...]] | None:
    """(leader, isr) by the election's rule, or None when nothing should change. A replica
    counts when its broker is live and its log dir online (ctx.is_replica_online)."""

    def online(r: int) -> bool:
        return ctx.is_replica_online(r, tp)

    live_isr = tuple(r for r in state.isr if online(r))
    if why is Election.PREFERRED:
        preferred = replicas[0] if replicas else -1
        if state.leader == preferred or preferred not in live_isr:
            return None
        return preferred, live_isr
    if online(state.leader) and state.leader in state.isr:
        # The leader stays; dead (or shutting down) followers leave the ISR.
        return (state.leader, live_isr) if live_isr != state.isr else None
    leader = next((r for r in replicas if r in live_isr), None)
    if leader is not None:
        return leader, live_isr
    if why is Election.SHUTDOWN:
        # No other ISR member to hand over to: the broker keeps leading until it stops
        # (the partition is in its ControlledShutdown answer).
        return None
    if unclean and why is Election.OFFLINE:
        leader = next((r for r in replicas if online(r)), None)
        if leader is not None:
            logger.warning("unclean leader election: broker %d, out of the ISR", leader)
            return leader, (leader,)
    # No leader: the ISR keeps its last member, so that a clean election is possible
    # when that broker returns (Kafka never writes an empty ISR).
    isr = live_isr or state.isr[-1:]
    if state.leader == -1 and isr == state.isr:
        return None
    return -1, isr


async def elect(
    ctx: ControllerContext,
    zk: ZooKeeperSession,
    partitions: Iterable[tuple[str, int]],
    why: Election,
    *,
    unclean_default: bool = False,
) -> list[tuple[str, int]]:
    """Elect leaders (or shrink ISRs) of `partitions`; returns those whose state changed."""
    from kazoo.exceptions import BadVersionError, NoNodeError

    changed: list[tuple[str, int]] = []
    for topic, partition in partitions:
        replicas = ctx.replicas(topic, partition)
        for _attempt in range(_WRITE_ATTEMPTS):
            state = await read_state(zk, topic, partition)
            if state is None:
                break
            ctx.states[(topic, partition)] = state
            unclean = False
            if why is Election.OFFLINE and not any(
                ctx.is_replica_online(r, (topic, partition)) for r in state.isr
            ):
                unclean = await _unclean_allowed(zk, topic, unclean_default)
            choice = _choose(ctx, (topic, partition), replicas, state, why, unclean)
            if choice is None:
                break
            leader, isr = choice
            new = state.succeeded_by(leader, isr, ctx.epoch)
            path = zk_data.partition_state_path(topic, partition)
            results = await zk.transaction(
                [
                    _epoch_check(ctx),
                    ("set_data", (path, new.znode().encode()), {"version": state.zk_version}),
                ]
            )
            _raise_if_moved(ctx, results)
            if isinstance(results[1], BadVersionError):
                continue  # the leader changed the ISR meanwhile: read again
            if isinstance(results[1], NoNodeError):
                break
            if isinstance(results[1], Exception):
                logger.error("cannot write the state of %s-%d: %r", topic, partition, results[1])
                break
            ctx.states[(topic, partition)] = new
            changed.append((topic, partition))
            logger.info(
                "%s election of %s-%d: leader %d -> %d, epoch %d, isr %s",
                why.value,
                topic,
                partition,
                state.leader,
                leader,
                new.leader_epoch,
                list(isr),
            )
            break
    return changed


async def _unclean_allowed(zk: ZooKeeperSession, topic: str, default: bool) -> bool:
    from trio_broker.cluster.zookeeper.admin_zk_client import read_topic_config

    value = (await read_topic_config(zk, topic)).get("unclean.leader.election.enable")
    return default if value is None else value.strip().lower() == "true"


async def update(
    ctx: ControllerContext,
    zk: ZooKeeperSession,
    topic: str,
    partition: int,
    change: Callable[[PartitionLeadership], tuple[int, tuple[int, ...]] | None],
    why: str,
) -> bool:
    """A new leader and ISR from `change(fresh state)` (None: no change; the same pair:
    only the leader epoch moves on, as Kafka's updateLeaderEpoch), written at the version
    read, again on a conflict. True once written."""
    from kazoo.exceptions import BadVersionError

    path = zk_data.partition_state_path(topic, partition)
    for _attempt in range(_WRITE_ATTEMPTS):
        state = await read_state(zk, topic, partition)
        if state is None:
            return False
        ctx.states[(topic, partition)] = state
        choice = change(state)
        if choice is None:
            return False
        leader, isr = choice
        new = state.succeeded_by(leader, isr, ctx.epoch)
        results = await zk.transaction(
            [
                _epoch_check(ctx),
                ("set_data", (path, new.znode().encode()), {"version": state.zk_version}),
            ]
        )
        _raise_if_moved(ctx, results)
        if isinstance(results[1], BadVersionError):
            continue
        if isinstance(results[1], Exception):
            logger.error("cannot write the state of %s-%d: %r", topic, partition, results[1])
            return False
        ctx.states[(topic, partition)] = new
        logger.info(
            "%s of %s-%d: leader %d -> %d, epoch %d, isr %s",
            why,
            topic,
            partition,
            state.leader,
            leader,
            new.leader_epoch,
            list(isr),
        )
        return True
    return False
