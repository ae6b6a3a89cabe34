"""Broker fencing: KRaft's broker heartbeats and sessions, in a ZooKeeper cluster.

A broker's ZooKeeper session says only that it reaches ZooKeeper. A leader cut from the
other brokers but not from ZooKeeper keeps its session and its leaderships, and no
follower can reach it: acks=all waits for the whole cut (min.insync.replicas) and
nobody is elected. Kafka 4 (KRaft) handles this with heartbeats: every broker sends
BrokerHeartbeat to the controller every `broker.heartbeat.interval.ms`, and the
controller fences a broker it has not heard from for `broker.session.timeout.ms`
(Kafka's BrokerHeartbeatManager), electing new leaders from the ISRs without it
(ReplicationControlManager). Here the same, on the controller broker:

    heartbeat(broker, epoch)   from the BrokerHeartbeat handler: remembered, answered
                               with whether the broker is fenced; one from a fenced broker
                               of the same registration unfences it (an event)
    run                        every half heartbeat interval: the registered brokers not
                               heard from for the session timeout are fenced (an event),
                               but only while the controller hears from a majority of
                               them within two intervals (itself counted: a controller
                               cut off from the rest fences nobody) and only a session
                               timeout after its own failover (brokers find a new
                               controller by its znode); with no majority heard for a
                               session timeout, the controller resigns (`_resign`)

A controller voted out by the brokers (cluster/zookeeper/controller_votes.py: dead, its
/controller outliving it with its session) gets no grace from the controller elected
after it (`read_votes`): fenced as soon as that one hears a majority.

Fencing is the controller's broker failure (out of the live brokers used for elections
and metadata, `on_broker_failure`); unfencing its broker startup (`on_broker_startup`:
LeaderAndIsr for all its replicas, it follows and catches up). A broker registering
again (a new broker epoch) is no longer fenced. Elections stay clean (ISR only) and
conditional on the state znodes' versions, as every other election.

`hears_majority` is the controller broker's own ISR lease (cluster/replication/
heartbeats.py): it may shrink an ISR only while it hears from a majority.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from trio_broker.cluster.controller.context import LiveBroker
    from trio_broker.cluster.controller.kafka_controller import Controller

logger = logging.getLogger(__name__)

__all__ = ["BrokerFencing"]


class BrokerFencing:
    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        config = controller.broker.config
        self.interval_s = config.broker_heartbeat_interval_ms / 1000
        self.session_s = config.broker_session_timeout_ms / 1000
        # "Hearing from" a broker: a heartbeat within two intervals (as the brokers' ISR
        # lease). Not the session timeout: cut off itself, the controller stops hearing
        # everyone at once, and the broker whose latest heartbeat came first would be
        # fenced while the others' were still within the session timeout.
        self.recent_s = 2 * self.interval_s
        # broker id -> (its broker epoch, when its latest heartbeat came)
        self.heard: dict[int, tuple[int, float]] = {}
        # Fenced brokers, with the registration they were fenced in.
        self.fenced: dict[int, LiveBroker] = {}
        # No fencing before this (set when the failover is done).
        self.grace_until = float("inf")
        # Brokers with no grace after the failover (`read_votes`).
        self.unheard: set[int] = set()
        self._fence_asked = False

    # -- heartbeats -------------------------------------------------------------------------

    def heartbeat(self, broker_id: int, broker_epoch: int) -> tuple[int, bool]:
        """A BrokerHeartbeat: (error code, is_fenced)."""
        from trio_broker.errors import ErrorCode

        ctx = self.controller.ctx
        node = ctx.live_brokers.get(broker_id) or self.fenced.get(broker_id)
        if node is not None and 0 <= broker_epoch < node.epoch:
            return ErrorCode.STALE_BROKER_EPOCH, True
        # Unknown to the controller yet (its watch on /brokers/ids has not fired), or of
        # a newer registration: heard all the same, the registration comes.
        self.heard[broker_id] = (broker_epoch, trio.current_time())
        fenced = self.fenced.get(broker_id)
        if fenced is not None and fenced.epoch == broker_epoch:
            self.controller.send_event(("unfence", broker_id, broker_epoch))
            return ErrorCode.NONE, True
        return ErrorCode.NONE, fenced is not None

    def registered(self, broker_id: int) -> None:
        """A new registration counts as a heartbeat (it finds the controller after)."""
        node = self.controller.ctx.live_brokers.get(broker_id)
        if node is not None:
            self.heard[broker_id] = (node.epoch, trio.current_time())

    def _heard_within(self, broker_id: int, seconds: float, now: float) -> bool:
        if broker_id == self.controller.ctx.controller_id:
            return True
        heard = self.heard.get(broker_id)
        return heard is not None and now - heard[1] < seconds

    def registered_brokers(self) -> set[int]:
        return set(self.controller.ctx.live_brokers) | set(self.fenced)

    def hears_majority(self, within_s: float) -> bool:
        """Whether heartbeats came from a majority of the registered brokers (this one
        counted) within `within_s`."""
        now = trio.current_time()
        registered = self.registered_brokers() | {self.controller.ctx.controller_id}
        if len(registered) < 3:
            # Cut in two, neither side of two brokers would have a majority: the
            # controller acts as if it heard one (it fences a silent broker, keeps its
            # lease, never resigns), as a KRaft controller of its own would.
            return True
        hearing = [b for b in registered if self._heard_within(b, within_s, now)]
        return 2 * len(hearing) > len(registered)

    # -- the registrations the controller reads ---------------------------------------------

    def keep_fenced(self, live: dict[int, LiveBroker]) -> None:
        """The controller read /brokers/ids into `live`: a fenced broker of the same
        registration stays out of it (fenced); one gone or registered again is no longer
        fenced (its new registration is a broker startup)."""
        for broker_id, node in list(self.fenced.items()):
            now = live.get(broker_id)
            if now is not None and now.epoch == node.epoch:
                self.fenced[broker_id] = live.pop(broker_id)
            else:
                # Back among the live brokers as it was, so that the caller finds it gone
                # (and any new registration started): whatever it still leads is elected
                # away, as for any broker that leaves (its fence's elections may have
                # failed: ZooKeeper down).
                self.controller.ctx.live_brokers[broker_id] = self.fenced.pop(broker_id)
                logger.info(
                    "controller: broker %d registered again or left; no longer fenced", broker_id
                )

    def stale(self) -> list[int]:
        """The live brokers to fence now (empty while in the grace period or without a
        majority heard from)."""
        now = trio.current_time()
        if not self.hears_majority(self.recent_s):
            return []
        in_grace = now < self.grace_until
        ctx = self.controller.ctx
        return sorted(
            b
            for b in ctx.live_brokers
            if b != ctx.controller_id
            and (not in_grace or b in self.unheard)
            and not self._heard_within(b, self.session_s, now)
        )

    async def read_votes(self) -> None:
        """At the failover: the controller of the election just before this one gets no
        grace when a majority voted it unheard (cluster/zookeeper/controller_votes.py) or
        it voted so itself when it resigned (`_resign`); fenced as soon as this controller
        hears a majority, unless it heartbeats this one first."""
        from trio_broker.cluster.zookeeper import controller_votes as cv

        ctx = self.controller.ctx
        votes = await cv.read_votes(self.controller.zk)
        registered = self.registered_brokers() | {ctx.controller_id}
        for vote in set(votes.values()):
            if vote.epoch_zk_version == ctx.epoch_zk_version - 1 and vote.controller in registered:
                voters = cv.majority_against(votes, vote, registered)
                if votes.get(vote.controller) == vote:
                    voters = [vote.controller]  # it resigned, hearing no majority
                if voters:
                    self.unheard.add(vote.controller)
                    logger.warning(
                        "controller epoch %d: broker %d, the controller before, was unheard by "
                        "brokers %s: no grace before fencing it",
                        self.controller.epoch,
                        vote.controller,
                        voters,
                    )

    async def run(self) -> None:
        """Asks the event loop to fence the brokers gone silent (`stale`); resigns when
        the controller itself is the one cut off (`_resign`)."""
        while True:
            await trio.sleep(self.interval_s / 2)
            if trio.current_time() >= self.grace_until and not self.hears_majority(self.session_s):
                await self._resign()
                return
            if not self._fence_asked and self.stale():
                self._fence_asked = True
                self.controller.send_event(("fence",))
            elif self.fenced and not self._fence_asked and self.unelected():
                # A fence whose elections were not all written (ZooKeeper down, or out of
                # reach for a moment): elected again until they are.
                self._fence_asked = True
                self.controller.send_event(("fence_again",))

    async def _resign(self) -> None:
        """No heartbeats from a majority of the registered brokers for a session timeout:
        this controller is most likely the broker cut off (from the other brokers, not
        from ZooKeeper, or it would have lost /controller with its session). It can fence
        nobody, and leaders cut from it cannot shrink their ISRs. So it deletes
        /controller (while still its own) and its elector stands aside for a session
        timeout: a broker on the majority side takes over, and fences it if it stays cut
        off."""
        from kazoo.exceptions import NoNodeError

        from trio_broker.cluster.zookeeper import controller_votes as cv
        from trio_broker.cluster.zookeeper import zk_data

        controller = self.controller
        zk = controller.zk
        elector = getattr(controller.broker, "controller_elector", None)
        logger.warning(
            "controller epoch %d: no heartbeats from a majority of brokers %s for %.1f s: "
            "resigning, not standing again for %.1f s",
            controller.epoch,
            sorted(self.registered_brokers()),
            self.session_s,
            self.session_s,
        )
        if elector is not None:
            elector.standing_down_until = trio.current_time() + self.session_s
        try:
            # Its own vote first: the controller elected next fences it without a grace
            # period (`read_votes`), as one the brokers voted out.
            await cv.cast(
                zk,
                controller.broker.node_id,
                cv.Vote(controller.broker.node_id, controller.ctx.epoch_zk_version),
            )
            stat = await zk.exists(zk_data.CONTROLLER_PATH)
            if stat is not None and stat.ephemeralOwner == zk.session_id:
                await zk.delete(zk_data.CONTROLLER_PATH, version=stat.version)
        except NoNodeError:
            pass
        except Exception as exc:  # noqa: BLE001 - the session's end resigns it too
            logger.warning("controller epoch %d: could not resign: %r", controller.epoch, exc)

    async def fence_stale(self) -> None:
        """On the event loop: fence the brokers `stale` names (checked again here: a
        heartbeat may have come since)."""
        self._fence_asked = False
        stale = self.stale()
        if not stale:
            return
        controller = self.controller
        ctx = controller.ctx
        now = trio.current_time()
        for broker_id in stale:
            heard = self.heard.get(broker_id)
            logger.warning(
                "controller epoch %d: fencing broker %d (epoch %d): no heartbeat for %s, while "
                "hearing from a majority of the registered brokers %s",
                controller.epoch,
                broker_id,
                ctx.live_brokers[broker_id].epoch,
                f"{now - heard[1]:.1f} s" if heard is not None else "ever",
                sorted(self.registered_brokers()),
            )
            self.fenced[broker_id] = ctx.live_brokers.pop(broker_id)
            # A fresh connection when it is unfenced: the one to it may hold requests
            # TCP is retransmitting into the cut.
            controller.channel.remove_broker(broker_id)
            ctx.shutting_down.discard(broker_id)
        await controller.on_broker_failure(frozenset(stale))

    def unelected(self) -> list[int]:
        """The fenced brokers still leading a partition another in-sync replica could
        lead (their fence's elections failed to be written)."""
        ctx = self.controller.ctx
        return sorted(
            {
                state.leader
                for tp, state in ctx.states.items()
                if state.leader in self.fenced
                and any(r != state.leader and ctx.is_replica_online(r, tp) for r in state.isr)
            }
        )

    async def fence_again(self) -> None:
        """On the event loop: the elections of `unelected` brokers, again."""
        self._fence_asked = False
        leaders = self.unelected()
        if leaders:
            logger.warning(
                "controller epoch %d: electing again the partitions fenced brokers %s lead",
                self.controller.epoch,
                leaders,
            )
            await self.controller.on_broker_failure(frozenset(leaders))

    async def unfence(self, broker_id: int, broker_epoch: int) -> None:
        """On the event loop: a heartbeat from the fenced broker's registration."""
        node = self.fenced.get(broker_id)
        if node is None or node.epoch != broker_epoch:
            return
        controller = self.controller
        logger.warning(
            "controller epoch %d: broker %d (epoch %d) heard from again: unfenced",
            controller.epoch,
            broker_id,
            broker_epoch,
        )
        del self.fenced[broker_id]
        controller.ctx.live_brokers[broker_id] = node
        controller.channel.add_broker(broker_id, node.host, node.port)
        await controller.on_broker_startup(frozenset({broker_id}))
