"""kill -9 of a real broker process while its cleaner rewrites a compacted log.

A compacted topic of many small records over a few thousand keys is written with the
cleaner asleep, then the broker is restarted with the cleaner awake and killed at a chosen
point of the pass, seen from outside on the partition directory:

- `tmp`: a `<base>.log.cleaned` file exists (cleaned copy written, not yet renamed);
- `renamed`: the first segment's `.log` was just replaced by its cleaned copy (renamed from
  `.log.swap` after its complete indexes);
- `midway`: half the closed segments are swapped, the rest not yet.

After a restart on the same data directory the log must read back through a client with
every key's latest record at its produced offset, offsets strictly increasing, every
record byte-identical to what was produced there; a second pass must then complete and
leave one record per key below the cleaner checkpoint and no temporary files.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from trio_broker.testing import BrokerProcess, free_port

TOPIC = "crashy"
SEGMENT_BYTES = 512 * 1024
KEYS = 3000
RECORDS = 60_000
TOMBSTONED = range(0, KEYS, 10)  # every tenth key ends with a tombstone
CLEANED_SUFFIX = ".cleaned"  # trio_broker.log.cleaner writes <base>.log.cleaned


def start_broker(port: int, log_dir: Path, *, cleaner_backoff_ms: int) -> BrokerProcess:
    return BrokerProcess(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": str(log_dir),
            "log.cleaner.backoff.ms": str(cleaner_backoff_ms),
        }
    )


def stop(broker: BrokerProcess) -> None:
    assert broker.stop() == 0, "".join(broker.lines[-20:])


def value_for(i: int) -> bytes:
    return b"value-%06d;" % i + b"." * (40 + i % 50)


def write_history(bootstrap: str) -> dict[int, tuple[bytes, bytes | None]]:
    """Create the compacted topic and fill it; returns offset -> (key, value)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {
        "cleanup.policy": "compact",
        "segment.bytes": str(SEGMENT_BYTES),
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": "86400000",  # tombstones stay: deterministic
    }
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, config=configs)])[TOPIC].result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 256 * 1024})
    produced: dict[int, tuple[bytes, bytes | None]] = {}
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            produced[msg.offset()] = (msg.key(), msg.value())

    def send(key: bytes, value: bytes | None) -> None:
        while True:
            try:
                producer.produce(TOPIC, key=key, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)

    for i in range(RECORDS):
        send(b"key-%05d" % (i * 7919 % KEYS), value_for(i))
    for k in TOMBSTONED:
        send(b"key-%05d" % k, None)
    assert producer.flush(30) == 0
    assert errors == []
    assert sorted(produced) == list(range(RECORDS + len(TOMBSTONED)))
    return produced


def read_all(bootstrap: str, end: int) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "crash-check",
            "enable.auto.commit": False,
            "fetch.max.bytes": 8 * 1024 * 1024,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    out: list[tuple[int, bytes, bytes | None]] = []
    deadline = time.monotonic() + 30
    while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
        for msg in consumer.consume(10_000, 0.2):
            if msg.error():
                raise KafkaException(msg.error())
            out.append((msg.offset(), msg.key(), msg.value()))
    low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
    consumer.close()
    assert high == end
    return out


def cleaner_checkpoint(log_dir: Path) -> int | None:
    path = log_dir / "cleaner-offset-checkpoint"
    if not path.exists():
        return None
    for line in path.read_text().splitlines()[2:]:
        topic, partition, offset = line.split()
        if topic == TOPIC and partition == "0":
            return int(offset)
    return None


def check_readable(
    got: list[tuple[int, bytes, bytes | None]], produced: dict[int, tuple[bytes, bytes | None]]
) -> None:
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets)), "offsets not strictly increasing"
    wrong = [(o, k, v) for o, k, v in got if produced[o] != (k, v)]
    assert not wrong, f"{len(wrong)} record(s) differ from what was produced there: {wrong[:3]}"
    latest: dict[bytes, int] = {}
    for offset in sorted(produced):
        latest[produced[offset][0]] = offset
    missing = set(latest.values()) - set(offsets)
    assert not missing, f"{len(missing)} latest record(s) lost, e.g. {sorted(missing)[:5]}"


def inodes(part_dir: Path) -> dict[str, int]:
    return {p.name: p.stat().st_ino for p in part_dir.glob("*.log")}


def leftovers(part_dir: Path) -> list[str]:
    return [n for n in os.listdir(part_dir) if n.endswith((CLEANED_SUFFIX, ".swap"))]


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None


