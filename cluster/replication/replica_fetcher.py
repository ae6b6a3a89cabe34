"""Replica fetchers: followers copy their leaders' logs (Kafka's ReplicaFetcherThread).

    ReplicaFetcherManager.run                     a nursery of fetcher tasks
    └── ReplicaFetcher (source broker, index)     num.replica.fetchers per source broker;
                                                  a partition goes to hash(tp) % n
          1. truncate: OffsetForLeaderEpoch for the partitions that start following, and
             truncate each log where it diverges from the leader's (never just to the HW)
          2. fetch: Fetch with replica_id = this broker, the leader's batches appended
             unchanged (PartitionLog.append_as_follower), follower HW = min(leader HW, LEO)

Each fetcher task owns its own NetworkClient, so several fetchers to one leader use
several connections (a broker answers one request per connection at a time). A partition
is fetched under the `FetchState` it was added with; a response that arrives after the
partition was removed or re-added (a new leader epoch) is dropped, so nothing is appended
for a leader this broker no longer follows.
"""

from __future__ import annotations

import logging
import math
import zlib
from typing import TYPE_CHECKING, Any

import attrs
import trio

from trio_broker.cluster.replication.fetch_session import FetchSessionHandler
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

if TYPE_CHECKING:
    from trio_broker.cluster.replication.partition import Partition
    from trio_broker.cluster.replication.replica_manager import ReplicaManager

logger = logging.getLogger(__name__)

__all__ = ["FetchState", "ReplicaFetcher", "ReplicaFetcherManager"]

TopicPartition = tuple[str, int]
# Fetch v12: topic names (no ids needed), replica_id in the body, last_fetched_epoch.
FETCH_VERSION = 12
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
# Top-level answers about the fetch session itself: fetch again at once, in full.
_SESSION_ERRORS = (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH)


@attrs.define(eq=False)
class FetchState:
    partition: Partition
    leader_epoch: int
    fetch_offset: int
    truncating: bool = True
    backoff_until: float = -math.inf
    # Set when handling this partition raised something unexpected (a bug, not an error
    # code): it is fetched no more until LeaderAndIsr adds it again (Kafka's failed
    # partitions), so one bad partition cannot stop the others or the broker.
    failed: bool = False
    # How far behind the leader's high watermark the last fetch left this replica (None:
    # not fetched yet). In sync at 0: a replication throttle holds back only a replica
    # that is not (Kafka's PartitionFetchState.isReplicaInSync).
    lag: int | None = None


