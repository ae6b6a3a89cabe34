"""What the controller does on request or on a timer, run on its event loop
(cluster/controller/kafka_controller.py): controlled shutdown, leader elections asked for (ElectLeaders)
and the automatic preferred-leader rebalance, and topic deletion.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from trio_broker.cluster.zookeeper import zk_data

if TYPE_CHECKING:
    from trio_broker.cluster.controller.kafka_controller import Controller

logger = logging.getLogger(__name__)

__all__ = [
    "check_imbalance",
    "controlled_shutdown",
    "delete_topics",
    "elect_leaders",
    "on_delete_topics",
    "replicas_deleted",
    "resume_deletions",
]


# --- controlled shutdown ------------------------------------------------------------------


async def controlled_shutdown(ctrl: Controller, broker_id: int) -> list[tuple[str, int]] | None:
    """Kafka's doControlledShutdown: the broker counts as gone for elections; partitions
    it leads (with other replicas) get a new leader from the ISR, partitions it follows
    lose it from the ISR (StopReplica without delete to it); answers what it still leads."""
    from trio_broker.cluster.controller import partition_state_machine as psm

    ctx = ctrl.ctx
    if broker_id not in ctx.live_brokers:
        return None
    ctx.shutting_down.add(broker_id)
    logger.info("controller epoch %d: controlled shutdown of broker %d", ctrl.epoch, broker_id)
    mine = [tp for tp in ctx.partitions_on(broker_id) if len(ctx.replicas(*tp)) > 1]
    led = [tp for tp in mine if tp in ctx.states and ctx.states[tp].leader == broker_id]
    followed = [tp for tp in mine if tp in ctx.states and ctx.states[tp].leader != broker_id]
    # One batch: new leaders for what it led, the ISRs it leaves for what it followed.
    changed = await psm.elect(ctx, ctrl.zk, led + followed, psm.Election.SHUTDOWN)
    batch = ctrl.batch()
    for tp in changed:
        batch.add_leader_and_isr([r for r in ctx.replicas(*tp) if r != broker_id], *tp)
    for tp in followed:
        batch.add_stop_replica([broker_id], *tp, delete=False)
    batch.add_update_metadata(ctx.live_brokers, mine)
    batch.send(ctrl.channel)
    return [tp for tp in mine if tp in ctx.states and ctx.states[tp].leader == broker_id]


# --- preferred leader election ------------------------------------------------------------


async def elect_leaders(
    ctrl: Controller, partitions: list[tuple[str, int]], unclean: bool
) -> dict[tuple[str, int], int]:
    """ElectLeaders: per partition an error code (Kafka's answers)."""
    from trio_broker.cluster.controller import partition_state_machine as psm
    from trio_broker.errors import ErrorCode

    ctx = ctrl.ctx
    results: dict[tuple[str, int], int] = {}
    todo = []
    for tp in partitions:
        state = ctx.states.get(tp)
        if state is None:
            results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif unclean:
            if ctx.is_replica_online(state.leader, tp):
                results[tp] = ErrorCode.ELECTION_NOT_NEEDED
            else:
                todo.append(tp)
        elif state.leader == ctx.replicas(*tp)[0]:
            results[tp] = ErrorCode.ELECTION_NOT_NEEDED
        else:
            todo.append(tp)
    if unclean:
        changed = await psm.elect(ctx, ctrl.zk, todo, psm.Election.OFFLINE, unclean_default=True)
    else:
        changed = await psm.elect(ctx, ctrl.zk, todo, psm.Election.PREFERRED)
    batch = ctrl.batch()
    for tp in changed:
        batch.add_leader_and_isr(ctx.replicas(*tp), *tp)
    batch.add_update_metadata(ctx.live_brokers, changed)
    batch.send(ctrl.channel)
    elected = set(changed)
    for tp in todo:
        if tp in elected:
            results[tp] = ErrorCode.NONE
        else:
            results[tp] = (
                ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
                if unclean
                else ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
            )
    return results


async def check_imbalance(ctrl: Controller) -> None:
    """Kafka's checkAndTriggerAutoLeaderRebalance: per broker, the share of partitions
    it is the preferred leader of but does not lead; above
    leader.imbalance.per.broker.percentage, preferred elections for them."""
    from trio_broker.cluster.controller import partition_state_machine as psm

    ctx = ctrl.ctx
    percentage = ctrl.broker.config.leader_imbalance_per_broker_percentage
    todo: list[tuple[str, int]] = []
    for broker_id in sorted(ctx.live_brokers):
        preferred = [
            tp
            for tp in ctx.partitions()
            if ctx.replicas(*tp)[:1] == (broker_id,)
            and tp in ctx.states
            and tp[0] not in ctx.topics_being_deleted
        ]
        if not preferred or not ctx.is_live(broker_id):
            continue
        lost = [tp for tp in preferred if ctx.states[tp].leader != broker_id]
        if lost and len(lost) * 100 / len(preferred) > percentage:
            todo += [tp for tp in lost if broker_id in ctx.states[tp].isr]
    if not todo:
        return
    logger.info("controller epoch %d: leader imbalance, preferred elections %s", ctrl.epoch, todo)
    changed = await psm.elect(ctx, ctrl.zk, todo, psm.Election.PREFERRED)
    batch = ctrl.batch()
    for tp in changed:
        batch.add_leader_and_isr(ctx.replicas(*tp), *tp)
    batch.add_update_metadata(ctx.live_brokers, changed)
    batch.send(ctrl.channel)


# --- topic deletion -----------------------------------------------------------------------


async def on_delete_topics(ctrl: Controller, children: list[str]) -> None:
    from kazoo.exceptions import NoNodeError

    ctx = ctrl.ctx
    todo = []
    for topic in children:
        if topic in ctx.assignments:
            todo.append(topic)
        else:
            try:
                await ctrl.zk.delete(zk_data.delete_topic_path(topic))
            except NoNodeError:
                pass
    if todo:
        await delete_topics(ctrl, sorted(todo))


async def delete_topics(ctrl: Controller, topics: list[str]) -> None:
    """Kafka's TopicDeletionManager: UpdateMetadata with the partitions' leader -2
    (LeaderDuringDelete) to every broker, StopReplica(delete) to every live replica; the
    topic's znodes go once every replica answered (`replicas_deleted`). A replica on a
    broker that is down waits for it: its StopReplica goes when it starts again."""
    ctx = ctrl.ctx
    if not ctrl.broker.config.delete_topic_enable:
        for topic in topics:
            logger.warning("topic %s marked for deletion, but delete.topic.enable=false", topic)
        return
    batch = ctrl.batch()
    for topic in topics:
        if topic in ctx.deletion_pending:
            continue  # already under way (the notification fired again)
        ctx.topics_being_deleted.add(topic)
        ctrl.unwatch_topic(topic)
        pending = ctx.deletion_pending.setdefault(topic, set())
        for tp in ctx.partitions_of(topic):
            pending.update((b, tp[1]) for b in ctx.replicas(*tp))
            batch.add_stop_replica(ctx.replicas(*tp), *tp, delete=True)
        logger.info(
            "controller epoch %d: deleting topic %s (replicas on %s)",
            ctrl.epoch,
            topic,
            sorted({b for b, _ in pending}),
        )
    batch.add_update_metadata(ctx.live_brokers)
    batch.send(ctrl.channel)
    await _finish_deletions(ctrl)


def resume_deletions(ctrl: Controller, broker_ids: frozenset[int]) -> None:
    """Brokers started: StopReplica(delete) for the replicas of topics being deleted."""
    ctx = ctrl.ctx
    batch = ctrl.batch()
    for topic, pending in ctx.deletion_pending.items():
        for broker_id, partition in pending:
            if broker_id in broker_ids:
                batch.add_stop_replica([broker_id], topic, partition, delete=True)
    batch.send(ctrl.channel)


async def replicas_deleted(ctrl: Controller, broker_id: int, deleted: list[tuple[str, int]]):
    """A broker answered StopReplica(delete) for these partitions without error."""
    for topic, partition in deleted:
        pending = ctrl.ctx.deletion_pending.get(topic)
        if pending is not None:
            pending.discard((broker_id, partition))
    await _finish_deletions(ctrl)


async def _finish_deletions(ctrl: Controller) -> None:
    """Topics whose every replica is deleted: their znodes go, then an UpdateMetadata
    without them."""
    from kazoo.exceptions import NoNodeError

    from trio_broker.cluster.zookeeper.admin_zk_client import delete_recursive

    ctx = ctrl.ctx
    done = [t for t, pending in ctx.deletion_pending.items() if not pending]
    for topic in done:
        for path in (
            zk_data.topic_path(topic),
            zk_data.topic_config_path(topic),
            zk_data.delete_topic_path(topic),
        ):
            try:
                await delete_recursive(ctrl.zk, path)
            except NoNodeError:
                pass
        ctx.remove_topic(topic)
        logger.info("controller epoch %d: deleted topic %s", ctrl.epoch, topic)
    if done:
        batch = ctrl.batch()
        batch.add_update_metadata(ctx.live_brokers)
        batch.send(ctrl.channel)