def kill_during_clean(broker: BrokerProcess, part_dir: Path, trigger: str) -> set[str]:
    """Poll the partition directory until `trigger`, kill -9; the files found then."""
    original = inodes(part_dir)
    closed = sorted(original)[:-1]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if trigger == "tmp":
            hit = any(n.endswith(CLEANED_SUFFIX) for n in os.listdir(part_dir))
        else:
            wanted = 1 if trigger == "renamed" else len(closed) // 2
            hit = sum(_inode(part_dir / n) != original[n] for n in closed[:wanted]) == wanted
        if hit:
            broker.kill()
            return set(os.listdir(part_dir))
    broker.kill()
    raise AssertionError(f"cleaner never reached {trigger!r}:\n" + "".join(broker.lines[-20:]))


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """A cleanly stopped data directory holding the uncleaned topic, and what was produced."""
    data = tmp_path_factory.mktemp("compacted-history")
    broker = start_broker(free_port(), data, cleaner_backoff_ms=3_600_000)
    try:
        produced = write_history(broker.bootstrap)
    finally:
        stop(broker)
    segments = sorted((data / f"{TOPIC}-0").glob("*.log"))
    assert len(segments) >= 8
    assert cleaner_checkpoint(data) is None
    return data, produced


@pytest.mark.parametrize("trigger", ["tmp", "renamed", "midway"])
def test_kill_9_mid_clean_leaves_a_valid_log(history, tmp_path, trigger):
    source, produced = history
    end = len(produced)
    port = free_port()
    # The poller races the broker's write-fsync-rename of the `.cleaned` file; a kill that
    # came too late for `tmp` is tried again on a fresh copy.
    for attempt in range(3):
        data = tmp_path / f"data-{attempt}"
        shutil.copytree(source, data)
        part_dir = data / f"{TOPIC}-0"
        active_base = max(int(p.stem) for p in part_dir.glob("*.log"))
        broker = start_broker(port, data, cleaner_backoff_ms=100)
        found = kill_during_clean(broker, part_dir, trigger)
        if trigger != "tmp" or any(n.endswith(CLEANED_SUFFIX) for n in found):
            break
    if trigger == "tmp":
        assert any(n.endswith(CLEANED_SUFFIX) for n in found)
    # The kill landed inside the pass: it never finished (no checkpoint written).
    assert cleaner_checkpoint(data) is None

    broker = start_broker(port, data, cleaner_backoff_ms=100)
    try:
        assert any("not shut down cleanly" in line for line in broker.lines)
        assert not leftovers(part_dir)
        check_readable(read_all(broker.bootstrap, end), produced)

        # A second pass completes over everything below the active segment.
        deadline = time.monotonic() + 30
        while cleaner_checkpoint(data) != active_base and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cleaner_checkpoint(data) == active_base, "".join(broker.lines[-20:])
        assert not leftovers(part_dir)
        got = read_all(broker.bootstrap, end)
        check_readable(got, produced)
        cleaned_keys = [k for o, k, _ in got if o < active_base]
        assert len(cleaned_keys) == len(set(cleaned_keys)), "a key twice in the cleaned part"
        assert [o for o, _, _ in got if o >= active_base] == list(range(active_base, end))
    finally:
        stop(broker)


# -- a crash at each step of the swap, replayed on the partition directory ----------------

# What the cleaner leaves after each step of one segment's swap (log/cleaner.py, step 4):
# the three `.cleaned` files written and fsynced, then each renamed to `.swap` (indexes
# first; the `.log.swap` rename is the commit point), then each renamed over the old file.
SWAP_STEPS = [
    ("index", ".cleaned", ".swap"),
    ("timeindex", ".cleaned", ".swap"),
    ("log", ".cleaned", ".swap"),
    ("index", ".swap", ""),
    ("timeindex", ".swap", ""),
    ("log", ".swap", ""),
]
COMMIT_STEP = 3  # renames done from which the new segment must be found


def _segment_state(segment):
    """What a reader sees of a segment: its records, both indexes, its largest timestamp."""
    from trio_broker.protocol.record_codec import iter_records
    from trio_broker.protocol.records import iter_batches

    data = os.pread(segment.fd, segment.size, 0)
    rows = []
    newest = -1
    for pos, header in iter_batches(data):
        for r in iter_records(data[pos : pos + header.size]):
            rows.append((r.offset, r.key, r.value))
            newest = max(newest, r.timestamp)
    return {
        "records": rows,
        "offset_index": (list(segment.offset_index.keys), list(segment.offset_index.values)),
        "time_index": (list(segment.time_index.keys), list(segment.time_index.values)),
        "largest_timestamp": segment.largest_timestamp(),
        "max_record_timestamp": newest,
    }


def _rebuilt_state(segment, scratch: Path):
    """The same, with both indexes rebuilt from the segment's data in a scratch directory."""
    from trio_broker.log.segment import LogSegment

    scratch.mkdir()
    shutil.copyfile(segment.log_path, scratch / segment.log_path.name)
    copy = LogSegment(
        scratch,
        segment.base_offset,
        index_interval_bytes=segment.index_interval_bytes,
        max_index_size=10 * 1024 * 1024,
        created_ms=0,
    )
    copy.recover()
    state = _segment_state(copy)
    copy.close_handlers()
    return state