class ReplicaFetcher:
    """Fetches the partitions this broker follows on one source broker."""

    def __init__(self, manager: ReplicaFetcherManager, source: int, index: int) -> None:
        self.manager = manager
        self.source = source
        self.index = index
        self.partitions: dict[TopicPartition, FetchState] = {}
        self._changed = trio.Event()
        self.scope = trio.CancelScope()
        self.fetches = 0
        self.bytes_appended = 0
        # The fetch session with the leader (one per fetcher: one per connection).
        self.session = FetchSessionHandler()

    def __repr__(self) -> str:
        return f"<ReplicaFetcher {self.source}-{self.index} {len(self.partitions)} partitions>"

    def add(self, state: FetchState) -> None:
        self.partitions[state.partition.key] = state
        self._changed.set()

    def remove(self, key: TopicPartition) -> FetchState | None:
        return self.partitions.pop(key, None)

    def _current(self, key: TopicPartition, state: FetchState) -> bool:
        return self.partitions.get(key) is state

    async def run(self) -> None:
        from trio_broker.client.network_client import NetworkClient
        from trio_broker.security.inter_broker import inter_broker_client_config

        rm = self.manager.replica_manager
        config = rm.broker.config
        client_config = inter_broker_client_config(
            config,
            bootstrap_servers=("127.0.0.1:9",),
            client_id=f"broker-{rm.node_id}-fetcher-{self.source}-{self.index}",
            request_timeout_ms=config.replica_socket_timeout_ms + config.replica_fetch_wait_max_ms,
        )
        backoff = config.replica_fetch_backoff_ms / 1000
        with self.scope:
            async with NetworkClient(client_config) as client:
                while True:
                    if all(s.failed for s in self.partitions.values()):
                        self._changed = trio.Event()
                        await self._changed.wait()
                        continue
                    address = self.manager.address_of(self.source)
                    if address is None:
                        await trio.sleep(backoff)
                        continue
                    client.set_nodes({self.source: address})
                    states = self.partitions.values()
                    try:
                        if any(s.truncating and not s.failed for s in states):
                            await self._truncate(client)
                        if any(not (s.truncating or s.failed) for s in states):
                            await self._fetch(client)
                        else:
                            await trio.sleep(min(backoff, 0.1))
                    except KafkaError as exc:
                        logger.info(
                            "replica fetcher %s-%s: %s; retrying in %s s",
                            self.source,
                            self.index,
                            exc,
                            backoff,
                        )
                        await trio.sleep(backoff)
                    except Exception:
                        # Not an error code: a bug, or an answer we cannot read. The
                        # fetcher goes on (Kafka's keeps running and backs off).
                        logger.exception(
                            "replica fetcher %s-%s failed; retrying in %s s",
                            self.source,
                            self.index,
                            backoff,
                        )
                        await trio.sleep(backoff)

    # -- truncation ------------------------------------------------------------------------

    async def _truncate(self, client: Any) -> None:
        from trio_broker.protocol._generated.offset_for_leader_epoch_request import (
            OffsetForLeaderEpochRequest,
            OffsetForLeaderPartition,
            OffsetForLeaderTopic,
        )

        rm = self.manager.replica_manager
        todo = {k: s for k, s in self.partitions.items() if s.truncating and not s.failed}
        no_epoch = []
        by_topic: dict[str, list[Any]] = {}
        for (topic, p), state in todo.items():
            log = state.partition.log
            latest = log.latest_epoch()
            if latest is None:
                no_epoch.append(((topic, p), state))
                continue
            by_topic.setdefault(topic, []).append(
                OffsetForLeaderPartition(
                    partition=p, current_leader_epoch=state.leader_epoch, leader_epoch=latest
                )
            )
        for key, state in no_epoch:
            # A log with no epoch: empty (nothing to truncate), or written before epochs
            # existed, where Kafka's fallback is the high watermark.
            self._isolated(key, state, self._truncate_to_high_watermark, key, state)
        if not by_topic:
            return
        request = OffsetForLeaderEpochRequest(
            replica_id=rm.node_id,
            topics=[OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in by_topic.items()],
        )
        response = await client.send(self.source, request, OFFSET_FOR_LEADER_EPOCH_VERSION)
        for topic_result in response.topics:
            for result in topic_result.partitions:
                key = (topic_result.topic, result.partition)
                state = todo.get(key)
                if state is None or not self._current(key, state):
                    continue
                if result.error_code:
                    self._partition_error(key, state, result.error_code, "OffsetForLeaderEpoch")
                    continue
                self._isolated(
                    key,
                    state,
                    self._truncate_partition,
                    key,
                    state,
                    result.leader_epoch,
                    result.end_offset,
                )

    def _isolated(self, key: TopicPartition, state: FetchState, fn: Any, *args: Any) -> None:
        """`fn(*args)` for one partition; what it raises besides an error code marks that
        partition failed instead of stopping the fetcher (Kafka's markPartitionFailed)."""
        try:
            fn(*args)
        except KafkaError as exc:
            logger.error("follower of %s-%s: %s", key[0], key[1], exc)
            state.backoff_until = trio.current_time() + 1
        except Exception:
            logger.exception(
                "follower of %s-%s: failed; not fetched again until the controller's next "
                "LeaderAndIsr for it",
                key[0],
                key[1],
            )
            state.failed = True

    def _truncate_to_high_watermark(self, key: TopicPartition, state: FetchState) -> None:
        log = state.partition.log
        if log.log_end_offset > 0:
            log.truncate_to(log.high_watermark)
        self._done_truncating(key, state)

    def _truncate_partition(
        self, key: TopicPartition, state: FetchState, leader_epoch: int, end_offset: int
    ) -> None:
        """Kafka's getOffsetTruncationState, with the leader's answer for our latest epoch."""
        log = state.partition.log
        leo = log.log_end_offset
        if end_offset == UNDEFINED_EPOCH_OFFSET:
            # The leader knows no epoch at or below ours: only the HW is known to be safe.
            target, done = min(log.high_watermark, leo), True
        elif leader_epoch == UNDEFINED_EPOCH:
            target, done = min(end_offset, leo), True
        else:
            follower_epoch, follower_end = log.end_offset_for_epoch(leader_epoch)
            if follower_epoch == UNDEFINED_EPOCH:
                target, done = min(end_offset, leo), True
            elif follower_epoch != leader_epoch:
                # We do not have the leader's epoch: cut back to the end of the largest
                # epoch below it, and ask again with that one.
                target, done = min(follower_end, leo), False
            else:
                target, done = min(end_offset, follower_end, leo), True
        if target < leo:
            logger.info(
                "follower %s of %s-%s: truncating from %s to %s (leader epoch %s ends at %s)",
                self.manager.replica_manager.node_id,
                key[0],
                key[1],
                leo,
                target,
                leader_epoch,
                end_offset,
            )
            log.truncate_to(target)
        if done or target >= leo:
            self._done_truncating(key, state)

    def _done_truncating(self, key: TopicPartition, state: FetchState) -> None:
        state.truncating = False
        state.fetch_offset = state.partition.log.log_end_offset

    # -- fetch -----------------------------------------------------------------------------

    async def _fetch(self, client: Any) -> None:
        """One fetch in this fetcher's session with its leader (KIP-227): the first (and
        any after the leader lost the session) names every partition; later ones only
        those whose fetch data changed, and the leader answers only partitions with news,
        while it still counts every partition of the session as fetched (its ISR)."""
        from trio_broker.protocol._generated.fetch_request import (
            FetchPartition,
            FetchRequest,
            FetchTopic,
            ForgottenTopic,
        )

        rm = self.manager.replica_manager
        config = rm.broker.config
        now = trio.current_time()
        states: dict[TopicPartition, FetchState] = {}
        wanted: dict[TopicPartition, tuple[int, int, int, int]] = {}
        quota = rm.quotas.follower
        throttled = 0
        for key, state in self.partitions.items():
            if state.truncating or state.failed or state.backoff_until > now:
                continue
            if state.lag != 0 and quota.is_throttled(*key) and quota.is_exceeded():
                throttled += 1  # out of sync and over the follower's quota: not now
                continue
            log = state.partition.log
            latest = log.latest_epoch()
            states[key] = state
            # What the leader must know of this partition; a change is sent (Kafka's
            # FetchRequest.PartitionData equality, max bytes being the same for all).
            wanted[key] = (
                state.fetch_offset,
                log.log_start_offset,
                state.leader_epoch,
                -1 if latest is None else latest,
            )
        if not wanted:
            await trio.sleep(max(min(quota.delay(), 0.1), 0.01) if throttled else 0.05)
            return
        built = self.session.build(wanted)
        max_bytes = config.replica_fetch_max_bytes
        by_topic: dict[str, list[Any]] = {}
        for (topic, index), (offset, log_start, epoch, last_epoch) in built.to_send.items():
            by_topic.setdefault(topic, []).append(
                FetchPartition(
                    partition=index,
                    current_leader_epoch=epoch,
                    fetch_offset=offset,
                    last_fetched_epoch=last_epoch,
                    log_start_offset=log_start,
                    partition_max_bytes=max_bytes,
                )
            )
        forgotten: dict[str, list[int]] = {}
        for topic, index in built.forgotten:
            forgotten.setdefault(topic, []).append(index)
        request = FetchRequest(
            replica_id=rm.node_id,
            max_wait_ms=config.replica_fetch_wait_max_ms,
            min_bytes=config.replica_fetch_min_bytes,
            max_bytes=config.replica_fetch_response_max_bytes,
            isolation_level=0,
            session_id=built.session_id,
            session_epoch=built.epoch,
            topics=[FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()],
            forgotten_topics_data=[
                ForgottenTopic(topic=t, partitions=ps) for t, ps in forgotten.items()
            ],
        )
        try:
            response = await client.send(self.source, request, FETCH_VERSION)
        except BaseException:
            self.session.handle_error()
            raise
        self.fetches += 1
        self.manager.fetches += 1
        if not self.session.handle_response(response.error_code, response.session_id):
            if response.error_code in _SESSION_ERRORS:
                # The leader lost our session (restarted, evicted it) or we lost count:
                # the next fetch, at once, is a full one (Kafka's fetcher does not back
                # off for these).
                logger.info(
                    "replica fetcher %s-%s: %s for session %s epoch %s; fetching in full",
                    self.source,
                    self.index,
                    ErrorCode(response.error_code).name,
                    built.session_id,
                    built.epoch,
                )
                return
            raise KafkaError(ErrorCode(response.error_code), "fetch from the leader failed")
        if built.full:
            logger.info(
                "follower %s: full fetch of %d partitions from broker %s (fetcher %s); %s",
                rm.node_id,
                len(built.to_send),
                self.source,
                self.index,
                f"fetch session {response.session_id}"
                if response.session_id
                else "no fetch session (the leader keeps no more)",
            )
        for topic in response.responses:
            for data in topic.partitions:
                key = (topic.topic, data.partition_index)
                state = states.get(key)
                if state is None or not self._current(key, state):
                    continue  # removed, or re-added for a newer epoch, while in flight
                if state.fetch_offset != wanted[key][0]:
                    continue  # moved since the request: this answer is for another offset
                if data.error_code:
                    self._isolated(
                        key,
                        state,
                        self._partition_error,
                        key,
                        state,
                        data.error_code,
                        "Fetch",
                        data,
                    )
                    continue
                self._isolated(key, state, self._process, key, state, data)
                if data.records and quota.is_throttled(*key):
                    # In sync or not, so that the total keeps to the rate.
                    quota.record(len(data.records))

    def _process(self, key: TopicPartition, state: FetchState, data: Any) -> None:
        from trio_broker.protocol.records import HEADER_SIZE, InvalidRecords, read_header

        partition = state.partition
        log = partition.log
        records = data.records
        if records is not None and len(records):
            if state.fetch_offset != log.log_end_offset:
                # Our log moved under us (it cannot while we own it): start over.
                state.truncating = True
                return
            first = read_header(records) if len(records) >= HEADER_SIZE else None
            if first is not None and first.base_offset < log.log_end_offset <= first.last_offset:
                if log.size_in_bytes == 0:
                    # An empty log that starts inside the leader's first batch (the leader's
                    # log start moved mid-batch: DeleteRecords, retention): start at the
                    # batch instead, as Kafka's fetcher does on UnexpectedAppendOffset.
                    log.truncate_fully_and_start_at(first.base_offset)
                else:
                    # Our log ends inside one of the leader's batches, so what we hold from
                    # that batch's base on is not the leader's (committed data has the
                    # leader's batch boundaries): drop it and take the leader's batch.
                    logger.warning(
                        "follower of %s-%s: log end %s falls inside the leader's batch "
                        "[%s, %s]; truncating to %s",
                        key[0],
                        key[1],
                        log.log_end_offset,
                        first.base_offset,
                        first.last_offset,
                        first.base_offset,
                    )
                    if first.base_offset <= log.log_start_offset:
                        log.truncate_fully_and_start_at(first.base_offset)
                    else:
                        log.truncate_to(first.base_offset)
                    # Fetch again from where the log now ends (a whole batch of ours
                    # may have gone with it).
                    state.fetch_offset = log.log_end_offset
                    return
            try:
                result = log.append_as_follower(records)
            except InvalidRecords as exc:
                logger.error(
                    "follower of %s-%s: bad batches from leader %s: %s",
                    key[0],
                    key[1],
                    self.source,
                    exc,
                )
                state.backoff_until = trio.current_time() + 1
                return
            except KafkaError as exc:
                logger.error("follower of %s-%s: append failed: %s", key[0], key[1], exc)
                state.backoff_until = trio.current_time() + 1
                return
            if result.flush_needed:
                self.manager.replica_manager.broker.schedule_flush(log)
            self.bytes_appended += len(records)
            self.manager.bytes_appended += len(records)
        state.fetch_offset = log.log_end_offset
        state.lag = max(data.high_watermark - log.log_end_offset, 0)
        high_watermark = min(data.high_watermark, log.log_end_offset)
        if high_watermark != log.high_watermark:
            log.high_watermark = high_watermark
            # Consumers reading this follower (KIP-392) wait on its high watermark.
            self.manager.replica_manager.broker.fetch_purgatory.wake((key,))
        if data.log_start_offset > log.log_start_offset:
            try:
                log.delete_records_before(min(data.log_start_offset, log.high_watermark))
            except KafkaError:
                pass

    def _partition_error(
        self, key: TopicPartition, state: FetchState, code: int, what: str, data: Any = None
    ) -> None:
        code = ErrorCode(code)
        log = state.partition.log
        if code == ErrorCode.OFFSET_OUT_OF_RANGE and data is not None:
            leader_start = data.log_start_offset
            if leader_start > log.log_end_offset:
                # Everything we have is below the leader's log start: start over there.
                logger.info(
                    "follower of %s-%s: log end %s is below the leader's log start %s",
                    key[0],
                    key[1],
                    log.log_end_offset,
                    leader_start,
                )
                log.truncate_fully_and_start_at(leader_start)
                state.fetch_offset = leader_start
                return
            state.truncating = True  # ahead of the leader: find where we diverge
            return
        if code in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER):
            logger.info(
                "follower of %s-%s: %s from broker %s for epoch %s; waiting for the controller",
                key[0],
                key[1],
                code.name,
                self.source,
                state.leader_epoch,
            )
        state.backoff_until = (
            trio.current_time()
            + self.manager.replica_manager.broker.config.replica_fetch_backoff_ms / 1000
        )


