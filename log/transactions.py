"""The log's side of transactions: markers, the aborted-transaction index, their replay.

Shared by the append path (`PartitionLog.append_as_leader`) and recovery
(`trio_broker.log.loader.rebuild_producer_state`), so that both build the same producer
state and `.txnindex` from the same batch headers. Only a control batch's one small record
is read; data batches stay opaque.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from trio_broker.log.control_batch import ControlType, control_type
from trio_broker.log.producer_state import CompletedTxn, ProducerAppendInfo, increment_sequence
from trio_broker.log.txn_index import AbortedTxn
from trio_broker.protocol.records import BatchHeader

if TYPE_CHECKING:
    from trio_broker.log.partition_log import PartitionLog
    from trio_broker.log.segment import LogSegment

__all__ = ["aborted_by", "end_txn_marker", "record_completed_txn", "replay_batch"]

logger = logging.getLogger(__name__)


def _coordinator_epoch(batch: bytes | bytearray | memoryview) -> int:
    from trio_broker.protocol.record_codec import iter_records

    for record in iter_records(batch):
        value = record.value
        if value is not None and len(value) >= 6:
            return int.from_bytes(bytes(value[2:6]), "big", signed=True)
    return -1


def end_txn_marker(
    info: ProducerAppendInfo, batch: bytes | bytearray | memoryview, offset: int, validate: bool
) -> CompletedTxn | None:
    """Apply the control batch `batch` (at `offset`) to its producer's pending update."""
    from trio_broker.protocol.records import read_header

    header = read_header(batch)
    kind = control_type(batch)
    if kind is None:
        return None  # a control record that is no transaction marker
    return info.append_end_txn_marker(
        commit=kind == ControlType.COMMIT,
        epoch=header.producer_epoch,
        coordinator_epoch=_coordinator_epoch(batch),
        offset=offset,
        timestamp=header.max_timestamp,
        validate=validate,
    )


def aborted_by(
    log: PartitionLog, updates: Iterable[ProducerAppendInfo], completed: list[CompletedTxn]
) -> list[AbortedTxn]:
    """The `.txnindex` entries of the transactions an append's ABORT markers end, computed
    before the append (the producer states as they will be after it), so that they are
    written with its batches, all or nothing (LogSegment.append)."""
    if not completed:
        return []  # no marker in the append (every produce): nothing to copy or compute
    ongoing = dict(log.producer_state.ongoing)
    for info in updates:
        updated = info.updated
        if updated.current_txn_first_offset >= 0:
            ongoing[updated.producer_id] = updated.current_txn_first_offset
        else:
            ongoing.pop(updated.producer_id, None)
    out = []
    for txn in completed:
        if not txn.is_aborted:
            continue
        # The LSO once it is done: Kafka's ProducerStateManager.lastStableOffset.
        others = [o for p, o in ongoing.items() if p != txn.producer_id]
        out.append(
            AbortedTxn(
                producer_id=txn.producer_id,
                first_offset=txn.first_offset,
                last_offset=txn.last_offset,
                last_stable_offset=min(others) if others else txn.last_offset + 1,
            )
        )
    return out


def record_completed_txn(log: PartitionLog, segment: LogSegment, txn: CompletedTxn) -> None:
    """After the marker is in `segment`: an aborted transaction joins its `.txnindex`."""
    if not txn.is_aborted:
        return
    lso = log.producer_state.last_stable_offset_after(txn)
    segment.txn_index.append(
        AbortedTxn(
            producer_id=txn.producer_id,
            first_offset=txn.first_offset,
            last_offset=txn.last_offset,
            last_stable_offset=lso,
        )
    )


def replay_data_batch(info: ProducerAppendInfo, header: BatchHeader) -> None:
    """A data batch already in the log (a follower's copy, recovery) into a producer's
    state, as it stands: no sequence check."""
    info.append_data_batch(
        epoch=header.producer_epoch,
        first_seq=header.base_sequence,
        last_seq=increment_sequence(header.base_sequence, header.last_offset_delta),
        first_offset=header.base_offset,
        last_offset=header.last_offset,
        timestamp=header.max_timestamp,
        validate=False,
        is_transactional=header.is_transactional,
    )


def replay_batch(
    log: PartitionLog, segment: LogSegment, position: int, header: BatchHeader, index: bool
) -> None:
    """Recovery: apply one batch's header (and a marker's record) to the producer state;
    with `index`, an aborted transaction is appended to the segment's `.txnindex` (being
    rebuilt) unless already there."""
    state = log.producer_state
    info = state.prepare_update(header.producer_id)
    if header.is_control:
        file = segment.file()  # held across the read (recovery runs in threads)
        batch = os.pread(file.fd, header.size, position)
        done = end_txn_marker(info, batch, header.base_offset, validate=False)
        state.update(info)
        if done is not None and index:
            entries = segment.txn_index.entries
            if not entries or entries[-1].last_offset < done.last_offset:
                record_completed_txn(log, segment, done)
        return
    replay_data_batch(info, header)
    state.update(info)
