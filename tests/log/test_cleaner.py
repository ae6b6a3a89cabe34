"""Log compaction: the latest value per key survives, tombstones go after delete.retention.ms."""

from __future__ import annotations

import os

from logtest_helpers import append

from trio_broker.log.cleaner import clean_log
from trio_broker.log.config import LogConfig
from trio_broker.protocol.records import build_batch, iter_batches, iter_records

T0 = 1_700_000_000_000
COMPACT = LogConfig(cleanup_policy=("compact",), segment_bytes=400, delete_retention_ms=1000)


def write(log, pairs, ts=T0, **kwargs):
    """One batch per call: (key, value) pairs."""
    return append(log, build_batch([(k, v, [], ts) for k, v in pairs], **kwargs))


def records(log):
    out = []
    for segment in log.segments:
        data = os.pread(segment.fd, segment.size, 0)
        for pos, header in iter_batches(data):
            out += [(r.offset, r.key, r.value) for r in iter_records(data[pos : pos + header.size])]
    return out


def fill(log):
    for round_ in range(6):
        for key in (b"a", b"b", b"c"):
            write(log, [(key, b"%s%d" % (key, round_))])
    write(log, [(b"b", None)])  # a tombstone for b
    write(log, [(b"z", b"tail")])  # lands in the active segment, never cleaned


def test_keeps_latest_value_per_key_with_offsets(open_log, clock):
    log = open_log(COMPACT)
    fill(log)
    assert len(log.segments) > 2
    end_before = log.log_end_offset
    result = clean_log(log, first_dirty_offset=0, now_ms=clock())
    assert result is not None and result.records_removed > 0
    got = records(log)
    latest = {}
    for offset, key, value in got:
        latest[key] = (offset, value)
    assert latest[b"a"] == (15, b"a5")
    assert latest[b"c"] == (17, b"c5")
    # The tombstone is younger than delete.retention.ms: it stays, b's values go.
    assert latest[b"b"] == (18, None)
    cleaned = [k for offset, k, _ in got if offset < result.end_offset]
    assert len(cleaned) == len(set(cleaned))  # one record per key below the cleaned end
    assert log.log_end_offset == end_before
    # Reads through the log's own index still work after the swap.
    read = log.read(15, 1 << 20)
    assert read.first_offset == 15


def test_tombstones_removed_after_delete_retention(open_log, clock):
    log = open_log(COMPACT)
    fill(log)
    write(log, [(b"z", b"roll")])  # pushes the tombstone's segment out of the active one
    clock.advance(5_000)
    clean_log(log, first_dirty_offset=0, now_ms=clock())
    keys = {k for _, k, _ in records(log)}
    assert b"b" not in keys
    assert {b"a", b"c", b"z"} <= keys


def test_min_compaction_lag_protects_recent_segments(open_log, clock):
    log = open_log(
        LogConfig(cleanup_policy=("compact",), segment_bytes=400, min_compaction_lag_ms=60_000)
    )
    fill(log)
    assert clean_log(log, first_dirty_offset=0, now_ms=T0 + 1_000) is None
    assert clean_log(log, first_dirty_offset=0, now_ms=T0 + 120_000) is not None


def test_dirty_ratio_and_checkpoint(open_log, clock):
    log = open_log(COMPACT)
    fill(log)
    first = clean_log(log, first_dirty_offset=0, now_ms=clock())
    assert first is not None
    # Everything below the checkpoint is clean: nothing dirty, nothing to do.
    assert clean_log(log, first_dirty_offset=first.end_offset, now_ms=clock()) is None


def test_producer_batch_keeps_offsets_and_sequence(open_log, clock):
    log = open_log(COMPACT)
    write(log, [(b"k", b"1"), (b"j", b"1")], producer_id=7, producer_epoch=0, base_sequence=0)
    for i in range(8):
        write(
            log,
            [(b"k", b"%d" % (i + 2)), (b"j", b"%d" % (i + 2))],
            producer_id=7,
            producer_epoch=0,
            base_sequence=2 * (i + 1),
        )
    clean_log(log, first_dirty_offset=0, now_ms=clock())
    first = log.segments[0]
    data = os.pread(first.fd, first.size, 0)
    pos, header = next(iter_batches(data))
    # The first batch lost both records but stays, empty, holding its offsets and sequence.
    assert (header.base_offset, header.last_offset_delta, header.record_count) == (0, 1, 0)
    assert (header.producer_id, header.base_sequence) == (7, 0)


def test_reopen_after_clean_is_valid(open_log, clock, tmp_path):
    log = open_log(COMPACT)
    fill(log)
    clean_log(log, first_dirty_offset=0, now_ms=clock())
    before = records(log)
    log.close()
    # A crash mid-clean would leave a .cleaned file: the loader must ignore it.
    (tmp_path / "topic-0" / "00000000000000000000.log.cleaned").write_bytes(b"junk")
    reopened = open_log(COMPACT)
    assert records(reopened) == before
    assert not (tmp_path / "topic-0" / "00000000000000000000.log.cleaned").exists()
