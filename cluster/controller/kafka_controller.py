"""The controller: one broker of the cluster, elected through ZooKeeper (Kafka's
KafkaController, ZooKeeper era).

    ControllerElector.run         on every broker, per ZooKeeper session:
        /controller missing   ->  try to win it: one ZooKeeper multi creates the ephemeral
                                  /controller and bumps /controller_epoch at the version read,
                                  so exactly one broker wins each epoch
        /controller ours      ->  run the Controller (with its epoch) while it stays ours
        /controller another's ->  wait for it to change (the broker dies, its session ends)
    Controller.run                while elected:
        ├── watches -> one event queue: /brokers/ids, /brokers/topics (and each topic's
        │   assignment), /admin/delete_topics, /isr_change_notification
        ├── ControllerChannel: a connection and an ordered queue per live broker
        └── the event loop: one event at a time, as Kafka's ControllerEventManager
              failover           read every topic and partition state from ZooKeeper,
                                 initialize new partitions, elect offline ones, then
                                 LeaderAndIsr to every live replica, UpdateMetadata to all
              brokers changed    startup: UpdateMetadata to all, LeaderAndIsr to the new
                                 broker for its replicas, offline partitions elected;
                                 failure: leaders elected from the live ISR, dead
                                 followers out of ISRs, LeaderAndIsr + UpdateMetadata
              topics changed     new partitions: state znodes, LeaderAndIsr (is_new) to the
                                 replicas, UpdateMetadata to all
              ISR changed        notifications read and deleted, states re-read,
                                 UpdateMetadata to all
              log dir failed     notifications read and deleted, LeaderAndIsr to the
                                 broker for all its replicas; its answers name the
                                 replicas in the failed dir (KAFKA_STORAGE_ERROR), which
                                 leave their ISRs and lose their leaderships (elections),
                                 and are reported as offline replicas
              controlled shutdown, ElectLeaders, leader rebalance, topic deletion
                                 (cluster/controller/actions.py)
              reassignments      (cluster/controller/reassignment.py)
              fence / unfence    a broker whose heartbeats stopped, and its next one
                                 (cluster/controller/fencing.py: KRaft's broker fencing)

The epoch fences a deposed controller: it grows by one per election, every controller
request carries it (brokers refuse an older one), and every state znode write checks
/controller_epoch at the version this controller wrote in the same ZooKeeper multi.
"""

from __future__ import annotations

import json
import logging
import math
from typing import TYPE_CHECKING, Any

import trio

from trio_broker.cluster.zookeeper import zk_data
from trio_broker.cluster.zookeeper.session import ZooKeeperSession

if TYPE_CHECKING:
    from trio_broker.broker import Broker

logger = logging.getLogger(__name__)

__all__ = ["Controller", "ControllerElector"]


