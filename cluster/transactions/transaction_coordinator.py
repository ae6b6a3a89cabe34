"""TransactionCoordinator: transactional producers' ids, epochs and transactions.

Kafka's TransactionCoordinator for the transactional ids whose `__transaction_state`
partition this broker leads: InitProducerId (allocation, epoch bumps, fencing, aborting a
transaction left open), AddPartitionsToTxn, AddOffsetsToTxn, EndTxn (PrepareCommit or
PrepareAbort written, then the markers, then CompleteCommit or CompleteAbort), the
proactive abort of transactions open longer than their timeout, and the expiry of idle
transactional ids. State lives in `TransactionMetadata` (the state machine is its table);
records and loading in `transaction_records` and `transaction_store`; markers in
`transaction_markers`.

Every change is computed on a copy, written to `__transaction_state`, and only then
installed, so a failed write leaves the state as it was. Everything runs on the Trio thread
and no operation awaits, so each is atomic; on one broker the markers are appended inline
(the partitions are local), which makes EndTxn complete when it answers. A crash between
the Prepare record and the Complete record is finished by `load_partition` after restart.

In a cluster (a replica manager) the handlers answer once the ISR of the state partition
has the write (`apis.txn_errors.after_state_write`), and a prepared transaction's markers
go out in the background (`transaction_marker_channel`): EndTxn answers after the Prepare
record is replicated, and `markers_written` writes the Complete record once every marker
is in its partition's ISR; meanwhile the transactional id answers CONCURRENT_TRANSACTIONS,
as in Kafka. The new leader of a state partition completes what it finds prepared.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from trio_broker.cluster.transactions.markers import write_markers
from trio_broker.cluster.transactions.store import TransactionStore
from trio_broker.cluster.transactions.transaction_metadata import (
    TransactionMetadata,
    TransactionState,
)
from trio_broker.crash_points import crash_point
from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.partition_log import wall_clock_ms

if TYPE_CHECKING:
    from trio_broker.broker import Broker

logger = logging.getLogger(__name__)

__all__ = ["TransactionCoordinator"]

S = TransactionState
NO_PRODUCER_ID = -1
_MARKER_BACKOFF_MIN_S = 0.1
_MARKER_BACKOFF_MAX_S = 5.0
# What a lone broker's partition may answer a marker with that a later attempt can change
# (a full disk, a log dir being recovered): retried. Anything else is final.
_RETRY_MARKER = frozenset(
    {ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT}
)


class TransactionCoordinator:
    """One broker's transaction coordinator; a service started in the broker's nursery."""

    def __init__(self, broker: Broker, *, now_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.broker = broker
        broker.transaction_coordinator = self  # handlers reach it here
        self.config = broker.config
        self.now_ms = now_ms
        self.store = TransactionStore(broker, now_ms=now_ms)
        self.txns: dict[str, TransactionMetadata] = {}
        self.running = False
        # A cluster's markers go out in the background (transaction_marker_channel).
        self.markers: Any = None
        # A lone broker's markers that could not be written yet (a full disk): the prepared
        # transaction's id -> the partitions still without its marker, retried with backoff
        # until written; the transaction stays prepared meanwhile (Kafka's coordinator
        # retries markers until the partitions take them).
        self.pending_markers: dict[str, set[tuple[str, int]]] = {}
        self._marker_backoff_s = _MARKER_BACKOFF_MIN_S
        self._markers_pending = trio.Event()

    # -- lifecycle and the leadership seam -----------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # Partitions not yet loaded answer COORDINATOR_LOAD_IN_PROGRESS meanwhile.
        partitions = self.store.local_partitions()
        self.store.loading.update(partitions)
        try:
            async with trio.open_nursery() as nursery:
                if getattr(self.broker, "replica_manager", None) is not None:
                    from trio_broker.cluster.transactions.marker_channel_manager import (
                        TransactionMarkerChannelManager,
                    )

                    self.markers = TransactionMarkerChannelManager(self)
                    await nursery.start(self.markers.run)
                self.running = True
                task_status.started()
                for partition in partitions:
                    self.load_partition(partition)
                    await trio.sleep(0)  # keep answering while loading
                nursery.start_soon(
                    self._every,
                    self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                    self.abort_timed_out_transactions,
                )
                nursery.start_soon(
                    self._every,
                    self.config.transaction_remove_expired_transaction_cleanup_interval_ms,
                    self.remove_expired_transactional_ids,
                )
                nursery.start_soon(self._retry_markers)
        finally:
            self.running = False
            self.markers = None

    async def _every(self, interval_ms: int, fn: Callable[[], object]) -> None:
        while True:
            await trio.sleep(interval_ms / 1000)
            try:
                fn()
            except Exception:
                logger.exception("transaction coordinator: periodic task failed")

    async def _retry_markers(self) -> None:
        """A lone broker: write the markers a full disk refused, with backoff (0.1 s doubling
        to 5 s, back to 0.1 s once they are all written), until they are; then the Complete
        record. Nothing is completed before its markers are in every partition."""
        while True:
            if not self.pending_markers:
                self._markers_pending = trio.Event()
                await self._markers_pending.wait()
            await trio.sleep(self._marker_backoff_s)
            for txn_id in list(self.pending_markers):
                meta = self.txns.get(txn_id)
                if meta is None or meta.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                    self.pending_markers.pop(txn_id, None)
                    continue
                self._try(lambda m=meta: self._complete(m))
            if self.pending_markers:
                self._marker_backoff_s = min(self._marker_backoff_s * 2, _MARKER_BACKOFF_MAX_S)
            else:
                self._marker_backoff_s = _MARKER_BACKOFF_MIN_S

    def load_partition(self, partition: int) -> None:
        """This broker leads `partition` of `__transaction_state`: load its transactions
        and finish those a crash left between Prepare and Complete."""
        self.store.loading.add(partition)
        found = self.store.read_partition(partition)
        for txn_id, meta in found.items():
            self.txns[txn_id] = meta
        self.store.loading.discard(partition)
        self.store.loaded.add(partition)
        logger.info(
            "loaded %d transactional id(s) from partition %d of __transaction_state",
            len(found),
            partition,
        )
        for meta in found.values():
            if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                logger.info(
                    "completing transaction of %s left in %s",
                    meta.transactional_id,
                    meta.state.kafka_name,
                )
                self._try(lambda m=meta: self._complete(m))

    def unload_partition(self, partition: int) -> None:
        """This broker no longer leads `partition`: forget its transactional ids."""
        self.store.loaded.discard(partition)
        self.store.loading.discard(partition)
        if self.markers is not None:
            self.markers.forget_partition(partition)
        for txn_id in [t for t in self.txns if self.store.partition_for(t) == partition]:
            del self.txns[txn_id]
            self.pending_markers.pop(txn_id, None)

    def _try(self, fn: Callable[[], object]) -> ErrorCode:
        try:
            fn()
        except KafkaError as exc:
            logger.warning("transaction coordinator: %s", exc)
            return ErrorCode(exc.code)
        return ErrorCode.NONE

    # -- checks --------------------------------------------------------------------------

    def _check(self, transactional_id: str | None) -> ErrorCode:
        if not self.running:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        return self.store.check(transactional_id)

    def _lookup(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, TransactionMetadata | None]:
        error = self._check(transactional_id)
        if error:
            return error, None
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if meta.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED, None
        return ErrorCode.NONE, meta

    # -- writing -------------------------------------------------------------------------

    def _write(
        self, meta: TransactionMetadata, state: TransactionState, **changes: object
    ) -> TransactionMetadata:
        """The copy of `meta` in `state` with `changes`, written, then installed."""
        changes.setdefault("partitions", set(meta.partitions))
        new = attrs.evolve(meta, **changes)
        new.transition_to(state, self.now_ms())
        self.store.append(new)
        self.txns[new.transactional_id] = new
        return new

    def _complete(self, meta: TransactionMetadata) -> TransactionMetadata:
        """Markers for a prepared transaction, then its Complete state. In a cluster the
        markers go out in the background and `markers_written` writes the Complete state;
        the prepared `meta` is returned meanwhile."""
        if self.markers is not None:
            self.markers.submit(meta)
            return meta
        commit = meta.state == S.PREPARE_COMMIT
        partition = self.store.partition_for(meta.transactional_id)
        txn_id = meta.transactional_id
        # A retry writes only the markers still missing (a second marker where one was
        # written would be harmless, as after a crash, but is one more control batch).
        todo = self.pending_markers.get(txn_id, set(meta.partitions))
        results = {}
        for tp in sorted(todo):
            if results:
                crash_point("txn.after_first_marker")
            results.update(
                write_markers(
                    self.broker,
                    [tp],
                    producer_id=meta.producer_id,
                    producer_epoch=meta.producer_epoch,
                    coordinator_epoch=self.store.leader_epoch(partition),
                    commit=commit,
                )
            )
        crash_point("txn.before_complete")
        missing = {tp for tp, code in results.items() if code in _RETRY_MARKER}
        for tp, code in results.items():
            if code not in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                logger.warning(
                    "marker of %r for %s-%d failed: %s%s",
                    txn_id,
                    tp[0],
                    tp[1],
                    ErrorCode(code).name,
                    "; retried" if tp in missing else "",
                )
        if missing:
            # Stays prepared (EndTxn has answered: the decision is durable in
            # __transaction_state); the id answers CONCURRENT_TRANSACTIONS until complete.
            self.pending_markers[txn_id] = missing
            self._markers_pending.set()
            return meta
        # Every marker is written: what is left is the Complete record, retried likewise
        # if `__transaction_state` refuses it too.
        self.pending_markers[txn_id] = set()
        self._markers_pending.set()
        try:
            done = self._write(
                meta, S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT, partitions=set()
            )
        except KafkaError as exc:
            logger.warning("Complete record of %r not written (%s); retried", txn_id, exc)
            return meta
        self.pending_markers.pop(txn_id, None)
        return done

    def markers_written(self, meta: TransactionMetadata) -> None:
        """A cluster: every marker of the prepared `meta` is acknowledged by its ISR."""
        if self.txns.get(meta.transactional_id) is not meta:
            return  # moved on (or away) meanwhile
        commit = meta.state == S.PREPARE_COMMIT
        crash_point("txn.before_complete")
        if self._try(
            lambda: self._write(
                meta, S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT, partitions=set()
            )
        ):
            return  # still prepared: the periodic check sends the markers again
        logger.debug("transaction of %s completed", meta.transactional_id)

    def _end(self, meta: TransactionMetadata, commit: bool) -> TransactionMetadata:
        prepared = self._write(meta, S.PREPARE_COMMIT if commit else S.PREPARE_ABORT)
        crash_point("txn.after_prepare")
        return self._complete(prepared)

    def _fence_and_abort(self, meta: TransactionMetadata) -> TransactionMetadata:
        """Abort an open transaction under a bumped epoch (Kafka's PrepareEpochFence): the
        producer that opened it can no longer write, add or commit."""
        epoch = meta.producer_epoch
        fenced = attrs.evolve(meta, partitions=set(meta.partitions))
        if not meta.epoch_exhausted():
            fenced.producer_epoch = epoch + 1
            fenced.last_producer_epoch = epoch
        fenced.transition_to(S.PREPARE_EPOCH_FENCE, self.now_ms())  # in memory only
        return self._end(fenced, commit=False)

    # -- InitProducerId ------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        txn_timeout_ms: int,
        expected_producer_id: int = NO_PRODUCER_ID,
        expected_epoch: int = -1,
    ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for a transactional producer."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, -1, -1
        if not 0 < txn_timeout_ms <= self.config.transaction_max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        if self.running:
            try:
                self.store.ensure_topic()
            except KafkaError as exc:
                return ErrorCode(exc.code), -1, -1
        error = self._check(transactional_id)
        if error:
            return error, -1, -1
        meta = self.txns.get(transactional_id)
        now = self.now_ms()
        if meta is None:
            meta = TransactionMetadata(
                transactional_id=transactional_id,
                producer_id=self.broker.producer_ids.next_id(),
                txn_timeout_ms=txn_timeout_ms,
                txn_last_update_timestamp_ms=now,
            )
        elif expected_producer_id >= 0:
            # KIP-360: a producer resuming with its current id and epoch, or with the pair
            # before the last bump (its retry, or a timeout abort that bumped the epoch
            # under it); anything else is a zombie. A retry of a bump that already happened
            # gets the current pair back.
            current = (meta.producer_id, meta.producer_epoch)
            previous = (
                meta.last_producer_id if meta.last_producer_id >= 0 else meta.producer_id,
                meta.last_producer_epoch,
            )
            asked = (expected_producer_id, expected_epoch)
            if asked not in (current, previous):
                return ErrorCode.PRODUCER_FENCED, -1, -1
            if asked == previous and meta.state == S.EMPTY:
                return ErrorCode.NONE, meta.producer_id, meta.producer_epoch
        try:
            if meta.is_preparing:
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
            if meta.state == S.ONGOING:
                logger.info(
                    "InitProducerId for %s aborts its ongoing transaction", transactional_id
                )
                meta = self._fence_and_abort(meta)
                if meta.is_preparing:
                    # A cluster: the abort completes in the background; the producer
                    # retries (Kafka answers CONCURRENT_TRANSACTIONS here too).
                    return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
            if meta.epoch_exhausted():
                changes = {
                    "last_producer_id": meta.producer_id,
                    "producer_id": self.broker.producer_ids.next_id(),
                    "last_producer_epoch": meta.producer_epoch,
                    "producer_epoch": 0,
                }
            else:
                changes = {
                    "last_producer_id": -1,
                    "last_producer_epoch": meta.producer_epoch,
                    "producer_epoch": meta.producer_epoch + 1,
                }
            meta = self._write(
                meta,
                S.EMPTY,
                txn_timeout_ms=txn_timeout_ms,
                partitions=set(),
                txn_start_timestamp_ms=-1,
                **changes,
            )
        except KafkaError as exc:
            return ErrorCode(exc.code), -1, -1
        logger.info(
            "transactional id %s: producer id %d epoch %d",
            transactional_id,
            meta.producer_id,
            meta.producer_epoch,
        )
        return ErrorCode.NONE, meta.producer_id, meta.producer_epoch

    # -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[tuple[str, int]],
    ) -> ErrorCode:
        error, meta = self._lookup(transactional_id, producer_id, producer_epoch)
        if error:
            return error
        assert meta is not None
        if meta.is_preparing:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        wanted = set(partitions)
        if meta.state == S.ONGOING and wanted <= meta.partitions:
            return ErrorCode.NONE
        start = meta.txn_start_timestamp_ms if meta.state == S.ONGOING else self.now_ms()
        try:
            self._write(
                meta,
                S.ONGOING,
                partitions=meta.partitions | wanted,
                txn_start_timestamp_ms=start,
            )
        except KafkaError as exc:
            return ErrorCode(exc.code)
        return ErrorCode.NONE

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode] | ErrorCode:
        """AddPartitionsToTxn's verify-only form (KIP-890): which partitions are in the
        producer's ongoing transaction. An ErrorCode alone for the whole transaction."""
        error, meta = self._lookup(transactional_id, producer_id, producer_epoch)
        if error:
            return error
        assert meta is not None
        return {
            tp: ErrorCode.NONE
            if meta.state == S.ONGOING and tp in meta.partitions
            else ErrorCode.INVALID_TXN_STATE
            for tp in partitions
        }

    def verify_produce(
        self,
        transactional_id: str | None,
        producer_id: int,
        producer_epoch: int,
        tp: tuple[str, int],
    ) -> ErrorCode | None:
        """Is a transactional batch for `tp` part of its producer's ongoing transaction?
        The codes are what Kafka's partition leader answers after asking the coordinator
        (AddPartitionsToTxn verify_only, with PRODUCER_FENCED as INVALID_PRODUCER_EPOCH).
        None when this broker does not coordinate the id: in a cluster the leader then asks
        the remote coordinator (`txn_verification`)."""
        if not self.running or self.store.check(transactional_id or "") != ErrorCode.NONE:
            return None
        if self.markers is not None and not self.store.topic_exists():
            return None  # a cluster whose metadata has no state topic yet: ask the coordinator
        meta = self.txns.get(transactional_id or "")
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch != meta.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if meta.state != S.ONGOING or tp not in meta.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    # -- EndTxn --------------------------------------------------------------------------

    def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        error, meta = self._lookup(transactional_id, producer_id, producer_epoch)
        if error:
            return error
        assert meta is not None
        state = meta.state
        if state == S.ONGOING:
            try:
                self._end(meta, commit)
            except KafkaError as exc:
                return ErrorCode(exc.code)
            return ErrorCode.NONE
        if state == (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT):
            return ErrorCode.NONE  # a retry of what is done
        if state == (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.INVALID_TXN_STATE

    # -- timeouts and expiry -------------------------------------------------------------

    def abort_timed_out_transactions(self) -> int:
        """Abort (under a bumped epoch) every transaction open longer than its timeout, and
        retry the completion of prepared ones whose markers or Complete record failed."""
        for meta in [
            m for m in self.txns.values() if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)
        ]:
            self._try(lambda m=meta: self._complete(m))
        now = self.now_ms()
        doomed = [
            m
            for m in self.txns.values()
            if m.state == S.ONGOING and m.txn_start_timestamp_ms + m.txn_timeout_ms < now
        ]
        for meta in doomed:
            logger.info(
                "aborting transaction of %s (producer %d epoch %d): open longer than %d ms",
                meta.transactional_id,
                meta.producer_id,
                meta.producer_epoch,
                meta.txn_timeout_ms,
            )
            self._try(lambda m=meta: self._fence_and_abort(m))
        return len(doomed)

    def remove_expired_transactional_ids(self) -> int:
        """Tombstone the ids idle for `transactional.id.expiration.ms` (Kafka's rule)."""
        now = self.now_ms()
        limit = self.config.transactional_id_expiration_ms
        doomed = [
            m
            for m in self.txns.values()
            if m.is_complete and now - m.txn_last_update_timestamp_ms >= limit
        ]
        for meta in doomed:
            dead = attrs.evolve(meta, partitions=set())
            dead.transition_to(S.DEAD, now)
            if self._try(lambda d=dead: self.store.append(d, tombstone=True)) == ErrorCode.NONE:
                del self.txns[meta.transactional_id]
                logger.info("transactional id %s expired", meta.transactional_id)
        return len(doomed)

    # -- admin ---------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        error = self._check(transactional_id)
        if error:
            return error, None
        meta = self.txns.get(transactional_id)
        if meta is None:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        return ErrorCode.NONE, meta

    def list(self) -> list[TransactionMetadata]:
        return list(self.txns.values())
