"""LogDirMove on a LogManager with two real log dirs (log/dir_mover.py): what the swap keeps
and what a cancelled or failed move leaves behind."""

from __future__ import annotations

import os

import trio
from logtest_helpers import append, make_batch

from trio_broker.errors import ErrorCode
from trio_broker.log import LogManager
from trio_broker.log.config import LogConfig

CONFIG = LogConfig(segment_bytes=3000, index_interval_bytes=200, file_delete_delay_ms=0)


def region_bytes(result) -> bytes:
    return b"".join(os.pread(r.fd, r.size, r.position) for r in result.regions)


def names(path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.startswith("t-"))


async def wait_moved(manager: LogManager) -> None:
    with trio.fail_after(30):
        while manager.moves:
            await trio.sleep(0.01)


async def test_a_move_keeps_offsets_epochs_and_producer_state(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, node_id=1, cluster_id="c")
    manager.open()
    log = manager.create_log("t", 0, config=CONFIG)
    source, target = log.dir.parent, dirs[1]
    assert source == dirs[0]
    for i in range(30):
        append(log, make_batch(3, value_size=100, tag=b"%d-" % i), leader_epoch=i // 10)
    pid_batch = make_batch(2, producer_id=7, producer_epoch=0, base_sequence=0)
    append(log, pid_batch, leader_epoch=3)
    log.leader_epoch_cache.assign(4, log.log_end_offset)  # a leader elected, no batch yet
    assert len(log.segments) >= 5
    data = region_bytes(log.read(0, 1 << 22))
    epochs = log.leader_epoch_cache.entries()
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        assert manager.alter_log_dir("t", 0, str(target)) == ErrorCode.NONE
        assert manager.alter_log_dir("t", 0, str(target)) == ErrorCode.NONE  # under way
        # Appends go on during the move.
        for i in range(30, 40):
            append(log, make_batch(3, value_size=100, tag=b"%d-" % i), leader_epoch=4)
            await trio.sleep(0)
        await wait_moved(manager)
        nursery.cancel_scope.cancel()
    assert manager.get_log("t", 0) is log
    assert log.dir == target / "t-0"
    assert all(s.log_path.parent == log.dir for s in log.segments)
    assert (log.log_start_offset, log.log_end_offset) == (0, 92 + 30)
    moved = region_bytes(log.read(0, 1 << 22))
    assert moved.startswith(data) and len(moved) > len(data)
    assert log.leader_epoch_cache.entries() == epochs
    # The idempotent producer's next sequence is 2: a retry of 0-1 is a duplicate.
    assert append(log, pid_batch, leader_epoch=4).duplicate
    nxt = make_batch(1, producer_id=7, producer_epoch=0, base_sequence=2)
    assert append(log, nxt, leader_epoch=4).first_offset == 122
    manager.delete_pending(force=True)
    assert names(source) == [] and names(target) == ["t-0"]
    final = region_bytes(log.read(0, 1 << 22))
    manager.close()

    manager = LogManager(dirs, node_id=1, cluster_id="c")
    manager.open({"t": CONFIG})
    reopened = manager.get_log("t", 0)
    assert reopened.dir == target / "t-0"
    assert region_bytes(reopened.read(0, 1 << 22)) == final
    assert reopened.leader_epoch_cache.entries() == epochs
    manager.close()


async def test_a_failed_target_or_a_new_destination_leaves_the_log_where_it_was(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    manager = LogManager(dirs, node_id=1, cluster_id="c")
    manager.open()
    log = manager.create_log("t", 0, config=CONFIG)
    for i in range(20):
        append(log, make_batch(3, value_size=100, tag=b"%d-" % i))
    data = region_bytes(log.read(0, 1 << 22))
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        # Back to where it is, before the copy began: the move is dropped.
        assert manager.alter_log_dir("t", 0, str(dirs[1])) == ErrorCode.NONE
        assert manager.alter_log_dir("t", 0, str(dirs[0])) == ErrorCode.NONE
        await wait_moved(manager)
        assert log.dir == dirs[0] / "t-0"
        # The target fails during the move: the copy goes, the log stays and serves.
        assert manager.alter_log_dir("t", 0, str(dirs[2])) == ErrorCode.NONE
        manager.mark_dir_offline(dirs[2], OSError(5, "Input/output error"))
        await wait_moved(manager)
        assert manager.alter_log_dir("t", 0, str(dirs[2])) == ErrorCode.KAFKA_STORAGE_ERROR
        assert manager.alter_log_dir("t", 0, "b") == ErrorCode.LOG_DIR_NOT_FOUND
        assert manager.alter_log_dir("u", 0, str(dirs[1])) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        nursery.cancel_scope.cancel()
    assert log.dir == dirs[0] / "t-0" and not log.offline
    assert append(log, make_batch(1)).first_offset == 60
    assert region_bytes(log.read(0, 1 << 22)).startswith(data)
    for d in dirs[1:]:
        assert names(d) == []
    manager.close()
