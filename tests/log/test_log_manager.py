from __future__ import annotations

import functools
import os
import uuid

import pytest
import trio
from logtest_helpers import append, make_batch

from trio_broker.errors import ErrorCode, KafkaError
from trio_broker.log.checkpoints import read_meta_properties, topic_id_to_str
from trio_broker.log.config import LogConfig
from trio_broker.log.manager import LogManager

TOPIC_ID = uuid.UUID("6f2c8a3e-1b4d-4e5f-9a7b-0c1d2e3f4a5b")


def manager(tmp_path, **kwargs) -> LogManager:
    kwargs.setdefault("node_id", 1)
    kwargs.setdefault("cluster_id", "abcdefghijklmnopqrstuv")
    m = LogManager([tmp_path / "d1", tmp_path / "d2"], **kwargs)
    m.open()
    return m


def test_create_close_reopen_with_checkpoints(tmp_path):
    m = manager(tmp_path)
    props = read_meta_properties(tmp_path / "d1")
    assert props["version"] == "1" and props["node.id"] == "1"
    assert props["cluster.id"] == "abcdefghijklmnopqrstuv" and len(props["directory.id"]) == 22
    a = m.create_log("orders", 0, TOPIC_ID)
    b = m.create_log("orders", 1, TOPIC_ID)
    assert a.dir.parent != b.dir.parent  # spread over the log dirs
    assert (a.dir / "partition.metadata").read_text() == (
        f"version: 0\ntopic_id: {topic_id_to_str(TOPIC_ID)}"
    )
    append(a, make_batch(3))
    append(a, make_batch(2))
    a.delete_records_before(2)
    m.close()
    d = a.dir.parent
    assert (d / ".kafka_cleanshutdown").exists()
    assert (d / "recovery-point-offset-checkpoint").read_text() == "0\n1\norders 0 5\n"
    assert (d / "replication-offset-checkpoint").read_text() == "0\n1\norders 0 5\n"
    assert (d / "log-start-offset-checkpoint").read_text() == "0\n1\norders 0 2\n"

    m = manager(tmp_path)
    assert not (d / ".kafka_cleanshutdown").exists()
    a = m.get_log("orders", 0)
    assert (a.log_start_offset, a.log_end_offset, a.high_watermark) == (2, 5, 5)
    assert a.topic_id == TOPIC_ID
    assert {(log.topic, log.partition) for log in m.all_logs()} == {("orders", 0), ("orders", 1)}
    m.close()

    with pytest.raises(RuntimeError):
        LogManager([tmp_path / "d1"], node_id=2, cluster_id="abcdefghijklmnopqrstuv").open()


def test_a_listed_log_removed_before_its_lazy_load_loads_empty(tmp_path):
    """Logs found at start are loaded without making their directory again; one removed
    between the listing and its load is made anew, empty, and its log dir stays online."""
    import shutil

    m = manager(tmp_path)
    kept, gone = m.create_log("orders", 0, TOPIC_ID), m.create_log("orders", 1, TOPIC_ID)
    append(kept, make_batch(3))
    append(gone, make_batch(2))
    m.close()
    m = LogManager(
        [tmp_path / "d1", tmp_path / "d2"], node_id=1, cluster_id="abcdefghijklmnopqrstuv"
    )
    m.open(lazy=True)
    shutil.rmtree(gone.dir)
    assert m.get_log("orders", 0).log_end_offset == 3
    assert m.get_log("orders", 1).log_end_offset == 0
    assert gone.dir.is_dir() and not m.offline_dirs
    m.close()


def test_delete_log_renames_then_removes(tmp_path):
    m = manager(tmp_path)
    log = m.create_log("gone", 3)
    append(log, make_batch(2))
    region = log.read(0, 100).regions[0]
    m.delete_log("gone", 3)
    assert m.get_log("gone", 3) is None
    renamed = [p.name for p in log.dir.parent.iterdir() if p.name.endswith("-delete")]
    assert len(renamed) == 1 and renamed[0].startswith("gone-3.")
    assert len(os.pread(region.fd, region.size, region.position)) == region.size
    with pytest.raises(KafkaError) as info:
        log.read(0, 100)
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    m.delete_pending(force=True)
    assert not log.dir.exists()
    m.close()


async def run_inline(fn, *args):
    return fn(*args)


async def test_background_retention_flush_and_checkpoints(tmp_path, autojump_clock):
    def now_ms() -> int:
        return 1_700_000_000_000 + int(trio.current_time() * 1000)

    m = manager(
        tmp_path,
        now_ms=now_ms,
        default_config=LogConfig(segment_bytes=500, retention_ms=3_600_000),
    )
    log = m.create_log("t", 0)
    for _ in range(10):
        append(log, make_batch(2, value_size=100, timestamp=now_ms()))
    segments = len(log.segments)
    assert segments > 3
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(m.run, run_sync=run_inline))
        # Rolled segments get flushed and the recovery point checkpointed within a minute.
        await trio.sleep(61)
        assert log.recovery_point == log.active_segment.base_offset
        cp = (log.dir.parent / "recovery-point-offset-checkpoint").read_text()
        assert cp == f"0\n1\nt 0 {log.recovery_point}\n"
        # Two hours later the retention check has deleted all the old segments...
        await trio.sleep(2 * 3600)
        assert log.log_start_offset == log.log_end_offset == 20
        # ...and file.delete.delay.ms after that their files are gone.
        await trio.sleep(61)
        assert not [p for p in log.dir.iterdir() if p.name.endswith(".deleted")]
        nursery.cancel_scope.cancel()
    m.close()


async def test_flush_in_worker_thread_advances_recovery_point(tmp_path):
    m = manager(tmp_path, default_config=LogConfig(flush_messages=4))
    log = m.create_log("t", 0)
    assert not append(log, make_batch(2)).flush_needed
    assert append(log, make_batch(2)).flush_needed
    await trio.to_thread.run_sync(log.flush)
    assert log.recovery_point == 4 and log.unflushed_messages == 0
    assert log.flush_target(m.now_ms()) is None
    m.close()


def test_open_removes_leftover_delete_dirs_and_update_config(tmp_path):
    m = manager(tmp_path)
    log = m.create_log("t", 0)
    log.update_config(LogConfig(segment_bytes=300))
    for _ in range(4):
        append(log, make_batch(2, value_size=100))
    assert len(log.segments) == 4
    m.close()
    leftover = tmp_path / "d1" / "x-0.0123456789abcdef0123456789abcdef-delete"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"junk")
    m = manager(tmp_path)
    assert not leftover.exists()
    assert [log.topic for log in m.all_logs()] == ["t"]
    m.close()
