"""A clean stop and the restart after it (issue 37): what a log reads lazily after a clean
shutdown (its leader epochs, its first batch's timestamp) answers as if read at load, the
stop puts its checkpoints and marker in place whole, and a kill -9 after such a restart
still recovers every record."""

from __future__ import annotations

import os
import uuid

import trio
from logtest_helpers import append, make_batch

from trio_broker.errors import ErrorCode
from trio_broker.log.checkpoints import write_epoch_checkpoint
from trio_broker.log.config import LogConfig
from trio_broker.log.manager import LogManager
from trio_broker.protocol.record_codec import iter_records
from trio_broker.protocol.records import iter_batches

TOPIC_ID = uuid.UUID("0b8e1c2d-3f4a-4b5c-8d6e-7f8091a2b3c4")
T0 = 1_700_000_000_000
HOUR = 3_600_000


CONFIG = LogConfig(segment_ms=HOUR, segment_jitter_ms=0)


def manager(tmp_path) -> LogManager:
    m = LogManager([tmp_path / "d"], node_id=1, cluster_id="abcdefghijklmnopqrstuv")
    m.open({"t": CONFIG}, lazy=True)
    return m


def values(log) -> list[tuple[int, bytes]]:
    out = []
    for segment in log.segments:
        data = os.pread(segment.fd, segment.size, 0)
        for pos, header in iter_batches(data):
            out += [(r.offset, r.value[:3]) for r in iter_records(data[pos : pos + header.size])]
    return out


def test_a_clean_restart_then_a_kill_9_keeps_records_and_epochs(tmp_path):
    m = manager(tmp_path)
    log = m.create_log("t", 0, TOPIC_ID, CONFIG)
    append(log, make_batch(2, tag=b"a", timestamp=T0), leader_epoch=0)
    append(log, make_batch(2, tag=b"b", timestamp=T0 + 1), leader_epoch=3)
    m.close()
    d = tmp_path / "d"
    assert (d / ".kafka_cleanshutdown").read_bytes() == b'{"version":0,"brokerEpoch":-1}'
    assert (d / "recovery-point-offset-checkpoint").read_text() == "0\n1\nt 0 4\n"
    assert (d / "replication-offset-checkpoint").read_text() == "0\n1\nt 0 4\n"
    assert not [name for name in os.listdir(d) if name.endswith(".tmp")]
    # An epoch past the log end (as a truncation interrupted before its checkpoint write
    # leaves it): the load drops it, whenever the file is read.
    epochs = log.dir / "leader-epoch-checkpoint"
    write_epoch_checkpoint(epochs, [(0, 0), (3, 2), (7, 100)])

    m = manager(tmp_path)
    log = m.get_log("t", 0)
    assert (log.log_end_offset, log.topic_id) == (4, TOPIC_ID)
    assert log.end_offset_for_epoch(3) == (3, 4)
    assert log.end_offset_for_epoch(7) == (-1, -1)
    assert log.latest_epoch() == 3
    # A batch an hour after the first one rolls a new segment (segment.ms, measured from
    # the first batch's timestamp, which a clean load reads only when asked).
    append(log, make_batch(1, tag=b"c", timestamp=T0 + 2 * HOUR), leader_epoch=5)
    assert [s.base_offset for s in log.segments] == [0, 4]
    untouched = m.create_log("t", 1, TOPIC_ID, CONFIG)
    append(untouched, make_batch(1, tag=b"u", timestamp=T0), leader_epoch=5)
    m.close()
    assert epochs.read_text() == "0\n3\n0 0\n3 2\n5 4\n"

    # Restarted cleanly again, written to, then killed (no close): recovery after it.
    m = manager(tmp_path)
    log = m.get_log("t", 0)
    append(log, make_batch(1, tag=b"d", timestamp=T0 + 2 * HOUR + 1), leader_epoch=6)
    assert not (d / ".kafka_cleanshutdown").exists()
    del m, log

    m = manager(tmp_path)
    assert m.had_clean_shutdown[d] is False
    log = m.get_log("t", 0)
    assert values(log) == [
        (0, b"a0-"),
        (1, b"a1-"),
        (2, b"b0-"),
        (3, b"b1-"),
        (4, b"c0-"),
        (5, b"d0-"),
    ]
    assert log.end_offset_for_epoch(5) == (5, 5)
    assert log.latest_epoch() == 6
    assert values(m.get_log("t", 1)) == [(0, b"u0-")]
    m.close()


async def test_a_log_moved_after_a_clean_restart_keeps_its_epochs(tmp_path):
    # Its leader epochs were not read yet when its dir is renamed by the move's swap.
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = LogManager(dirs, node_id=1, cluster_id="abcdefghijklmnopqrstuv")
    m.open()
    log = m.create_log("t", 0, TOPIC_ID)
    append(log, make_batch(2, tag=b"a"), leader_epoch=0)
    append(log, make_batch(2, tag=b"b"), leader_epoch=2)
    target = dirs[1] if log.dir.parent == dirs[0] else dirs[0]
    m.close()

    m = LogManager(dirs, node_id=1, cluster_id="abcdefghijklmnopqrstuv")
    m.open(lazy=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(m.run)
        assert m.alter_log_dir("t", 0, str(target)) == ErrorCode.NONE
        with trio.fail_after(30):
            while m.moves:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    log = m.get_log("t", 0)
    assert log.dir.parent == target
    assert (log.end_offset_for_epoch(0), log.latest_epoch()) == ((0, 2), 2)
    m.close()
    m = LogManager(dirs, node_id=1, cluster_id="abcdefghijklmnopqrstuv")
    m.open(lazy=True)
    log = m.get_log("t", 0)
    assert values(log) == [(0, b"a0-"), (1, b"a1-"), (2, b"b0-"), (3, b"b1-")]
    assert (log.end_offset_for_epoch(0), log.latest_epoch()) == ((0, 2), 2)
    m.close()