class ReplicaFetcherManager:
    """The fetchers of this broker, by (source broker, index) (Kafka's
    AbstractFetcherManager); fetchers with no partitions left stop."""

    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.replica_manager = replica_manager
        self.num_fetchers = replica_manager.broker.config.num_replica_fetchers
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self.by_partition: dict[TopicPartition, ReplicaFetcher] = {}
        # Addresses of leaders named in LeaderAndIsr (live_leaders), beside the metadata's.
        self.leader_addresses: dict[int, tuple[str, int]] = {}
        self._nursery: trio.Nursery | None = None
        self.fetches = 0  # fetch requests answered, over all fetchers
        self.bytes_appended = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def address_of(self, broker_id: int) -> tuple[str, int] | None:
        node = self.replica_manager.broker.metadata.brokers.get(broker_id)
        if node is not None:
            return (node.host, node.port)
        return self.leader_addresses.get(broker_id)

    def _index(self, key: TopicPartition) -> int:
        return zlib.crc32(f"{key[0]}-{key[1]}".encode()) % self.num_fetchers

    def add_partition(self, partition: Partition) -> FetchState:
        """Fetch `partition` from its leader, starting with truncation."""
        self.remove_partition(partition.key)
        state = FetchState(
            partition=partition,
            leader_epoch=partition.leader_epoch,
            fetch_offset=partition.log.log_end_offset,
        )
        slot = (partition.leader_id, self._index(partition.key))
        fetcher = self.fetchers.get(slot)
        if fetcher is None:
            fetcher = self.fetchers[slot] = ReplicaFetcher(self, *slot)
            assert self._nursery is not None, "the fetcher manager is not running"
            self._nursery.start_soon(self._run_fetcher, slot, fetcher)
        fetcher.add(state)
        self.by_partition[partition.key] = fetcher
        return state

    async def _run_fetcher(self, slot: tuple[int, int], fetcher: ReplicaFetcher) -> None:
        try:
            await fetcher.run()
        finally:
            if self.fetchers.get(slot) is fetcher:
                del self.fetchers[slot]

    def remove_partition(self, key: TopicPartition) -> None:
        fetcher = self.by_partition.pop(key, None)
        if fetcher is None:
            return
        fetcher.remove(key)
        if not fetcher.partitions:
            fetcher.scope.cancel()
            slot = (fetcher.source, fetcher.index)
            if self.fetchers.get(slot) is fetcher:
                del self.fetchers[slot]

    def fetch_state(self, key: TopicPartition) -> FetchState | None:
        fetcher = self.by_partition.get(key)
        return fetcher.partitions.get(key) if fetcher is not None else None
