"""Partition leadership: new partitions' first state, and leader elections (Kafka's
PartitionStateMachine and PartitionLeaderElectionAlgorithms, with the ISR shrink of
ReplicaStateMachine's OfflineReplica).

    initialize(ctx, zk, partitions)    NewPartition -> OnlinePartition: leader = the first
                                       live replica of the assignment, ISR = the live
                                       replicas, leader epoch 0; the state znode created
    elect(ctx, zk, partitions, why)    a new leader and ISR by `why`'s rule, leader epoch
                                       + 1, written only at the version the controller
                                       holds (a leader changes the ISR too); a state that
                                       moved is read and decided again

Elections (`Election`):
    OFFLINE     the leader is gone (or none): the first replica in assignment order that is
                alive and in the ISR; unclean (any live replica, ISR = [it]) only with
                unclean.leader.election.enable. A partition whose leader lives only loses
                its dead followers from the ISR.
    SHUTDOWN    controlled shutdown: as OFFLINE with the brokers shutting down counted dead
    PREFERRED   the first replica of the assignment, if alive and in the ISR

Every write is a ZooKeeper multi that first checks /controller_epoch at the version this
controller wrote: a deposed controller's write fails as a whole (ControllerMovedError).

Both work on many partitions at once, as Kafka's controller does through its zkClient's
batch calls: states are written in multis of up to `_MULTI_OPS` partitions
(`write_states`), conditional on the versions the controller holds, and read with their
requests pipelined (`read_states`) only where needed, so that a broker failure moving
thousands of leaderships costs a few ZooKeeper round trips, not two per partition. (Each
answer costs kazoo's threads the GIL, which a busy broker's event loop holds: thousands of
pipelined reads still took seconds on a loaded broker, twenty multis do not.) A multi is all or nothing: when one of its partitions' writes fails (the
leader changed its ISR meanwhile: a version conflict), that chunk is written again one
multi per partition, pipelined, and each partition gets its own answer.
"""

from __future__ import annotations

import enum
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from trio_broker.cluster.controller.context import ControllerContext, PartitionLeadership
from trio_broker.cluster.zookeeper import zk_data

if TYPE_CHECKING:
    from trio_broker.cluster.zookeeper.session import ZooKeeperSession

logger = logging.getLogger(__name__)

__all__ = [
    "ControllerMovedError",
    "Election",
    "elect",
    "initialize",
    "read_state",
    "read_states",
    "write_states",
]

_WRITE_ATTEMPTS = 10
# Partitions per ZooKeeper multi: a state write is ~200 bytes, so a multi stays far below
# ZooKeeper's 1 MB request limit (jute.maxbuffer).
_MULTI_OPS = 500
# Elections of more partitions than this are logged _ELECTIONS_PER_LINE to a line.
_LINE_PER_ELECTION = 1000
_ELECTIONS_PER_LINE = 200


class ControllerMovedError(Exception):
    """/controller_epoch moved on: another broker is the controller now."""


class Election(enum.Enum):
    OFFLINE = "offline"
    SHUTDOWN = "controlled shutdown"
    PREFERRED = "preferred"
    # The leader registered again since it was made leader, unseen by any controller
    # (ControllerContext.bounced_leaders): another live ISR member takes over, as when a
    # controller sees a broker bounce; the partition stays as it is if there is none.
    BOUNCED = "bounced leader"


async def read_state(
    zk: ZooKeeperSession, topic: str, partition: int
) -> PartitionLeadership | None:
    from kazoo.exceptions import NoNodeError

    try:
        data, stat = await zk.get(zk_data.partition_state_path(topic, partition))
    except NoNodeError:
        return None
    try:
        return PartitionLeadership.of(zk_data.LeaderIsrState.decode(data), stat.version, stat.mzxid)
    except (ValueError, KeyError, TypeError, json.JSONDecodeError):
        logger.error("unreadable state of %s-%d: %r", topic, partition, data[:200])
        return None


