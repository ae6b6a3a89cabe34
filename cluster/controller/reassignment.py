"""Partition reassignment online (Kafka's KafkaController.onPartitionReassignment, 2.4+),
run on the controller's event loop for AlterPartitionReassignments and
ListPartitionReassignments.

With ORS the original replicas, TRS the target and RS = TRS then ORS (no repeats):

    start      the topic znode gets RS with adding (TRS - ORS) and removing (ORS - TRS);
               the leader epoch moves on and LeaderAndIsr goes to RS (the new replicas
               start fetching from the leader), UpdateMetadata to everyone
    complete   once every TRS replica is in the ISR (the leaders' ISR changes reach the
               controller by /isr_change_notification): the leader is kept if it is in TRS
               and alive, else the first live TRS replica in the ISR leads; the ISR keeps
               only TRS, the topic znode gets RS = TRS and no adding/removing,
               LeaderAndIsr to TRS, StopReplica(delete) to ORS - TRS, UpdateMetadata
    cancel     (replicas null) a reassignment back to ORS, completed the same way

A new controller finds ongoing reassignments in the topic znodes (adding/removing) and
completes them when their ISR allows.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from trio_broker.cluster.zookeeper import zk_data
from trio_broker.errors import ErrorCode

if TYPE_CHECKING:
    from trio_broker.cluster.controller.kafka_controller import Controller

logger = logging.getLogger(__name__)

__all__ = ["alter_reassignments", "list_reassignments", "maybe_complete"]

TopicPartition = tuple[str, int]


def _ongoing(ctrl: Controller, tp: TopicPartition) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(adding, removing) of a partition; both empty when it is not being reassigned."""
    assignment = ctrl.ctx.assignments[tp[0]]
    return (
        tuple(assignment.adding_replicas.get(tp[1], ())),
        tuple(assignment.removing_replicas.get(tp[1], ())),
    )


def _original(ctrl: Controller, tp: TopicPartition) -> tuple[int, ...]:
    adding, _ = _ongoing(ctrl, tp)
    return tuple(r for r in ctrl.ctx.replicas(*tp) if r not in adding)


def _target(ctrl: Controller, tp: TopicPartition) -> tuple[int, ...]:
    _, removing = _ongoing(ctrl, tp)
    return tuple(r for r in ctrl.ctx.replicas(*tp) if r not in removing)


async def _write_assignments(ctrl: Controller, changes: dict[TopicPartition, tuple]) -> None:
    """The topic znodes with new (replicas, adding, removing) per partition, written at
    the version read, with the controller epoch checked in the same multi."""
    from kazoo.exceptions import BadVersionError, NoNodeError

    from trio_broker.cluster.controller.partition_state_machine import ControllerMovedError

    ctx = ctrl.ctx
    topics = sorted({t for t, _ in changes})
    for topic in topics:
        known = ctx.assignments[topic]
        partitions = dict(known.partitions)
        adding = dict(known.adding_replicas)
        removing = dict(known.removing_replicas)
        for (t, p), (replicas, add, remove) in changes.items():
            if t != topic:
                continue
            partitions[p] = replicas
            adding.pop(p, None)
            removing.pop(p, None)
            if add:
                adding[p] = add
            if remove:
                removing[p] = remove
        new = zk_data.TopicAssignment(
            topic_id=known.topic_id,
            partitions=partitions,
            adding_replicas=adding,
            removing_replicas=removing,
        )
        while True:
            _, stat = await ctrl.zk.get(zk_data.topic_path(topic))
            results = await ctrl.zk.transaction(
                [
                    (
                        "check",
                        (zk_data.CONTROLLER_EPOCH_PATH,),
                        {"version": ctx.epoch_zk_version},
                    ),
                    (
                        "set_data",
                        (zk_data.topic_path(topic), new.encode()),
                        {"version": stat.version},
                    ),
                ]
            )
            if isinstance(results[0], BadVersionError | NoNodeError):
                raise ControllerMovedError(f"controller epoch {ctx.epoch} is no longer current")
            if isinstance(results[1], BadVersionError):
                continue
            if isinstance(results[1], Exception):
                raise results[1]
            break
        ctx.assignments[topic] = new


