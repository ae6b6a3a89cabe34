"""The log's side of transactions, on a PartitionLog: ongoing transactions and the LSO
(across a snapshot and a restart), markers and their checks, the .txnindex through
truncation, retention and compaction."""

from __future__ import annotations

import os

import pytest

from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.cleaner import clean_log
from trio_broker.log.config import LogConfig
from trio_broker.log.control_batch import ControlType, build_marker_batch, control_type
from trio_broker.log.loader import load_log
from trio_broker.protocol.record_codec import build_batch, iter_records
from trio_broker.protocol.records import iter_batches

T0 = 1_700_000_000_000
PID = 7000


def _append(log, data: bytes, **kwargs):
    buf = bytearray(data)
    headers = [h for _, h in iter_batches(buf)]
    result = log.append_as_leader(buf, headers, leader_epoch=0, **kwargs)
    log.high_watermark = log.log_end_offset
    return result


def txn_batch(n: int, seq: int, *, pid: int = PID, epoch: int = 0, key: bytes = b"k") -> bytes:
    records = [(key + b"%d" % i, b"v%d" % (seq + i), (), T0) for i in range(n)]
    return build_batch(
        records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True
    )


def marker(commit: bool, *, pid: int = PID, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return build_marker_batch(
        producer_id=pid,
        producer_epoch=epoch,
        coordinator_epoch=coordinator_epoch,
        control=ControlType.COMMIT if commit else ControlType.ABORT,
        timestamp_ms=T0,
    )


def plain(n: int = 1) -> bytes:
    return build_batch([(b"p%d" % i, b"x", (), T0) for i in range(n)])


def _open(path, config: LogConfig | None = None, **kwargs):
    return load_log(path / "t-0", "t", 0, config or LogConfig(), now_ms=lambda: T0, **kwargs)


def test_marker_batch_is_kafkas_end_transaction_marker():
    batch = marker(False, coordinator_epoch=5)
    ((_, header),) = list(iter_batches(batch))
    assert header.is_control and header.is_transactional and header.producer_id == PID
    assert control_type(batch) is ControlType.ABORT
    # key: version 0, type 0 (ABORT); value: version 0, coordinator epoch 5
    assert b"\x00\x00\x00\x00" in batch and b"\x00\x00\x00\x00\x00\x05" in batch


def test_lso_follows_open_transactions_across_a_restart(tmp_path):
    log = _open(tmp_path)
    _append(log, plain())  # 0
    _append(log, txn_batch(2, 0))  # 1-2, the transaction starts at 1
    _append(log, plain())  # 3
    assert (log.high_watermark, log.last_stable_offset) == (4, 1)
    log.close()  # snapshot at the log end holds the open transaction

    log = _open(tmp_path, high_watermark=4)
    assert log.last_stable_offset == 1
    _append(log, txn_batch(1, 2))  # 4
    _append(log, marker(False))  # 5: ABORT
    assert log.last_stable_offset == 6
    (segment,) = log.segments
    assert [
        (e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
        for e in segment.txn_index.entries
    ] == [(PID, 1, 5, 6)]
    assert [(a.producer_id, a.first_offset) for a in log.collect_aborted_transactions(0, 6)] == [
        (PID, 1)
    ]
    assert log.collect_aborted_transactions(6, 7) == []
    log.close_handlers()


def test_marker_and_transactional_write_checks(tmp_path):
    log = _open(tmp_path)
    _append(log, txn_batch(1, 0, epoch=3))
    plain_from_producer = build_batch(
        [(b"k", b"v", (), T0)], producer_id=PID, producer_epoch=3, base_sequence=1
    )
    with pytest.raises(KafkaError) as raised:
        _append(log, plain_from_producer)  # not transactional while a transaction is open
    assert raised.value.code == ErrorCode.INVALID_TXN_STATE
    with pytest.raises(KafkaError) as raised:
        _append(log, marker(True, epoch=2), from_coordinator=True)
    assert raised.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    _append(log, marker(True, epoch=3, coordinator_epoch=4), from_coordinator=True)
    _append(log, txn_batch(1, 1, epoch=3))
    with pytest.raises(KafkaError) as raised:
        _append(log, marker(False, epoch=3, coordinator_epoch=1), from_coordinator=True)
    assert raised.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert log.log_end_offset == 3  # the refused batches wrote nothing
    log.close_handlers()


def test_txn_index_truncated_and_deleted_with_its_segment(tmp_path):
    config = LogConfig(segment_bytes=300, retention_bytes=1, file_delete_delay_ms=0)
    log = _open(tmp_path, config)
    _append(log, txn_batch(3, 0))  # 0-2
    _append(log, marker(False))  # 3
    first = log.segments[0]
    index_path = first.txn_index.path
    assert index_path.exists()
    _append(log, txn_batch(3, 3, key=b"q"))  # a later segment
    _append(log, marker(False))
    assert len(log.segments) >= 2
    second = log.segments[-1]
    second_index = second.txn_index.path
    assert second_index.exists()
    log.truncate_to(second.txn_index.entries[-1].last_offset)  # drops the second marker
    assert not second_index.exists()
    # The second transaction is open again: the LSO is its first offset.
    assert log.last_stable_offset == 4
    _append(log, marker(True))  # 7: now committed, in the second segment
    assert log.last_stable_offset == 8
    log.delete_old_segments()  # retention.bytes=1: the first segment goes, index too
    log.delete_expired_files(force=True)
    assert not index_path.exists()
    assert not index_path.with_name(index_path.name + ".deleted").exists()
    log.close_handlers()


def test_cleaner_keeps_the_txn_index(tmp_path):
    config = LogConfig(cleanup_policy=("compact",), segment_bytes=300, delete_retention_ms=1000)
    log = _open(tmp_path, config)
    for round_ in range(3):
        _append(log, build_batch([(b"a", b"a%d" % round_, (), T0)]))
    _append(log, txn_batch(1, 0, key=b"t"))
    _append(log, marker(False))
    for round_ in range(6):
        _append(log, build_batch([(b"a", b"a%d" % round_, (), T0)]))
    with_index = [s for s in log.segments if s.txn_index.entries]
    assert with_index
    before = with_index[0].txn_index.path.read_bytes()
    result = clean_log(log, first_dirty_offset=0, now_ms=T0 + 10_000, force=True)
    assert result is not None and result.records_removed > 0
    after = [s for s in log.segments if s.base_offset == with_index[0].base_offset][0]
    assert after.txn_index.path.read_bytes() == before
    assert not list(tmp_path.glob("t-0/*.swap")) and not list(tmp_path.glob("t-0/*.cleaned"))
    log.close()
    reopened = _open(tmp_path, config)
    assert [len(s.txn_index.entries) for s in reopened.segments if s.txn_index.entries] == [1]
    reopened.close_handlers()


def test_cleaner_never_lets_an_aborted_record_shadow_a_committed_one(tmp_path):
    config = LogConfig(cleanup_policy=("compact",), segment_bytes=200, delete_retention_ms=1000)
    log = _open(tmp_path, config)
    _append(log, build_batch([(b"k", b"committed", (), T0)]))
    _append(log, build_batch([(b"k", b"committed", (), T0)]))
    _append(log, txn_batch(1, 0, key=b"k"))  # key k0 ...
    _append(log, build_batch([(b"k0", b"kept", (), T0)]))
    _append(log, txn_batch(1, 1, key=b"k"))  # ... k0 again, in the aborted transaction
    _append(log, marker(False))
    for i in range(8):
        _append(log, build_batch([(b"z", b"%d" % i, (), T0)]))
    assert clean_log(log, first_dirty_offset=0, now_ms=T0 + 10_000, force=True) is not None
    values = []
    for segment in log.segments:
        data = os.pread(segment.fd, segment.size, 0)
        for pos, header in iter_batches(data):
            if not header.is_control:
                values += [(r.key, r.value) for r in iter_records(data[pos : pos + header.size])]
    # The committed k0 survives: the aborted k0 after it did not count as its replacement.
    assert (b"k0", b"kept") in values
    assert values.count((b"k", b"committed")) == 1
    # The aborted records themselves are gone; their (empty) batches and the marker stay.
    assert (b"k0", b"v0") not in values and (b"k0", b"v1") not in values
    headers = [h for s in log.segments for _, h in iter_batches(os.pread(s.fd, s.size, 0))]
    assert sum(h.is_control for h in headers) == 1
    empty = [h for h in headers if h.is_transactional and not h.is_control]
    assert [h.record_count for h in empty] == [0, 0] and all(h.producer_id == PID for h in empty)
    log.close_handlers()
