"""A transactional id's state: producer id and epoch, partitions, and the state machine.

Kafka's TransactionMetadata, as data. `VALID_PREVIOUS` is the state machine: a transaction
moves to a state only from one listed for it (Kafka 3.x's `TransactionState`). The numeric
ids are those `__transaction_state` records carry (TransactionLogValue.TransactionStatus).
"""

from __future__ import annotations

import enum

import attrs

__all__ = ["VALID_PREVIOUS", "TransactionMetadata", "TransactionState"]


class TransactionState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's admin APIs use (DescribeTransactions, ListTransactions)."""
        return _NAMES[self]


_S = TransactionState
_NAMES = {
    _S.EMPTY: "Empty",
    _S.ONGOING: "Ongoing",
    _S.PREPARE_COMMIT: "PrepareCommit",
    _S.PREPARE_ABORT: "PrepareAbort",
    _S.COMPLETE_COMMIT: "CompleteCommit",
    _S.COMPLETE_ABORT: "CompleteAbort",
    _S.DEAD: "Dead",
    _S.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
BY_NAME = {name: state for state, name in _NAMES.items()}

VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}

# Epochs are int16; at this one the next bump takes a new producer id (Kafka's rule).
MAX_EPOCH = 32767


class IllegalTransition(RuntimeError):
    """A transition the table does not allow: a bug in the coordinator, never the client's."""


@attrs.define(kw_only=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int = -1
    last_producer_id: int = -1
    last_producer_epoch: int = -1
    txn_timeout_ms: int = 60000
    state: TransactionState = _S.EMPTY
    partitions: set[tuple[str, int]] = attrs.Factory(set)
    txn_start_timestamp_ms: int = -1
    txn_last_update_timestamp_ms: int = -1

    def transition_to(self, state: TransactionState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(
                f"transaction {self.transactional_id}: {self.state.kafka_name} -> "
                f"{state.kafka_name} is not a valid transition"
            )
        self.state = state
        self.txn_last_update_timestamp_ms = now_ms

    @property
    def is_complete(self) -> bool:
        return self.state in (_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT)

    @property
    def is_preparing(self) -> bool:
        return self.state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT, _S.PREPARE_EPOCH_FENCE)

    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= MAX_EPOCH - 1