async def alter_reassignments(
    ctrl: Controller, wanted: dict[TopicPartition, list[int] | None]
) -> dict[TopicPartition, tuple[int, str | None]]:
    """Start (or cancel, for None) reassignments; an error code and message per partition."""
    from trio_broker.cluster.controller import partition_state_machine as psm

    ctx = ctrl.ctx
    results: dict[TopicPartition, tuple[int, str | None]] = {}
    changes: dict[TopicPartition, tuple] = {}
    # Replicas a cancelled or overridden reassignment was adding and no longer wants.
    dropped: dict[TopicPartition, tuple[int, ...]] = {}
    for tp, replicas in wanted.items():
        topic, partition = tp
        if (
            topic not in ctx.assignments
            or topic in ctx.topics_being_deleted
            or partition not in ctx.assignments[topic].partitions
        ):
            results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
            continue
        adding, removing = _ongoing(ctrl, tp)
        original = _original(ctrl, tp)
        if replicas is None:
            if not adding and not removing:
                results[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
                continue
            target = original
        else:
            target = tuple(replicas)
            if not target or len(set(target)) != len(target):
                results[tp] = (
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    "The replica list is empty or names a broker twice.",
                )
                continue
            missing = [b for b in target if b not in ctx.live_brokers]
            if missing:
                results[tp] = (
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The proposed assignment contains non-existent brokerIDs: {missing}",
                )
                continue
        results[tp] = (ErrorCode.NONE, None)
        if target == ctx.replicas(*tp) and not adding and not removing:
            continue  # already so
        # Replicas being added by an overridden reassignment and not wanted now go too.
        full = tuple(dict.fromkeys((*target, *original)))
        add = tuple(r for r in target if r not in original)
        remove = tuple(r for r in original if r not in target)
        changes[tp] = (full, add, remove)
        if unneeded := tuple(r for r in ctx.replicas(*tp) if r not in full):
            dropped[tp] = unneeded
        logger.info(
            "controller epoch %d: reassigning %s-%d from %s to %s",
            ctrl.epoch,
            topic,
            partition,
            list(original),
            list(target),
        )
    if not changes:
        return results
    await _write_assignments(ctrl, changes)
    batch = ctrl.batch()
    for tp in changes:
        gone = dropped.get(tp, ())

        def keep(state, gone=gone, tp=tp):
            # The dropped replicas leave the ISR (and the leadership, should one of them
            # hold it), as Kafka's revert of an ongoing reassignment takes them offline.
            isr = tuple(r for r in state.isr if r not in gone)
            if state.leader not in gone:
                return state.leader, isr
            leader = next((r for r in isr if ctx.is_replica_online(r, tp)), None)
            return (leader, isr) if leader is not None else (state.leader, state.isr)

        # A new leader epoch, so that the replicas take the new replica set.
        await psm.update(ctx, ctrl.zk, *tp, keep, "reassignment start")
        batch.add_leader_and_isr(ctx.replicas(*tp), *tp)
        if gone:
            batch.add_stop_replica(gone, *tp, delete=True)
            logger.info(
                "controller epoch %d: %s-%d replicas %s no longer wanted: deleted",
                ctrl.epoch,
                tp[0],
                tp[1],
                list(gone),
            )
    batch.add_update_metadata(ctx.live_brokers)
    batch.send(ctrl.channel)
    await maybe_complete(ctrl, list(changes))
    return results


async def maybe_complete(ctrl: Controller, partitions: list[TopicPartition]) -> None:
    """Complete the reassignments of `partitions` whose target replicas are all in the ISR."""
    from trio_broker.cluster.controller import partition_state_machine as psm

    ctx = ctrl.ctx
    done: dict[TopicPartition, tuple] = {}
    removed: dict[TopicPartition, tuple[int, ...]] = {}
    for tp in partitions:
        if tp[0] not in ctx.assignments or tp not in ctx.states:
            continue
        adding, removing = _ongoing(ctrl, tp)
        if not adding and not removing:
            continue
        target = _target(ctrl, tp)
        if not set(target) <= set(ctx.states[tp].isr):
            continue

        def change(state, target=target, tp=tp):
            isr = tuple(r for r in state.isr if r in target)
            if state.leader in target and ctx.is_replica_online(state.leader, tp):
                return state.leader, isr
            leader = next((r for r in target if r in isr and ctx.is_replica_online(r, tp)), None)
            return (leader, isr) if leader is not None else None

        if not await psm.update(ctx, ctrl.zk, *tp, change, "reassignment"):
            continue
        done[tp] = (target, (), ())
        removed[tp] = removing
    if not done:
        return
    await _write_assignments(ctrl, done)
    batch = ctrl.batch()
    for tp, (target, _, _) in done.items():
        batch.add_leader_and_isr(target, *tp)
        batch.add_stop_replica(removed[tp], *tp, delete=True)
        logger.info(
            "controller epoch %d: reassignment of %s-%d done: replicas %s",
            ctrl.epoch,
            tp[0],
            tp[1],
            list(target),
        )
    batch.add_update_metadata(ctx.live_brokers)
    batch.send(ctrl.channel)


def list_reassignments(
    ctrl: Controller, wanted: list[TopicPartition] | None
) -> dict[TopicPartition, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """(replicas, adding, removing) of the ongoing reassignments among `wanted` (None: all)."""
    ctx = ctrl.ctx
    candidates = ctx.partitions() if wanted is None else wanted
    out = {}
    for tp in candidates:
        if tp[0] not in ctx.assignments or tp[1] not in ctx.assignments[tp[0]].partitions:
            continue
        adding, removing = _ongoing(ctrl, tp)
        if adding or removing:
            out[tp] = (ctx.replicas(*tp), adding, removing)
    return out
