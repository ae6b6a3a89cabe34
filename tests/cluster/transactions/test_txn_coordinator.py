"""The transaction coordinator on a fake clock: the state machine table, epoch bumps and
fencing, timeouts, and transactional id expiry with tombstones that survive a reload."""

from __future__ import annotations

import pytest

from trio_broker.broker import Broker
from trio_broker.cluster.transactions.transaction_metadata import (
    IllegalTransition,
    TransactionMetadata,
    TransactionState,
)
from trio_broker.config import BrokerConfig
from trio_broker.errors import ErrorCode

S = TransactionState
T0 = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def coordinator(tmp_path):
    config = BrokerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(tmp_path),
            "transaction.state.log.num.partitions": "2",
        }
    )
    broker = Broker(config)
    coordinator = broker.transaction_coordinator
    clock = Clock()
    coordinator.now_ms = coordinator.store.now_ms = clock
    coordinator.clock = clock
    coordinator.running = True  # what run() sets, without its timers
    broker.topics.create_topic("data", 2, 1, {})
    yield coordinator
    broker.log_manager.close()


def test_state_machine_is_a_table():
    meta = TransactionMetadata(transactional_id="t", producer_id=1)
    with pytest.raises(IllegalTransition):
        meta.transition_to(S.PREPARE_COMMIT, 0)  # Empty -> PrepareCommit is not allowed
    meta.transition_to(S.ONGOING, 0)
    meta.transition_to(S.PREPARE_ABORT, 0)
    with pytest.raises(IllegalTransition):
        meta.transition_to(S.COMPLETE_COMMIT, 0)
    meta.transition_to(S.COMPLETE_ABORT, 0)


def test_epochs_fencing_and_timeout(coordinator):
    error, pid, epoch = coordinator.init_producer_id("app", 60000)
    assert (error, epoch) == (ErrorCode.NONE, 0)
    assert coordinator.add_partitions("app", pid, 0, [("data", 0)]) == ErrorCode.NONE
    assert coordinator.txns["app"].state == S.ONGOING

    # A second InitProducerId fences: the open transaction is aborted under epoch 1, and
    # the new producer gets epoch 2; the old epoch can no longer end anything.
    error, pid2, epoch2 = coordinator.init_producer_id("app", 60000)
    assert (error, pid2, epoch2) == (ErrorCode.NONE, pid, 2)
    assert coordinator.end_txn("app", pid, 0, True) == ErrorCode.PRODUCER_FENCED
    data = coordinator.broker.topics.get_log("data", 0)
    assert data.log_end_offset == 1  # the ABORT marker, epoch 1
    assert data.producer_state.last_entry(pid).producer_epoch == 1

    # A transaction open longer than its timeout is aborted when the cleanup runs.
    assert coordinator.add_partitions("app", pid, 2, [("data", 1)]) == ErrorCode.NONE
    coordinator.clock.ms += 59_000
    assert coordinator.abort_timed_out_transactions() == 0
    coordinator.clock.ms += 2_000
    assert coordinator.abort_timed_out_transactions() == 1
    meta = coordinator.txns["app"]
    assert (meta.state, meta.producer_epoch) == (S.COMPLETE_ABORT, 3)
    assert coordinator.end_txn("app", pid, 2, True) == ErrorCode.PRODUCER_FENCED

    # KIP-360: the producer whose transaction timed out resumes with the epoch it had (the
    # one before the bump) and gets the next; a retry gets the same; older is fenced.
    assert coordinator.init_producer_id("app", 60000, pid, 2) == (ErrorCode.NONE, pid, 4)
    assert coordinator.init_producer_id("app", 60000, pid, 3) == (ErrorCode.NONE, pid, 4)
    assert coordinator.init_producer_id("app", 60000, pid, 1)[0] == ErrorCode.PRODUCER_FENCED
    assert coordinator.init_producer_id("app", 60000, pid, 4) == (ErrorCode.NONE, pid, 5)


def test_transactional_ids_expire_with_a_tombstone(coordinator):
    _, pid, epoch = coordinator.init_producer_id("idle", 60000)
    _, other_pid, _ = coordinator.init_producer_id("busy", 60000)
    assert coordinator.add_partitions("idle", pid, epoch, [("data", 0)]) == ErrorCode.NONE
    assert coordinator.end_txn("idle", pid, epoch, True) == ErrorCode.NONE
    coordinator.clock.ms += 6 * 24 * 3600 * 1000
    coordinator.init_producer_id("busy", 60000)  # busy stays fresh
    coordinator.clock.ms += 2 * 24 * 3600 * 1000  # idle: 8 days, over the 7-day default
    assert coordinator.remove_expired_transactional_ids() == 1
    assert set(coordinator.txns) == {"busy"}
    store = coordinator.store
    assert "idle" not in store.read_partition(store.partition_for("idle"))
    assert store.read_partition(store.partition_for("busy"))["busy"].producer_id == other_pid


def test_a_prepared_transaction_left_behind_is_completed_by_the_cleanup(coordinator):
    _, pid, epoch = coordinator.init_producer_id("stuck", 60000)
    assert coordinator.add_partitions("stuck", pid, epoch, [("data", 1)]) == ErrorCode.NONE
    # As if the markers or the Complete record had failed after PrepareCommit was written.
    coordinator._write(coordinator.txns["stuck"], S.PREPARE_COMMIT)
    assert coordinator.end_txn("stuck", pid, epoch, True) == ErrorCode.CONCURRENT_TRANSACTIONS
    coordinator.abort_timed_out_transactions()
    assert coordinator.txns["stuck"].state == S.COMPLETE_COMMIT
    assert coordinator.end_txn("stuck", pid, epoch, True) == ErrorCode.NONE  # a retry: done
    data = coordinator.broker.topics.get_log("data", 1)
    assert data.log_end_offset == 1  # the COMMIT marker
