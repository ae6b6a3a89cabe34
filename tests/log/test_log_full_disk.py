"""A full disk and other write failures, on a real small tmpfs: a failed append leaves the
log exactly as it was, the caller gets KAFKA_STORAGE_ERROR, and nothing acknowledged is
lost, neither while the disk is full nor across a stop and a restart. Plus recovery of a
torn tail (no tmpfs needed) and a log dir taken offline by an error other than ENOSPC."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import struct

import pytest
from disk import fill_disk, small_tmpfs
from logtest_helpers import append, make_batch

from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.checkpoints import read_offset_checkpoint, write_offset_checkpoint
from trio_broker.log.config import LogConfig
from trio_broker.log.loader import load_log
from trio_broker.log.manager import CLEAN_SHUTDOWN_FILE, LogManager
from trio_broker.protocol.records import iter_batches


def region_bytes(result) -> bytes:
    return b"".join(os.pread(r.fd, r.size, r.position) for r in result.regions)


def offsets_in(data: bytes) -> list[int]:
    return [h.base_offset for _, h in iter_batches(bytearray(data))]


def check_index_points_at_batches(log) -> None:
    """Every offset index entry names the position of a whole batch in its segment."""
    for segment in log.segments:
        starts = {pos: h for pos, h in segment.batches_from(0)}
        for rel, pos in zip(segment.offset_index.keys, segment.offset_index.values, strict=True):
            assert pos in starts, f"index entry at {pos} is not a batch start"
            assert starts[pos].last_offset == segment.base_offset + rel


@pytest.fixture
def disk(tmp_path):
    with small_tmpfs(tmp_path / "disk", "2m") as mount:
        yield mount


def open_on(disk, config, **kwargs):
    return load_log(disk / "t-0", "t", 0, config, **kwargs)


def test_failed_data_write_is_undone_and_appends_resume(disk):
    config = LogConfig(index_interval_bytes=100)
    log = open_on(disk, config)
    filler = fill_disk(disk, 64 * 1024)
    acked: list[bytes] = []
    with pytest.raises(KafkaError) as failed:
        for i in range(100):
            batch = make_batch(4, value_size=5000, tag=b"a%d-" % i)
            append(log, batch)
            acked.append(batch)
    assert failed.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert 0 < len(acked) < 100
    segment = log.active_segment
    acked_size = sum(len(b) for b in acked)
    # Exactly the acknowledged batches are in the file: no half-written batch after them.
    assert os.path.getsize(segment.log_path) == segment.size == acked_size
    assert log.log_end_offset == 4 * len(acked)
    assert not log.offline
    check_index_points_at_batches(log)
    # Still full: it fails again, the same way, and changes nothing.
    with pytest.raises(KafkaError):
        append(log, make_batch(4, value_size=5000))
    assert os.path.getsize(segment.log_path) == acked_size

    filler.unlink()
    result = append(log, make_batch(4, value_size=5000, tag=b"after"))
    assert result.first_offset == 4 * len(acked)
    data = region_bytes(log.read(0, 1 << 30))
    assert offsets_in(data) == list(range(0, 4 * len(acked) + 4, 4))
    check_index_points_at_batches(log)
    end = log.log_end_offset
    log.close()
    for clean in (True, False):
        log = open_on(disk, config, clean_shutdown=clean, recovery_point=0)
        assert log.log_end_offset == end
        assert region_bytes(log.read(0, 1 << 30)) == data
        log.close()


def test_index_entries_wait_in_memory_for_a_disk_with_room(disk):
    # Index entries are kept in memory and written on flush, roll and close (no descriptor
    # is held for an index): a full disk fails the flush, not the append, and the entries
    # reach the file once there is room again.
    config = LogConfig(index_interval_bytes=1)
    log = open_on(disk, config)
    first = make_batch(1, tag=b"first")
    append(log, first)
    filler = fill_disk(disk, 0)
    assert append(log, make_batch(1, tag=b"second")).first_offset == 1
    segment = log.active_segment
    assert segment.offset_index.entries == 1
    check_index_points_at_batches(log)
    with pytest.raises(OSError):
        segment.offset_index.flush()
    filler.unlink()
    log.flush()
    assert os.path.getsize(segment.offset_index.path) == 8
    log.close()
    log = open_on(disk, config)
    assert log.active_segment.offset_index.entries == 1
    check_index_points_at_batches(log)
    assert offsets_in(region_bytes(log.read(0, 1 << 20))) == [0, 1]
    log.close()


def test_failed_roll_leaves_log_as_it_was(disk):
    config = LogConfig(segment_bytes=3000, index_interval_bytes=100)
    log = open_on(disk, config)
    while len(log.segments) == 1 or log.active_segment.size < 2500:
        append(log, make_batch(2, value_size=400))
    segments = [s.base_offset for s in log.segments]
    end = log.log_end_offset
    files = sorted(p.name for p in (disk / "t-0").iterdir())
    filler = fill_disk(disk, 0)
    with pytest.raises(KafkaError) as failed:
        append(log, make_batch(2, value_size=400))  # needs a roll: a snapshot, new files
    assert failed.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert [s.base_offset for s in log.segments] == segments
    assert log.log_end_offset == end
    assert sorted(p.name for p in (disk / "t-0").iterdir()) == files
    filler.unlink()
    assert append(log, make_batch(2, value_size=400)).first_offset == end
    assert log.segments[-1].base_offset == end
    assert offsets_in(region_bytes(log.read(0, 1 << 20))) == list(range(0, end + 2, 2))
    log.close()


def test_checkpoint_that_cannot_be_written_keeps_the_old_one(disk):
    path = disk / "recovery-point-offset-checkpoint"
    write_offset_checkpoint(path, {("t", 0): 42})
    filler = fill_disk(disk, 0)
    with pytest.raises(OSError):
        write_offset_checkpoint(path, {("t", p): 10**12 + p for p in range(1000)})
    assert read_offset_checkpoint(path) == {("t", 0): 42}
    assert not (disk / "recovery-point-offset-checkpoint.tmp").exists()
    filler.unlink()


def test_stop_on_a_full_disk_exits_and_the_restart_recovers_everything(disk, caplog):
    manager = LogManager([disk], node_id=1, cluster_id="c")
    manager.open()
    log = manager.create_log("t", 0, config=LogConfig(index_interval_bytes=100))
    for i in range(50):
        append(log, make_batch(3, value_size=100, tag=b"%d-" % i))
    manager.checkpoint()
    data = region_bytes(log.read(0, 1 << 20))
    filler = fill_disk(disk, 0)
    manager.close()  # must not raise
    assert not (disk / CLEAN_SHUTDOWN_FILE).exists()
    assert read_offset_checkpoint(disk / "recovery-point-offset-checkpoint")[("t", 0)] == 0

    filler.unlink()
    manager = LogManager([disk], node_id=1, cluster_id="c")
    manager.open({"t": LogConfig(index_interval_bytes=100)})
    assert manager.had_clean_shutdown[disk] is False
    log = manager.get_log("t", 0)
    assert log.log_end_offset == 150
    assert region_bytes(log.read(0, 1 << 20)) == data
    manager.close()
    assert (disk / CLEAN_SHUTDOWN_FILE).exists()


# -- recovery of a torn tail (no tmpfs needed) ------------------------------------------------


def torn_header(base_offset: int, batch_length: int = 992_361) -> bytes:
    """The start of a batch whose header announces far more bytes than follow it."""
    batch = bytearray(make_batch(1, value_size=200))
    struct.pack_into(">qi", batch, 0, base_offset, batch_length)
    return bytes(batch[:120])


@pytest.mark.parametrize("clean", [True, False])
def test_torn_tail_keeps_every_whole_batch_before_it(tmp_path, clean):
    config = LogConfig(index_interval_bytes=100)
    log = load_log(tmp_path / "t-0", "t", 0, config)
    for i in range(30):
        append(log, make_batch(2, value_size=80, tag=b"%d-" % i))
    data = region_bytes(log.read(0, 1 << 20))
    segment = log.active_segment
    index_path = segment.offset_index.path
    if clean:
        log.close()
    else:
        log.close_handlers()
    # What the old broker left after a failed append: half a batch at the end, and an
    # index entry pointing at it.
    with open(segment.log_path, "ab") as f:
        f.write(torn_header(60))
    with open(index_path, "r+b") as f:
        entries = [e for e in struct.iter_unpack(">ii", f.read()) if e != (0, 0)] or [(0, 0)]
        f.seek(len(entries) * 8)
        f.write(struct.pack(">ii", 61, len(data)))

    log = load_log(
        tmp_path / "t-0", "t", 0, config, clean_shutdown=clean, recovery_point=0, high_watermark=60
    )
    assert log.log_end_offset == 60
    assert os.path.getsize(segment.log_path) == len(data)
    assert region_bytes(log.read(0, 1 << 20)) == data
    check_index_points_at_batches(log)
    assert append(log, make_batch(1)).first_offset == 60
    log.close()


# -- a log dir that fails with something other than ENOSPC goes offline ----------------------


@contextlib.contextmanager
def file_size_limit(limit: int):
    """RLIMIT_FSIZE for this process: a write past `limit` fails with EFBIG (a real I/O
    error the log cannot explain away, unlike ENOSPC)."""
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, old_handler)


def test_io_error_takes_the_log_dir_offline_and_others_go_on(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    config = LogConfig(index_interval_bytes=100, segment_index_bytes=4096)
    manager = LogManager(dirs, node_id=1, cluster_id="c")
    manager.open()
    first = manager.create_log("t", 0, config=config)
    second = manager.create_log("t", 1, config=config)
    assert {first.dir.parent, second.dir.parent} == set(dirs)
    for i in range(20):
        append(first, make_batch(2, value_size=100, tag=b"%d-" % i))
    data = region_bytes(first.read(0, 1 << 20))
    size = first.active_segment.size
    with file_size_limit(size + 1000):
        with pytest.raises(KafkaError) as failed:
            append(first, make_batch(2, value_size=5000))
        assert failed.value.code == ErrorCode.KAFKA_STORAGE_ERROR
        assert manager.offline_dirs.keys() == {first.dir.parent}
        assert first.offline
        # The other dir goes on.
        assert append(second, make_batch(2)).first_offset == 0
    for call in (lambda: append(first, make_batch(1)), lambda: first.read(0, 1000)):
        with pytest.raises(KafkaError) as refused:
            call()
        assert refused.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    # A new log goes to an online dir.
    assert manager.create_log("t", 2, config=config).dir.parent == second.dir.parent
    manager.close()
    assert not (first.dir.parent / CLEAN_SHUTDOWN_FILE).exists()
    assert (second.dir.parent / CLEAN_SHUTDOWN_FILE).exists()

    manager = LogManager(dirs, node_id=1, cluster_id="c")
    manager.open({"t": config})
    assert not manager.offline_dirs
    log = manager.get_log("t", 0)
    assert log.log_end_offset == 40
    assert region_bytes(log.read(0, 1 << 20)) == data
    assert manager.get_log("t", 1).log_end_offset == 2
    manager.close()