class Controller:
    """This broker's controller for one epoch; `run` lasts while it is elected."""

    def __init__(
        self, broker: Broker, zk: ZooKeeperSession, epoch: int, epoch_zk_version: int = -1
    ):
        from trio_broker.cluster.controller.context import ControllerContext
        from trio_broker.cluster.controller.fencing import BrokerFencing

        self.broker = broker
        self.zk = zk
        self.epoch = epoch
        self.ctx = ControllerContext(
            controller_id=broker.node_id, epoch=epoch, epoch_zk_version=epoch_zk_version
        )
        self.channel: Any = None
        self.ready = trio.Event()  # set once the failover's requests are queued
        self._events_send, self._events = trio.open_memory_channel[tuple](math.inf)
        self._topic_watches: dict[str, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None
        self.fencing = BrokerFencing(self)

    def send_event(self, event: tuple) -> None:
        """Queue `event` for the event loop."""
        self._events_send.send_nowait(event)

    @property
    def live_brokers(self) -> frozenset[int]:
        return frozenset(self.ctx.live_brokers)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        from trio_broker.cluster.controller.channel_manager import ControllerChannel
        from trio_broker.cluster.controller.partition_state_machine import ControllerMovedError

        logger.info("broker %d is the controller, epoch %d", self.broker.node_id, self.epoch)
        self.channel = ControllerChannel(
            self.broker.node_id,
            request_timeout_ms=self.broker.config.controller_socket_timeout_ms,
            on_response=self._on_response,
            broker_config=self.broker.config,
        )
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self.channel.run)
                for kind, path in (
                    ("brokers", zk_data.BROKER_IDS_PATH),
                    ("topics", zk_data.TOPICS_PATH),
                    ("delete", zk_data.DELETE_TOPICS_PATH),
                    ("isr", zk_data.ISR_CHANGE_NOTIFICATION_PATH),
                    ("log_dirs", zk_data.LOG_DIR_EVENT_NOTIFICATION_PATH),
                ):
                    nursery.start_soon(self._watch_children, kind, path)
                if self.broker.config.auto_leader_rebalance_enable:
                    nursery.start_soon(self._rebalance_timer)
                started = False
                try:
                    await self._failover_until_done()
                    # Brokers find a new controller by its znode: none is fenced for
                    # having not found it yet.
                    self.fencing.grace_until = trio.current_time() + self.fencing.session_s
                    await self.fencing.read_votes()
                    nursery.start_soon(self.fencing.run)
                    self.ready.set()
                    task_status.started()
                    started = True
                    async for event in self._events:
                        try:
                            await self._process(event)
                        except ControllerMovedError:
                            raise
                        except Exception:
                            # A bug or bad data in ZooKeeper must not take the broker down
                            # (Kafka's event manager logs and goes on, too).
                            logger.exception("controller event %s failed", event[0])
                except ControllerMovedError as exc:
                    # Another broker won /controller: the elector cancels us once the
                    # /controller watch fires; until then, decide nothing.
                    logger.warning("broker %d: %s", self.broker.node_id, exc)
                    if not started:
                        task_status.started()
                    await trio.sleep_forever()
        finally:
            logger.info(
                "broker %d resigned as controller, epoch %d", self.broker.node_id, self.epoch
            )

    # --- watches into the event queue ---------------------------------------------------

    async def _watch_children(self, kind: str, path: str) -> None:
        send, receive = trio.open_memory_channel[list[str]](1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.zk.watch_children, path, send)
            async with receive:
                async for children in receive:
                    self._events_send.send_nowait((kind, children))

    def _watch_topic(self, topic: str) -> None:
        if topic in self._topic_watches or self._nursery is None:
            return
        scope = trio.CancelScope()
        self._topic_watches[topic] = scope
        self._nursery.start_soon(self._watch_topic_data, topic, scope)

    async def _watch_topic_data(self, topic: str, scope: trio.CancelScope) -> None:
        send, receive = trio.open_memory_channel[Any](1)
        with scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.zk.watch_data, zk_data.topic_path(topic), send)
                async with receive:
                    async for value in receive:
                        if value is not None:
                            self._events_send.send_nowait(("partitions", topic, value[0]))

    def unwatch_topic(self, topic: str) -> None:
        scope = self._topic_watches.pop(topic, None)
        if scope is not None:
            scope.cancel()

    def _on_response(self, broker_id: int, request: Any, response: Any) -> None:
        """A broker's answer to a controller request (None: it does not serve that API).
        StopReplica(delete) answers move topic deletion on, LeaderAndIsr answers tell
        which replicas are in failed log dirs; both on the event loop."""
        from trio_broker.errors import ErrorCode
        from trio_broker.protocol._generated.leader_and_isr_request import LeaderAndIsrRequest
        from trio_broker.protocol._generated.stop_replica_request import StopReplicaRequest

        if isinstance(request, LeaderAndIsrRequest):
            if response is not None and response.error_code == ErrorCode.NONE:
                self._events_send.send_nowait(
                    ("replica_states", broker_id, request.broker_epoch, self._storage(response))
                )
            return
        if not isinstance(request, StopReplicaRequest) or not request.delete_partitions:
            return
        asked = [
            (t.topic_name, p.partition_index)
            for t in request.topic_states
            for p in t.partition_states
            if p.delete_partition
        ]
        if response is None:
            # A broker without StopReplica holds no replica logs in a cluster (it never
            # made any: LeaderAndIsr is not served either); nothing to wait for.
            deleted = asked
        elif response.error_code != ErrorCode.NONE:
            logger.warning(
                "broker %d refused StopReplica: %s", broker_id, ErrorCode(response.error_code).name
            )
            return
        else:
            failed = {
                (e.topic_name, e.partition_index)
                for e in response.partition_errors
                if e.error_code != ErrorCode.NONE
            }
            if failed:
                logger.warning("broker %d could not delete %s", broker_id, sorted(failed))
            deleted = [tp for tp in asked if tp not in failed]
        self._events_send.send_nowait(("deleted", broker_id, deleted))

    def _storage(self, response: Any) -> dict[tuple[str, int], bool]:
        """A LeaderAndIsr answer's partitions: True for those in a failed log dir
        (KAFKA_STORAGE_ERROR), False for those now online (NONE); others left out."""
        from trio_broker.errors import ErrorCode

        names = {topic_id: topic for topic, topic_id in self.ctx.topic_ids.items()}
        errors = [
            ((e.topic_name, e.partition_index), e.error_code) for e in response.partition_errors
        ]
        for topic in response.topics:
            name = names.get(topic.topic_id)
            if name is not None:
                errors += [
                    ((name, e.partition_index), e.error_code) for e in topic.partition_errors
                ]
        return {
            tp: code == ErrorCode.KAFKA_STORAGE_ERROR
            for tp, code in errors
            if code in (ErrorCode.NONE, ErrorCode.KAFKA_STORAGE_ERROR)
        }

    async def _rebalance_timer(self) -> None:
        interval = self.broker.config.leader_imbalance_check_interval_seconds
        while True:
            await trio.sleep(interval)
            self._events_send.send_nowait(("rebalance",))

    async def call(self, event: tuple) -> Any:
        """Run an event on the controller's loop and wait for its answer (ControlledShutdown,
        ElectLeaders): `event` + a reply channel."""
        send, receive = trio.open_memory_channel[Any](1)
        self._events_send.send_nowait((*event, send))
        async with receive:
            # Bounded: a controller deposed meanwhile never answers.
            with trio.move_on_after(self.broker.config.controller_socket_timeout_ms / 1000):
                return await receive.receive()
        return None

    # --- the event loop -------------------------------------------------------------------

    async def _process(self, event: tuple) -> None:
        from trio_broker.cluster.controller import actions

        kind = event[0]
        if kind == "brokers":
            await self._on_brokers(event[1])
        elif kind == "topics":
            await self._on_topics(event[1])
        elif kind == "partitions":
            await self._on_partitions(event[1], event[2])
        elif kind == "isr":
            await self._on_isr_change(event[1])
        elif kind == "log_dirs":
            await self._on_log_dir_events(event[1])
        elif kind == "fence":
            await self.fencing.fence_stale()
        elif kind == "fence_again":
            await self.fencing.fence_again()
        elif kind == "unfence":
            await self.fencing.unfence(event[1], event[2])
        elif kind == "replica_states":
            await self._on_replica_states(event[1], event[2], event[3])
        elif kind == "delete":
            await actions.on_delete_topics(self, event[1])
        elif kind == "deleted":
            await actions.replicas_deleted(self, event[1], event[2])
        elif kind == "reassign":
            from trio_broker.cluster.controller.reassignment import alter_reassignments

            reply = event[2]
            try:
                result = await alter_reassignments(self, event[1])
            except BaseException:
                _answer(reply, None)
                raise
            _answer(reply, result)
        elif kind == "rebalance":
            await actions.check_imbalance(self)
        elif kind == "shutdown":
            reply = event[2]
            try:
                result = await actions.controlled_shutdown(self, event[1])
            except BaseException:
                _answer(reply, None)
                raise
            _answer(reply, result)
        elif kind == "elect":
            reply = event[3]
            try:
                result = await actions.elect_leaders(self, event[1], event[2])
            except BaseException:
                _answer(reply, None)
                raise
            _answer(reply, result)

    async def _failover_until_done(self) -> None:
        """The failover, again after a second if ZooKeeper gave something unexpected (the
        controller must come up; a deposed one is cancelled by the elector meanwhile)."""
        from trio_broker.cluster.controller.partition_state_machine import ControllerMovedError

        while True:
            try:
                await self._failover()
                return
            except ControllerMovedError:
                raise
            except Exception:
                logger.exception("controller failover failed; again in 1 s")
                await trio.sleep(1)

    def batch(self) -> Any:
        from trio_broker.cluster.controller.channel_manager import RequestBatch

        return RequestBatch(self.ctx)

    async def _failover(self) -> None:
        """Kafka's onControllerFailover: everything from ZooKeeper, then tell everyone."""
        from trio_broker.cluster.controller import partition_state_machine as psm

        ctx = self.ctx
        await self._read_brokers(await self.zk.get_children(zk_data.BROKER_IDS_PATH))
        for broker_id, node in ctx.live_brokers.items():
            self.channel.add_broker(broker_id, node.host, node.port)
        topics = sorted(await self.zk.get_children(zk_data.TOPICS_PATH))
        # All at once: one after another, a hundred topics were two hundred round trips to
        # ZooKeeper before the new controller could elect anything (their ZooKeeper calls
        # are pipelined on the session).
        async with trio.open_nursery() as nursery:
            for topic in topics:
                nursery.start_soon(self._read_topic, topic)
        for topic in await self.zk.get_children(zk_data.DELETE_TOPICS_PATH):
            if topic in ctx.assignments:
                ctx.topics_being_deleted.add(topic)
        new = [tp for tp in ctx.partitions() if tp not in ctx.states]
        await psm.initialize(ctx, self.zk, new)
        fresh = set(new)
        offline = [tp for tp in ctx.partitions() if self._needs_election(tp)]
        elected = await psm.elect(
            ctx, self.zk, offline, psm.Election.OFFLINE, unclean_default=self.unclean
        )
        # Leaders that registered again since they were made leaders, unseen: restarted
        # with the controller they replace, or while ZooKeeper was down. A controller that
        # saw it would have taken their partitions to another ISR member; a restarted
        # broker leads nothing until told, and its clients reconnect to it only after
        # their backoff (librdkafka's grows to 10 s), so do it now.
        bounced = [tp for tp in ctx.bounced_leaders() if tp not in elected]
        if bounced:
            logger.info(
                "controller %d: %d partitions led by brokers %s that registered again since "
                "(restarted or their sessions ended): electing other leaders from their ISRs",
                ctx.controller_id,
                len(bounced),
                sorted({ctx.states[tp].leader for tp in bounced}),
            )
            elected += await psm.elect(ctx, self.zk, bounced, psm.Election.BOUNCED)
        batch = self.batch()
        if elected:
            # The partitions that had no live leader (the old controller may have died with
            # a broker, or while electing) are told first, in requests of their own, as a
            # broker failure's are (on_broker_failure): their clients wait for them, and
            # nobody waits for the full requests below.
            for tp in elected:
                if tp[0] not in ctx.topics_being_deleted:
                    batch.add_leader_and_isr(ctx.replicas(*tp), *tp, is_new=tp in fresh)
            batch.send(self.channel)
        for tp in ctx.partitions():
            if tp[0] not in ctx.topics_being_deleted:
                batch.add_leader_and_isr(ctx.replicas(*tp), *tp, is_new=tp in fresh)
        batch.add_update_metadata(ctx.live_brokers)
        batch.send(self.channel)
        logger.info(
            "controller %d (epoch %d) took over: %d brokers %s, %d topics, %d partitions",
            ctx.controller_id,
            ctx.epoch,
            len(ctx.live_brokers),
            sorted(ctx.live_brokers),
            len(ctx.assignments),
            len(ctx.states),
        )
        from trio_broker.cluster.controller.reassignment import maybe_complete

        await maybe_complete(self, ctx.partitions())  # ongoing reassignments, if done
        if ctx.topics_being_deleted:
            from trio_broker.cluster.controller.actions import delete_topics

            await delete_topics(self, sorted(ctx.topics_being_deleted))

    @property
    def unclean(self) -> bool:
        return bool(self.broker.config.unclean_leader_election_enable)

    def _needs_election(self, tp: tuple[str, int]) -> bool:
        """Offline (no live leader) or with a dead or shutting-down broker in its ISR."""
        state = self.ctx.states.get(tp)
        if state is None:
            return False
        online = self.ctx.is_replica_online
        return not online(state.leader, tp) or any(not online(r, tp) for r in state.isr)

    async def _read_brokers(self, children: list[str]) -> tuple[set[int], set[int]]:
        """The live brokers from /brokers/ids; returns (started, gone). A broker whose
        znode was replaced (a new session) counts as gone and started again."""
        from kazoo.exceptions import NoNodeError

        from trio_broker.cluster.controller.context import LiveBroker
        from trio_broker.security.inter_broker import inter_broker_listener

        ctx = self.ctx
        # The controller reaches brokers on its inter-broker listener (Kafka's
        # interBrokerListenerName), not on whichever listener a broker lists first.
        listener = inter_broker_listener(self.broker.config) if self.broker.advertised else None
        live: dict[int, LiveBroker] = {}
        for child in children:
            if not child.isdigit():
                continue
            broker_id = int(child)
            try:
                data, stat = await self.zk.get(zk_data.broker_path(broker_id))
                info = zk_data.BrokerInfo.decode(broker_id, data)
            except NoNodeError:
                continue
            except (ValueError, KeyError, json.JSONDecodeError):
                logger.warning("ignoring unreadable registration of broker %d", broker_id)
                continue
            endpoint = info.endpoint(listener) or info.endpoint()
            if endpoint is None:
                continue
            live[broker_id] = LiveBroker(
                broker_id=broker_id,
                host=endpoint.host,
                port=endpoint.port,
                rack=info.rack,
                endpoints=info.endpoints,
                epoch=stat.czxid,
            )
        self.fencing.keep_fenced(live)
        old = ctx.live_brokers
        started = {b for b in live if b not in old or old[b].epoch != live[b].epoch}
        gone = {b for b in old if b not in live or old[b].epoch != live[b].epoch}
        ctx.live_brokers = live
        return started, gone

    async def _read_topic(self, topic: str, *, states: bool = True) -> list[tuple[str, int]]:
        """Read a topic's assignment (and, with `states`, the states of partitions not known
        yet); returns the partitions that are new to the controller. A topic created while
        this controller runs has no states yet: `initialize` makes them (and adopts any
        it finds)."""
        from trio_broker.cluster.controller import partition_state_machine as psm
        from trio_broker.cluster.zookeeper.admin_zk_client import read_assignment

        ctx = self.ctx
        read = await read_assignment(self.zk, topic)
        if read is None:
            return []
        assignment, _ = read
        known = ctx.assignments.get(topic)
        ctx.assignments[topic] = (
            assignment
            if known is None
            else zk_data.TopicAssignment(
                topic_id=known.topic_id,
                partitions={**assignment.partitions, **known.partitions},
                adding_replicas=known.adding_replicas,
                removing_replicas=known.removing_replicas,
            )
        )
        ctx.topic_ids[topic] = ctx.assignments[topic].topic_id
        self._watch_topic(topic)
        fresh = [
            (topic, partition)
            for partition in sorted(assignment.partitions)
            if known is None or partition not in known.partitions
        ]
        if states:
            for tp, state in zip(fresh, await psm.read_states(self.zk, fresh), strict=True):
                if state is not None:
                    ctx.states[tp] = state
        return fresh

    # --- brokers ----------------------------------------------------------------------------

    async def _on_brokers(self, children: list[str]) -> None:
        started, gone = await self._read_brokers(children)
        for broker_id in gone:
            self.channel.remove_broker(broker_id)
            self.ctx.shutting_down.discard(broker_id)
            self.ctx.replicas_on_offline_dirs.pop(broker_id, None)
        for broker_id in started:
            node = self.ctx.live_brokers[broker_id]
            self.channel.add_broker(broker_id, node.host, node.port)
        if gone:
            # A bounced broker (registered again: restarted, or its session ended) is gone
            # and started at once. Out of the live brokers while its failure is handled,
            # as Kafka's processBrokerChange does: counted live, it stayed the leader of
            # what it led before (nothing elected), and its clients waited for it to be
            # told so and for their reconnect backoff (kill-leader-zookeeper-down: 18.9 s
            # without an ack on a partition whose two other replicas were in sync).
            bounced = {b: self.ctx.live_brokers.pop(b) for b in gone if b in self.ctx.live_brokers}
            try:
                await self.on_broker_failure(frozenset(gone))
            finally:
                self.ctx.live_brokers.update(bounced)
        if started:
            await self.on_broker_startup(frozenset(started))

    async def on_broker_startup(self, broker_ids: frozenset[int]) -> None:
        """Kafka's onBrokerStartup: UpdateMetadata to every live broker (the new ones get
        everything), LeaderAndIsr to the new brokers for their replicas, and offline
        partitions they can lead elected (LeaderAndIsr to those partitions' replicas)."""
        from trio_broker.cluster.controller import partition_state_machine as psm

        ctx = self.ctx
        for broker_id in broker_ids:
            # A new registration: its log dirs were checked again when it started.
            ctx.replicas_on_offline_dirs.pop(broker_id, None)
            self.fencing.registered(broker_id)
        logger.info(
            "controller epoch %d: brokers started %s, live %s",
            self.epoch,
            sorted(broker_ids),
            sorted(ctx.live_brokers),
        )
        batch = self.batch()
        batch.add_update_metadata(ctx.live_brokers)
        batch.send(self.channel)
        for broker_id in broker_ids:
            for tp in ctx.partitions_on(broker_id):
                if tp[0] not in ctx.topics_being_deleted:
                    batch.add_leader_and_isr([broker_id], *tp)
        # Partitions that never got a state (no replica was alive) and offline ones.
        new = [tp for tp in ctx.partitions() if tp not in ctx.states]
        created = await psm.initialize(ctx, self.zk, new)
        offline = [
            tp
            for tp in ctx.partitions()
            if tp in ctx.states and not ctx.is_replica_online(ctx.states[tp].leader, tp)
        ]
        elected = await psm.elect(
            ctx, self.zk, offline, psm.Election.OFFLINE, unclean_default=self.unclean
        )
        made = set(created)
        for tp in [*created, *elected]:
            batch.add_leader_and_isr(ctx.replicas(*tp), *tp, is_new=tp in made)
        batch.add_update_metadata(ctx.live_brokers)
        batch.send(self.channel)
        from trio_broker.cluster.controller.actions import resume_deletions

        resume_deletions(self, broker_ids)

    async def on_broker_failure(self, broker_ids: frozenset[int]) -> None:
        """Kafka's onBrokerFailure: partitions they led get a leader from the live ISR,
        partitions they followed lose them from the ISR; LeaderAndIsr to the remaining
        replicas, UpdateMetadata of their partitions to all."""
        from trio_broker.cluster.controller import partition_state_machine as psm

        ctx = self.ctx
        logger.info(
            "controller epoch %d: brokers failed %s, live %s",
            self.epoch,
            sorted(broker_ids),
            sorted(ctx.live_brokers),
        )
        affected = [
            tp
            for tp in ctx.partitions()
            if tp in ctx.states
            and (ctx.states[tp].leader in broker_ids or set(ctx.states[tp].isr) & broker_ids)
        ]
        # Kafka's order (onReplicasBecomeOffline): the partitions they led get leaders
        # first, sent in requests of their own, then the others lose them from their
        # ISRs. Clients wait for the first only; each broker applies requests in order,
        # so the second (twice as many partitions, when leaderships are even) no longer
        # delays them, and its elections are written while the brokers apply the first.
        leaderless = [tp for tp in affected if ctx.states[tp].leader in broker_ids]
        followed = [tp for tp in affected if ctx.states[tp].leader not in broker_ids]
        batch = self.batch()
        started = trio.current_time()
        if leaderless:
            for tp in await psm.elect(
                ctx, self.zk, leaderless, psm.Election.OFFLINE, unclean_default=self.unclean
            ):
                batch.add_leader_and_isr(ctx.replicas(*tp), *tp)
            batch.send(self.channel)
        led_at = trio.current_time()
        for tp in await psm.elect(
            ctx, self.zk, followed, psm.Election.OFFLINE, unclean_default=self.unclean
        ):
            batch.add_leader_and_isr(ctx.replicas(*tp), *tp)
        # Every partition with a replica on them: its offline replicas changed.
        batch.add_update_metadata(
            ctx.live_brokers,
            [tp for tp in ctx.partitions() if broker_ids.intersection(ctx.replicas(*tp))],
        )
        batch.send(self.channel)
        logger.info(
            "brokers %s failed: %d partitions they led elected in %.2f s, %d they followed"
            " in %.2f s more",
            sorted(broker_ids),
            len(leaderless),
            led_at - started,
            len(followed),
            trio.current_time() - led_at,
        )

    # --- topics -----------------------------------------------------------------------------

    async def _on_topics(self, children: list[str]) -> None:
        ctx = self.ctx
        current = set(children)
        fresh: list[tuple[str, int]] = []
        for topic in sorted(current - set(ctx.assignments)):
            fresh += await self._read_topic(topic, states=False)
        for topic in set(ctx.assignments) - current:
            # Gone without the controller deleting it (by hand): forget it.
            self.unwatch_topic(topic)
            ctx.remove_topic(topic)
        if fresh:
            await self._on_new_partitions(fresh)

    async def _on_partitions(self, topic: str, data: bytes) -> None:
        ctx = self.ctx
        if topic not in ctx.assignments or topic in ctx.topics_being_deleted:
            return
        try:
            assignment = zk_data.TopicAssignment.decode(data)
        except (ValueError, KeyError, json.JSONDecodeError):
            logger.warning("unreadable assignment of topic %s", topic)
            return
        known = ctx.assignments[topic]
        added = {p: r for p, r in assignment.partitions.items() if p not in known.partitions}
        if not added:
            return
        ctx.assignments[topic] = zk_data.TopicAssignment(
            topic_id=known.topic_id,
            partitions={**known.partitions, **added},
            adding_replicas=known.adding_replicas,
            removing_replicas=known.removing_replicas,
        )
        await self._on_new_partitions([(topic, p) for p in sorted(added)])

    async def _on_new_partitions(self, partitions: list[tuple[str, int]]) -> None:
        """Kafka's onNewPartitionCreation: NewPartition -> OnlinePartition, LeaderAndIsr
        (is_new) to the replicas, UpdateMetadata of the new partitions to everyone."""
        from trio_broker.cluster.controller import partition_state_machine as psm

        ctx = self.ctx
        new = [tp for tp in partitions if tp not in ctx.states]
        created = await psm.initialize(ctx, self.zk, new)
        made = set(created)
        batch = self.batch()
        for tp in partitions:
            if tp in ctx.states:
                batch.add_leader_and_isr(ctx.replicas(*tp), *tp, is_new=tp in made)
        batch.add_update_metadata(ctx.live_brokers, partitions)
        batch.send(self.channel)
        if created:
            logger.info("controller epoch %d: new partitions %s online", self.epoch, created)

    # --- ISR changes from leaders -------------------------------------------------------------

    async def _on_isr_change(self, children: list[str]) -> None:
        """Kafka's IsrChangeNotification: read and delete the notifications, re-read those
        partitions' states, UpdateMetadata of those partitions to every live broker."""
        from kazoo.exceptions import NoNodeError

        from trio_broker.cluster.controller import partition_state_machine as psm

        ctx = self.ctx
        partitions: set[tuple[str, int]] = set()
        paths = [
            f"{zk_data.ISR_CHANGE_NOTIFICATION_PATH}/{child}"
            for child in children
            if child.startswith(zk_data.ISR_CHANGE_PREFIX)
        ]
        # All read, then all deleted, each pipelined (a leader writes one notification per
        # batch of changes, but thousands of changes may be waiting).
        for path, result in zip(paths, await self.zk.get_many(paths), strict=True):
            if isinstance(result, NoNodeError):
                continue
            if isinstance(result, Exception):
                raise result
            try:
                partitions.update(zk_data.decode_isr_change(result[0]))
            except (ValueError, KeyError, json.JSONDecodeError):
                logger.warning("unreadable ISR change notification %s", path)
        for result in await self.zk.delete_many(paths):
            if isinstance(result, Exception) and not isinstance(result, NoNodeError):
                raise result
        if not partitions:
            return
        known = sorted(tp for tp in partitions if tp in ctx.states)
        for tp, state in zip(known, await psm.read_states(self.zk, known), strict=True):
            if state is not None:
                ctx.states[tp] = state
        batch = self.batch()
        batch.add_update_metadata(ctx.live_brokers, known)
        batch.send(self.channel)
        from trio_broker.cluster.controller.reassignment import maybe_complete

        await maybe_complete(self, sorted(partitions))

    # --- failed log dirs (Kafka's LogDirEventNotification, KIP-112) -------------------------

    async def _on_log_dir_events(self, children: list[str]) -> None:
        """Read and delete the notifications; LeaderAndIsr for every replica of each live
        broker named, whose answers say which of them are offline (_on_replica_states)."""
        from kazoo.exceptions import NoNodeError

        ctx = self.ctx
        brokers: set[int] = set()
        for child in children:
            if not child.startswith(zk_data.LOG_DIR_EVENT_PREFIX):
                continue
            path = f"{zk_data.LOG_DIR_EVENT_NOTIFICATION_PATH}/{child}"
            try:
                data, _ = await self.zk.get(path)
                broker_id, event = zk_data.decode_log_dir_event(data)
                if event == zk_data.LOG_DIR_FAILURE:
                    brokers.add(broker_id)
            except NoNodeError:
                continue
            except (ValueError, KeyError, TypeError, json.JSONDecodeError):
                logger.warning("unreadable log dir event notification %s", child)
            try:
                await self.zk.delete(path)
            except NoNodeError:
                pass
        brokers &= set(ctx.live_brokers)
        if not brokers:
            return
        logger.info(
            "controller epoch %d: log dir failure on brokers %s", self.epoch, sorted(brokers)
        )
        batch = self.batch()
        for broker_id in sorted(brokers):
            for tp in ctx.partitions_on(broker_id):
                if tp[0] not in ctx.topics_being_deleted:
                    batch.add_leader_and_isr([broker_id], *tp)
        batch.send(self.channel)

    async def _on_replica_states(
        self, broker_id: int, broker_epoch: int, states: dict[tuple[str, int], bool]
    ) -> None:
        """A broker's LeaderAndIsr answer: its replicas in a failed log dir (True) and
        those online (False). Newly offline ones leave their ISRs, and those they led get
        a leader from the rest of the ISR (Kafka's onReplicasBecomeOffline); then
        UpdateMetadata reports them offline to every broker."""
        from trio_broker.cluster.controller import partition_state_machine as psm

        ctx = self.ctx
        node = ctx.live_brokers.get(broker_id)
        if node is None or node.epoch != broker_epoch:
            return  # an answer from an earlier registration of the broker
        known = ctx.replicas_on_offline_dirs.get(broker_id, set())
        now = {tp for tp in known if not (tp in states and not states[tp])}
        now |= {tp for tp, offline in states.items() if offline and tp in ctx.states}
        new = sorted(now - known)
        back = known - now  # online again (a full dir with room again)
        if now:
            ctx.replicas_on_offline_dirs[broker_id] = now
        else:
            ctx.replicas_on_offline_dirs.pop(broker_id, None)
        if not new:
            if back:
                logger.info(
                    "controller epoch %d: broker %d's replicas of %s are online again",
                    self.epoch,
                    broker_id,
                    ", ".join(f"{t}-{p}" for t, p in sorted(back)),
                )
                batch = self.batch()
                batch.add_update_metadata(ctx.live_brokers)
                batch.send(self.channel)
            return
        logger.warning(
            "controller epoch %d: broker %d's replicas of %s are in a failed log dir",
            self.epoch,
            broker_id,
            ", ".join(f"{t}-{p}" for t, p in new),
        )
        changed = await psm.elect(
            ctx, self.zk, new, psm.Election.OFFLINE, unclean_default=self.unclean
        )
        batch = self.batch()
        for tp in changed:
            batch.add_leader_and_isr([r for r in ctx.replicas(*tp) if r != broker_id], *tp)
        batch.add_update_metadata(ctx.live_brokers)
        batch.send(self.channel)

    # --- requests from handlers (run on the event loop: cluster/controller/actions.py) -----

    async def controlled_shutdown(self, broker_id: int) -> list[tuple[str, int]] | None:
        """Called by the ControlledShutdown handler: the partitions the broker still leads
        (empty: done), or None if this controller could not decide (it is being deposed)."""
        return await self.call(("shutdown", broker_id))

    async def elect_preferred(
        self, partitions: list[tuple[str, int]], unclean: bool = False
    ) -> dict[tuple[str, int], int] | None:
        """Called by the ElectLeaders handler: an error code per partition."""
        return await self.call(("elect", partitions, unclean))

    async def reassign(
        self, wanted: dict[tuple[str, int], list[int] | None]
    ) -> dict[tuple[str, int], tuple[int, str | None]] | None:
        """Called by the AlterPartitionReassignments handler (cluster/controller/reassignment.py)."""
        return await self.call(("reassign", wanted))