async def read_states(
    zk: ZooKeeperSession, partitions: Sequence[tuple[str, int]]
) -> list[PartitionLeadership | None]:
    """The state znodes of `partitions` (None: missing or unreadable), read pipelined."""
    from kazoo.exceptions import NoNodeError

    paths = [zk_data.partition_state_path(t, p) for t, p in partitions]
    out: list[PartitionLeadership | None] = []
    for (topic, partition), result in zip(partitions, await zk.get_many(paths), strict=True):
        if isinstance(result, NoNodeError):
            out.append(None)
            continue
        if isinstance(result, Exception):
            raise result
        data, stat = result
        try:
            out.append(
                PartitionLeadership.of(
                    zk_data.LeaderIsrState.decode(data), stat.version, stat.mzxid
                )
            )
        except (ValueError, KeyError, TypeError, json.JSONDecodeError):
            logger.error("unreadable state of %s-%d: %r", topic, partition, data[:200])
            out.append(None)
    return out


async def write_states(
    ctx: ControllerContext,
    zk: ZooKeeperSession,
    ops: Mapping[tuple[str, int], list[tuple[str, tuple, dict]]],
) -> dict[tuple[str, int], Exception | None]:
    """Apply each partition's ZooKeeper ops (all of one partition's, or none), each behind
    the controller epoch check: `_MULTI_OPS` partitions per multi, and a chunk whose multi
    failed again one multi per partition. Returns per partition None (written) or the
    error of its failed op; raises ControllerMovedError when the epoch moved on."""
    from kazoo.exceptions import RolledBackError, RuntimeInconsistency

    results: dict[tuple[str, int], Exception | None] = {}
    keys = list(ops)
    chunks = [keys[i : i + _MULTI_OPS] for i in range(0, len(keys), _MULTI_OPS)]
    answers = await zk.transactions(
        [[_epoch_check(ctx), *(op for tp in chunk for op in ops[tp])] for chunk in chunks]
    )
    retry: list[tuple[str, int]] = []
    for chunk, answer in zip(chunks, answers, strict=True):
        _raise_if_moved(ctx, answer)
        if not any(isinstance(r, Exception) for r in answer):
            results.update(dict.fromkeys(chunk))
        else:
            retry += chunk
    if retry:
        answers = await zk.transactions([[_epoch_check(ctx), *ops[tp]] for tp in retry])
        for tp, answer in zip(retry, answers, strict=True):
            _raise_if_moved(ctx, answer)
            failed = [
                r
                for r in answer[1:]
                if isinstance(r, Exception)
                and not isinstance(r, RolledBackError | RuntimeInconsistency)
            ]
            results[tp] = failed[0] if failed else None
    return results


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

    planned: dict[tuple[str, int], zk_data.LeaderIsrState] = {}
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
        planned[(topic, partition)] = zk_data.LeaderIsrState(
            leader=live[0], leader_epoch=0, isr=live, controller_epoch=ctx.epoch
        )
    if not planned:
        return []
    for topic in sorted({t for t, _ in planned}):
        await zk.ensure_path(f"{zk_data.topic_path(topic)}/partitions")
    # Each partition's znode and its state znode in one go; a partition znode left by an
    # earlier controller (one that died before it made the state) fails the first op:
    # that partition is then made as before, its znode first.
    ops = {
        tp: [
            ("create", (zk_data.partition_path(*tp), b""), {}),
            ("create", (zk_data.partition_state_path(*tp), state.encode()), {}),
        ]
        for tp, state in planned.items()
    }
    results = await write_states(ctx, zk, ops)
    again = [tp for tp, error in results.items() if isinstance(error, NodeExistsError)]
    for tp in again:
        await zk.create_if_missing(zk_data.partition_path(*tp))
    if again:
        retried = await write_states(
            ctx,
            zk,
            {
                tp: [("create", (zk_data.partition_state_path(*tp), planned[tp].encode()), {})]
                for tp in again
            },
        )
        results.update(retried)
    existing = [tp for tp, error in results.items() if isinstance(error, NodeExistsError)]
    found = dict(zip(existing, await read_states(zk, existing), strict=True))
    done: list[tuple[str, int]] = []
    for tp in planned:
        error = results[tp]
        if isinstance(error, NodeExistsError):
            # Made by an earlier controller that died before telling anyone: adopt it.
            if found[tp] is not None:
                ctx.states[tp] = found[tp]
                done.append(tp)
        elif error is not None:
            logger.error("cannot create the state of %s-%d: %r", *tp, error)
        else:
            ctx.states[tp] = PartitionLeadership.of(planned[tp], 0)
            done.append(tp)
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
    if why is Election.BOUNCED:
        # Out of the ISR too, as a controller's onBrokerFailure takes it out: it rejoins
        # once it has caught up with the new leader.
        others = tuple(r for r in live_isr if r != state.leader)
        leader = next((r for r in replicas if r in others), None)
        return None if leader is None else (leader, others)
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
    """Elect leaders (or shrink ISRs) of `partitions`; returns those whose state changed.

    Decided first on the states the controller holds, written in multis at the znode
    versions it holds: a state that moved meanwhile (the leader changed its ISR) fails
    its version check, and is read and decided again. So every decision is made on what
    ZooKeeper holds, as when each state was read first (Kafka reads them all), at the
    cost of reading only the partitions that moved, and those the controller's state
    says need no change (read to make sure)."""
    from kazoo.exceptions import BadVersionError, NoNodeError

    changed: set[tuple[str, int]] = set()
    order = list(dict.fromkeys(partitions))
    cached = [tp for tp in order if tp in ctx.states]
    to_read = [tp for tp in order if tp not in ctx.states]
    unclean_of: dict[str, bool] = {}
    for _attempt in range(_WRITE_ATTEMPTS):
        if not cached and not to_read:
            break
        candidates = [(tp, ctx.states[tp], True) for tp in cached]
        if to_read:
            read = await read_states(zk, to_read)
            candidates += [(tp, st, False) for tp, st in zip(to_read, read, strict=True)]
        cached, to_read = [], []
        wanted: dict[tuple[str, int], tuple[PartitionLeadership, PartitionLeadership]] = {}
        for tp, state, from_cache in candidates:
            if state is None:
                continue
            if not from_cache:
                ctx.states[tp] = state
            unclean = False
            if why is Election.OFFLINE and not any(ctx.is_replica_online(r, tp) for r in state.isr):
                if tp[0] not in unclean_of:
                    unclean_of[tp[0]] = await _unclean_allowed(zk, tp[0], unclean_default)
                unclean = unclean_of[tp[0]]
            choice = _choose(ctx, tp, ctx.replicas(*tp), state, why, unclean)
            if choice is None:
                if from_cache:
                    to_read.append(tp)  # nothing to do by the controller's state: make sure
                continue
            wanted[tp] = (state, state.succeeded_by(*choice, ctx.epoch))
        if not wanted:
            continue
        # A large election (a broker failure at scale) is logged compactly, many
        # partitions a line: a record per partition was a third of the controller's time
        # electing 1,000 (py-spy, session 21).
        compact: list[str] | None = [] if len(wanted) > _LINE_PER_ELECTION else None
        results = await write_states(
            ctx,
            zk,
            {
                tp: [
                    (
                        "set_data",
                        (zk_data.partition_state_path(*tp), new.znode().encode()),
                        {"version": old.zk_version},
                    )
                ]
                for tp, (old, new) in wanted.items()
            },
        )
        for tp, (old, new) in wanted.items():
            error = results[tp]
            if isinstance(error, BadVersionError):
                to_read.append(tp)  # the leader changed the ISR meanwhile: read again
                continue
            if isinstance(error, NoNodeError):
                continue
            if error is not None:
                logger.error("cannot write the state of %s-%d: %r", *tp, error)
                continue
            ctx.states[tp] = new
            changed.add(tp)
            if compact is None:
                logger.info(
                    "%s election of %s-%d: leader %d -> %d, epoch %d, isr %s",
                    why.value,
                    *tp,
                    old.leader,
                    new.leader,
                    new.leader_epoch,
                    list(new.isr),
                )
            else:
                compact.append(
                    f"{tp[0]}-{tp[1]} {old.leader}->{new.leader} e{new.leader_epoch}"
                    f" {list(new.isr)}"
                )
        if compact:
            for first in range(0, len(compact), _ELECTIONS_PER_LINE):
                part = compact[first : first + _ELECTIONS_PER_LINE]
                logger.info(
                    "%s election of %d partitions (leader old->new, epoch, isr): %s",
                    why.value,
                    len(part),
                    "; ".join(part),
                )
            compact.clear()
    return [tp for tp in order if tp in changed]


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
