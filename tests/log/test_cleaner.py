"""Log compaction: the latest value per key survives, tombstones go after delete.retention.ms."""

from __future__ import annotations

import os

from logtest_helpers import append

from trio_broker.log.cleaner import clean_log
from trio_broker.log.config import LogConfig
from trio_broker.protocol.record_codec import build_batch, iter_records
from trio_broker.protocol.records import iter_batches

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


# -- the cleaner's worker thread and the Trio loop -------------------------------------------

BIG = LogConfig(cleanup_policy=("compact",), segment_bytes=20_000, delete_retention_ms=1000)


def big_manager(tmp_path, clock):
    from trio_broker.log.manager import LogManager

    manager = LogManager(
        [tmp_path / "data"], node_id=1, cluster_id="abcdefghijklmnopqrstuv", now_ms=clock
    )
    manager.open()
    log = manager.create_log("compacted", 0, config=BIG)
    for i in range(3000):
        write(log, [(b"key-%03d" % (i % 100), b"value-%05d" % i + b"." * 40)])
    return manager, log


def temp_files(log):
    return sorted(n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap")))


async def test_log_serves_produce_and_fetch_while_the_cleaner_thread_works(tmp_path, clock):
    import threading

    import trio

    from trio_broker.log.cleaner import LogCleaner

    manager, log = big_manager(tmp_path, clock)
    closed_segments = len(log.segments) - 1
    token = trio.lowlevel.current_trio_token()
    answered = []

    async def produce_and_fetch(n: int) -> tuple[int, list]:
        produced = write(log, [(b"live", b"live-%d" % n)])
        read = log.read(produced.first_offset, 1 << 20)
        region = read.regions[0]
        data = os.pread(region.fd, region.size, region.position)
        got = [
            (r.offset, r.key, r.value) for _, h in iter_batches(data) for r in iter_records(data)
        ]
        return produced.first_offset, got

    def in_worker() -> None:
        # Runs in the cleaner's worker thread, mid-pass: the Trio loop must serve a produce
        # and a fetch now (on the Trio thread itself from_thread.run raises RuntimeError).
        assert threading.current_thread() is not threading.main_thread()
        answered.append(trio.from_thread.run(produce_and_fetch, len(answered), trio_token=token))

    cleaner = LogCleaner(manager, now_ms=clock, on_worker_start=in_worker)
    [result] = await cleaner.clean_once(force=True)
    # One offset map, then one job per closed segment: each served a roundtrip meanwhile.
    assert len(answered) == 1 + closed_segments
    for n, (offset, got) in enumerate(answered):
        assert got == [(offset, b"live", b"live-%d" % n)]
    assert result.records_removed > 0
    cleaned = [(o, k, v) for o, k, v in records(log) if o < result.end_offset]
    assert len({k for _, k, _ in cleaned}) == len(cleaned)  # one record per key
    assert (2907, b"key-007", b"value-02907" + b"." * 40) in cleaned
    live = [(o, v) for o, k, v in records(log) if k == b"live"]
    assert live == [(offset, b"live-%d" % n) for n, (offset, _) in enumerate(answered)]
    assert temp_files(log) == []
    manager.close()


async def test_pass_is_dropped_when_retention_deletes_its_segments_meanwhile(tmp_path, clock):
    import trio

    from trio_broker.log.cleaner import CLEANER_CHECKPOINT, LogCleaner

    manager, log = big_manager(tmp_path, clock)
    before = records(log)
    first, second = log.segments[0], log.segments[1]
    token = trio.lowlevel.current_trio_token()
    jobs = []

    def in_worker() -> None:
        jobs.append(1)
        if len(jobs) == 2:  # the offset map is built; the first segment is being cleaned
            trio.from_thread.run_sync(
                log.delete_records_before, second.base_offset, trio_token=token
            )

    cleaner = LogCleaner(manager, now_ms=clock, on_worker_start=in_worker)
    assert await cleaner.clean_once(force=True) == []
    # Nothing was swapped in: the deleted segment did not come back, no temporary files.
    assert log.segments[0] is second
    assert not first.log_path.name.endswith(".log")  # renamed to .deleted by DeleteRecords
    assert not (log.dir / f"{first.base_offset:020d}.log").exists()
    assert temp_files(log) == []
    assert records(log) == [r for r in before if r[0] >= second.base_offset]
    assert not (log.dir.parent / CLEANER_CHECKPOINT).exists()
    manager.close()


async def test_cancelled_pass_leaves_the_log_as_it_was(tmp_path, clock):
    import trio

    from trio_broker.log.cleaner import CLEANER_CHECKPOINT, LogCleaner

    manager, log = big_manager(tmp_path, clock)
    before = records(log)
    inodes = {p.name: p.stat().st_ino for p in log.dir.iterdir()}
    token = trio.lowlevel.current_trio_token()
    jobs = []
    cleaner = LogCleaner(manager, now_ms=clock)

    with trio.CancelScope() as scope:

        def in_worker() -> None:
            jobs.append(1)
            if len(jobs) == 2:  # cancel while the first segment's cleaned copy is written
                trio.from_thread.run_sync(scope.cancel, trio_token=token)

        cleaner.on_worker_start = in_worker
        await cleaner.clean_once(force=True)
    assert scope.cancelled_caught
    assert len(jobs) == 2  # no job started after the cancellation
    assert temp_files(log) == []
    assert {p.name: p.stat().st_ino for p in log.dir.iterdir()} == inodes
    assert records(log) == before
    assert not (log.dir.parent / CLEANER_CHECKPOINT).exists()
    manager.close()


async def test_empty_cleanup_policy_neither_compacts_nor_deletes(tmp_path, clock):
    """cleanup.policy="" (Kafka 3.9 accepts the empty list): the cleaner passes the log by
    and retention keeps every segment, however old."""
    from trio_broker.log.cleaner import LogCleaner
    from trio_broker.log.manager import LogManager

    manager = LogManager(
        [tmp_path / "data"], node_id=1, cluster_id="abcdefghijklmnopqrstuv", now_ms=clock
    )
    manager.open()
    config = LogConfig(cleanup_policy=(), segment_bytes=400, retention_ms=1000)
    log = manager.create_log("kept", 0, config=config)
    fill(log)
    before = records(log)
    segments = len(log.segments)
    assert segments > 2
    clock.advance(3_600_000)
    assert await LogCleaner(manager, now_ms=clock).clean_once(force=True) == []
    assert log.delete_old_segments(clock()) == 0
    assert len(log.segments) == segments
    assert records(log) == before  # every value of every key, the old ones too
    # The same log with "delete" would lose its old segments: the test can fail.
    log.update_config(LogConfig(cleanup_policy=("delete",), segment_bytes=400, retention_ms=1000))
    assert log.delete_old_segments(clock()) > 0
    manager.close()