def _answer(reply: trio.MemorySendChannel[Any], value: Any) -> None:
    """Answer a waiting caller; one that gave up (its timeout) is not waiting any more."""
    try:
        reply.send_nowait(value)
    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.WouldBlock):
        pass


class ControllerElector:
    """Kafka's controller election, on every broker of the cluster; a broker service."""

    def __init__(self, broker: Broker, zk: ZooKeeperSession) -> None:
        self.broker = broker
        self.zk = zk
        self.node_id = broker.node_id
        self.controller: Controller | None = None  # while this broker is the controller
        # A controller that resigned for want of heartbeats from a majority (fencing.py)
        # does not stand again before this (trio time).
        self.standing_down_until = float("-inf")

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
                        epoch, version = await self._read_epoch()
                        running = await nursery.start(self._run_controller, epoch, version)
                    elif not ours and running is not None:
                        logger.info("/controller is no longer broker %d's", self.node_id)
                        deposed = self.controller
                        running.cancel()
                        running = None
                        if deposed is not None:
                            await self._stand_down_if_unheard(deposed.ctx.epoch_zk_version)
                    if stat is None:
                        wait = self.standing_down_until - trio.current_time()
                        if wait > 0:
                            with trio.move_on_after(wait):
                                await fired.wait()
                            continue
                        await self._try_to_win()
                    await fired.wait()
                    await self.zk.wait_connected()
            finally:
                self.controller = None

    async def _stand_down_if_unheard(self, epoch_zk_version: int) -> None:
        """/controller was deleted under this broker's election: when by a majority's
        votes that it was unheard (cluster/zookeeper/controller_votes.py), it is the one
        cut off (or it was stopped); it stands aside for a session timeout, as a
        controller that resigns (fencing.py), instead of winning again at once."""
        from trio_broker.cluster.zookeeper import controller_votes as cv
        from trio_broker.cluster.zookeeper.membership import registered_brokers

        vote = cv.Vote(self.node_id, epoch_zk_version)
        try:
            votes = await cv.read_votes(self.zk)
            voters = cv.majority_against(votes, vote, await registered_brokers(self.zk))
        except Exception as exc:  # noqa: BLE001 - stands again as before
            logger.debug("broker %d: votes not read: %r", self.node_id, exc)
            return
        if voters:
            session_s = self.broker.config.broker_session_timeout_ms / 1000
            self.standing_down_until = trio.current_time() + session_s
            logger.warning(
                "broker %d: unheard as controller by brokers %s: not standing again for %.1f s",
                self.node_id,
                voters,
                session_s,
            )

    async def _run_controller(
        self, epoch: int, epoch_zk_version: int, *, task_status: trio.TaskStatus[trio.CancelScope]
    ) -> None:
        with trio.CancelScope() as scope:
            self.controller = Controller(self.broker, self.zk, epoch, epoch_zk_version)
            try:
                task_status.started(scope)
                await self.controller.run()
            finally:
                self.controller = None

    async def _read_epoch(self) -> tuple[int, int]:
        """(epoch, version of /controller_epoch): the controller's writes check the version."""
        data, stat = await self.zk.get(zk_data.CONTROLLER_EPOCH_PATH)
        return zk_data.decode_controller_epoch(data), stat.version

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