def _compacted_log(directory: Path):
    from trio_broker.log.config import LogConfig
    from trio_broker.log.loader import load_log
    from trio_broker.protocol.record_codec import build_batch
    from trio_broker.protocol.records import iter_batches

    config = LogConfig(
        cleanup_policy=("compact",),
        segment_bytes=6000,
        index_interval_bytes=200,  # many index entries per segment
        delete_retention_ms=86_400_000,
    )
    log = load_log(directory, "swapped", 0, config, now_ms=lambda: 1_700_000_000_000)
    for i in range(400):
        # Timestamps go up and down, so the largest one is not the last record's.
        ts = 1_700_000_000_000 - 100_000 + (i * 7919) % 5000
        # Early keys come back later (their records go); later keys are written twice in a
        # row (one of each pair stays), so every segment keeps some records.
        key = b"k%02d" % (i * 13 % 40) if i < 60 or i % 5 == 0 else b"n%03d" % (i // 2)
        buf = bytearray(build_batch([(key, b"v%04d" % i + b"." * (i % 30), [], ts)]))
        log.append_as_leader(buf, [h for _, h in iter_batches(buf)], leader_epoch=0)
    log.high_watermark = log.log_end_offset
    return config, log


@pytest.mark.parametrize("steps", range(-1, len(SWAP_STEPS) + 1))
def test_crash_at_each_swap_step_leaves_old_or_new_segment_with_complete_indexes(tmp_path, steps):
    """steps = -1: a half-written `.log.cleaned`; 0: the `.cleaned` files complete; k:
    the first k renames of SWAP_STEPS done. Then kill -9 and load the log again."""
    from trio_broker.log.cleaner import _build_offset_map, _plan, _write_cleaned, clean_log
    from trio_broker.log.loader import load_log

    part = tmp_path / "swapped-0"
    config, log = _compacted_log(part)
    assert len(log.segments) >= 4
    end = log.log_end_offset
    slot = 1  # a segment in the middle of the log
    base = log.segments[slot].base_offset
    old = _segment_state(log.segments[slot])

    # The new segment as a complete clean leaves it, from a copy of the directory.
    reference = tmp_path / "reference"
    shutil.copytree(part, reference)
    ref_log = load_log(reference, "swapped", 0, config, now_ms=lambda: 1_700_000_000_000)
    ref_log.high_watermark = ref_log.log_end_offset
    assert clean_log(ref_log, first_dirty_offset=0, now_ms=1_700_000_000_000, force=True)
    new = _segment_state(ref_log.segments[slot])
    assert new["records"] and new["records"] != old["records"]
    final_files = {
        suffix: (reference / f"{base:020d}{suffix}").read_bytes()
        for suffix in (".log", ".index", ".timeindex")
    }
    ref_log.close_handlers()

    # The cleaner's own steps, up to the crash.
    plan = _plan(log, first_dirty_offset=0, now_ms=1_700_000_000_000, force=True)
    assert plan is not None
    assert _write_cleaned(plan, slot, _build_offset_map(plan))
    plan.pending.close_handlers()  # kill -9: no more writes from this process
    plan.pending = None
    plan.close()
    log.close_handlers()
    if steps < 0:
        cleaned = part / f"{base:020d}.log.cleaned"
        os.truncate(cleaned, cleaned.stat().st_size // 2)
    for kind, src, dst in SWAP_STEPS[: max(steps, 0)]:
        name = f"{base:020d}.{kind}"
        os.replace(part / (name + src), part / (name + dst))
    if steps == len(SWAP_STEPS):
        # The finished swap is byte for byte what the cleaner itself leaves.
        for suffix, data in final_files.items():
            assert (part / f"{base:020d}{suffix}").read_bytes() == data

    # Restart after the crash; everything was flushed, so nothing below the log end is
    # rebuilt unless the loader decides so.
    reopened = load_log(
        part, "swapped", 0, config, clean_shutdown=False, recovery_point=end, high_watermark=end
    )
    try:
        assert not [n for n in os.listdir(part) if n.endswith((".cleaned", ".swap"))]
        assert reopened.log_end_offset == end
        assert [s.base_offset for s in reopened.segments] == [s.base_offset for s in log.segments]
        segment = reopened.segments[slot]
        got = _segment_state(segment)
        assert got == (new if steps >= COMMIT_STEP else old)
        for i, seg in enumerate(reopened.segments):
            assert _segment_state(seg) == _rebuilt_state(seg, tmp_path / f"scratch-{i}")
        # Index lookups through the log land on the right records.
        for offset, _, _ in got["records"]:
            read = reopened.read(offset, 1)
            assert read.first_offset <= offset < read.next_offset
        # The largest timestamp is the newest record's kept in the segment, not older.
        assert segment.largest_timestamp() == got["max_record_timestamp"]
        assert got["time_index"][0][-1] == got["max_record_timestamp"]
    finally:
        reopened.close_handlers()
