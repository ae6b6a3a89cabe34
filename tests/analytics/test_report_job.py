"""The nightly report over a log written by trio-broker's own log, with a known history.

One Spark session (local[2]: conftest.py's `spark`, shared with test_report_page.py). The
log (see `_write_scenario`) holds:

- `orders-0` (produced through a real broker with confluent-kafka): 10 minutes from T0, each minute two batches of 5 records, batch j of minute
  m at T0 + m min + j s, records 100 ms apart; offsets 10m + 5j .. 10m + 5j + 4.
- `orders-1`: empty.
- `users-0`: a compacted segment: [0, 2, 4] (last offset 4), [7, 9] (last offset 9),
  [10..14]; 15 offsets, 10 records.
- `crashy-0`: 3 batches, then half a batch (a torn tail).
- commits in `__consumer_offsets` (commit timestamps known), see each test.

The report window is [T0, T0 + 10 min), so "report time" is T0 + 600 s.
"""

from __future__ import annotations

import shutil
import struct
import time
from pathlib import Path
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (extra 'analytics')")
if shutil.which("java") is None:
    pytest.skip("Java 17 is needed for Spark and is not installed", allow_module_level=True)

from trio_broker.analytics.job import ReportOptions, run_report  # noqa: E402
from trio_broker.analytics.segments import (  # noqa: E402
    list_segments,
    pack_segments,
    scan_batch_headers,
)
from trio_broker.log import LogManager  # noqa: E402
from trio_broker.protocol._generated.offset_commit_key import OffsetCommitKey  # noqa: E402
from trio_broker.protocol._generated.offset_commit_value import OffsetCommitValue  # noqa: E402
from trio_broker.protocol.record_codec import Record, build_batch  # noqa: E402
from trio_broker.protocol.records import validate_batches  # noqa: E402

T0 = 1_714_521_600_000  # 2024-05-01T00:00:00Z
MIN = 60_000
UNTIL = T0 + 10 * MIN
VALUE = b"v" * 40
# The `__consumer_offsets` partition of `_write_today`'s commits, one the live broker's
# groups (rc-group, ru-group) do not hash to.
TODAY_OFFSETS_PARTITION = 49


def _orders_batches() -> list[bytes]:
    out = []
    for m in range(10):
        for j in range(2):
            start = T0 + m * MIN + j * 1000
            out.append(build_batch([(b"k%d" % i, VALUE, [], start + 100 * i) for i in range(5)]))
    return out


def _append(log, batch: bytes) -> None:
    buf = bytearray(batch)
    log.append_as_leader(buf, validate_batches(buf), leader_epoch=0)


def _commit_record(group: str, topic: str, partition: int, offset: int, ts: int):
    key = struct.pack(">h", 1) + bytes(
        OffsetCommitKey(group=group, topic=topic, partition=partition).encode(1)
    )
    value = struct.pack(">h", 3) + bytes(
        OffsetCommitValue(offset=offset, leader_epoch=0, metadata="", commit_timestamp=ts).encode(3)
    )
    return (key, value, [], ts)


# group -> [(topic, partition, committed offset, commit time)]
COMMITS = {
    # keeps up: commits the log end offset 30 s into each minute
    "fast": [("orders", 0, 10 * (m + 1), T0 + m * MIN + 30_000) for m in range(10)],
    # advances at half the produce rate: lag grows 5 per commit
    "slow": [("orders", 0, 5 * (m + 1), T0 + m * MIN + 30_000) for m in range(10)],
    # committed three times, then went quiet
    "quitter": [("orders", 0, 5 * (m + 1), T0 + m * MIN + 30_000) for m in range(3)],
    # commits the same offset every minute
    "stuck": [("orders", 0, 5, T0 + m * MIN + 30_000) for m in range(10)],
    # reset its offsets back to 5 after the third commit
    "rewinder": [
        ("orders", 0, off, T0 + m * MIN + 30_000) for m, off in enumerate([5, 10, 15, 5, 10, 15])
    ],
    # on the compacted topic
    "users-reader": [("users", 0, 5, T0 + 250_000)],
}


def _leader_of(client, topic: str, partition: int) -> int:
    """The leader `client` knows for the partition, -1 if none yet."""
    known = client.list_topics(topic, timeout=10).topics[topic].partitions.get(partition)
    return -1 if known is None else known.leader


def _produce_orders(broker_dir: Path) -> None:
    """Write `orders` through the broker's real produce path (confluent-kafka)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from trio_broker.testing import BrokerThread

    config = {"log.dirs": str(broker_dir)}
    with BrokerThread(config) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result(10)
        # batch.num.messages=5 with a linger longer than any stall makes each batch exactly
        # 5 records (flush() sends at once whatever the linger; a loaded machine can stall
        # the producing thread for more than the 1 s this used to be).
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "linger.ms": 60000,
                "batch.num.messages": 5,
                "compression.type": "none",
                "enable.idempotence": False,
            }
        )
        # The producer must know partition 0's leader before the first record: a record
        # for a topic it has no metadata for waits unassigned, and librdkafka hands such
        # records to the partition one by one, each its own batch while flush() runs.
        deadline = time.monotonic() + 10
        while _leader_of(producer, "orders", 0) < 0:
            assert time.monotonic() < deadline, "the producer never learned orders-0's leader"
            time.sleep(0.05)
        failures = []

        def on_delivery(err, msg):
            if err is not None:
                failures.append(err)

        for m in range(10):
            for j in range(2):
                start = T0 + m * MIN + j * 1000
                for i in range(5):
                    producer.produce(
                        "orders",
                        key=b"k%d" % i,
                        value=VALUE,
                        partition=0,
                        timestamp=start + 100 * i,
                        on_delivery=on_delivery,
                    )
                assert producer.flush(10) == 0
        assert failures == []


def _write_scenario(root: Path) -> dict[str, int]:
    """`root/broker`: the broker's log dir; `root/logs`: written with the log API."""
    _produce_orders(root / "broker")
    log_dir = root / "logs"
    manager = LogManager([log_dir], node_id=1, cluster_id="report-test")
    manager.open()
    crashy = manager.create_log("crashy", 0)
    for n in range(3):
        _append(crashy, build_batch([(None, VALUE, [], T0 + n * 1000)]))
    offsets = manager.create_log("__consumer_offsets", 0)
    # One batch per commit, as the group coordinator appends them, in commit-time order.
    everything = sorted(
        (ts, group, topic, partition, offset)
        for group, rows in COMMITS.items()
        for topic, partition, offset, ts in rows
    )
    for ts, group, topic, partition, offset in everything:
        _append(offsets, build_batch([_commit_record(group, topic, partition, offset, ts)]))
    manager.checkpoint()
    manager.close()

    # What the cleaner leaves of a compacted partition: gaps inside and between batches.
    users = log_dir / "users-0"
    users.mkdir()
    compacted = [
        build_batch(
            [
                Record(offset=o, timestamp=T0 + 100_000 + 100 * i, key=b"u%d" % o, value=VALUE)
                for i, o in enumerate((0, 2, 4))
            ],
            base_offset=0,
            last_offset_delta=4,
        ),
        build_batch(
            [
                Record(offset=o, timestamp=T0 + 200_000 + 100 * i, key=b"u%d" % o, value=VALUE)
                for i, o in enumerate((7, 9))
            ],
            base_offset=5,
            last_offset_delta=4,
        ),
        build_batch(
            [
                Record(offset=10 + i, timestamp=T0 + 300_000 + 100 * i, key=b"w%d" % i, value=VALUE)
                for i in range(5)
            ],
            base_offset=10,
        ),
    ]
    (users / "00000000000000000000.log").write_bytes(b"".join(compacted))

    # A crash in the middle of writing a fourth batch.
    torn = build_batch([(None, VALUE, [], T0 + 3000)])
    with open(log_dir / "crashy-0" / "00000000000000000000.log", "ab") as f:
        f.write(torn[: len(torn) // 2])
    return {
        "orders_batch_bytes": len(_orders_batches()[0]),
        "log_dirs": [root / "broker", root / "logs"],
    }


@pytest.fixture(scope="module")
def report(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    facts = _write_scenario(root)
    options = ReportOptions(
        log_dirs=(str(root / "broker"), str(root / "logs")),
        out=str(root / "out"),
        since_ms=T0,
        until_ms=UNTIL,
    )
    result = run_report(spark, options)
    return result, facts


def _read(spark, result, table):
    return [r.asDict() for r in spark.read.parquet(str(result.out / table)).collect()]


def _report_last_hour(spark, log_dirs, out):
    """The report over live log directories, for the hour up to now; with partition_state
    by (topic, partition)."""
    now = int(time.time() * 1000)
    options = ReportOptions(
        log_dirs=tuple(str(d) for d in log_dirs),
        out=str(out),
        since_ms=now - 3_600_000,
        until_ms=now + 60_000,
    )
    result = run_report(spark, options)
    state = {(r["topic"], r["partition"]): r for r in _read(spark, result, "partition_state")}
    return result, state


def _at_report(spark, result):
    rows = _read(spark, result, "group_partition_lag")
    return {(r["group"], r["topic"], r["partition"]): r for r in rows if r["kind"] == "report"}


# -- the scan, without Spark ----------------------------------------------------------------


def test_torn_tail_and_empty_partition_scan(report):
    result, facts = report
    segs = {(s.topic, s.partition): s for s in list_segments(facts["log_dirs"])}
    assert segs[("orders", 1)].size == 0
    assert list(scan_batch_headers(segs[("orders", 1)])) == []
    crashy = list(scan_batch_headers(segs[("crashy", 0)]))
    assert [row[4] for row in crashy] == [0, 1, 2]  # base offsets; the torn 4th is skipped
    users = list(scan_batch_headers(segs[("users", 0)]))
    # (base offset, last offset, record count)
    assert [(r[4], r[5], r[6]) for r in users] == [(0, 4, 3), (5, 9, 2), (10, 14, 5)]


def test_pack_segments_keeps_big_ones_alone():
    from trio_broker.analytics.segments import SegmentFile

    def seg(n, size):
        return SegmentFile(path=f"/x/{n}", topic="t", partition=0, base_offset=n, size=size)

    mib = 1024 * 1024
    big = [seg(i, 200 * mib) for i in range(3)]
    small = [seg(100 + i, 1 * mib) for i in range(50)]
    packs = pack_segments(big + small, max_partition_bytes=128 * mib, parallelism=2)
    assert sorted(len(p) for p in packs if p[0].size == 200 * mib) == [1, 1, 1]
    packed_small = [p for p in packs if p[0].size == mib]
    assert sum(len(p) for p in packed_small) == 50
    assert all(sum(s.size + 4 * mib for s in p) <= 128 * mib for p in packed_small)
    assert len(packed_small) == 2  # 50 x 5 MiB of cost over 128 MiB packs


# -- the tables -----------------------------------------------------------------------------


def test_batches_table(spark, report):
    result, facts = report
    rows = _read(spark, result, "batches")
    orders = sorted((r for r in rows if r["topic"] == "orders"), key=lambda r: r["base_offset"])
    assert len(orders) == 20
    assert orders[3]["base_offset"] == 15 and orders[3]["last_offset"] == 19
    assert orders[3]["base_timestamp"] == T0 + MIN + 1000
    assert orders[3]["max_timestamp"] == T0 + MIN + 1400
    assert orders[3]["batch_bytes"] == facts["orders_batch_bytes"]
    assert orders[3]["codec"] == "none" and not orders[3]["is_control"]
    assert str(orders[0]["date"]) == "2024-05-01"
    assert sorted(r["base_offset"] for r in rows if r["topic"] == "crashy") == [0, 1, 2]
    assert not any(r["topic"] == "__consumer_offsets" for r in rows)


def test_partition_state(spark, report):
    result, _ = report
    state = {(r["topic"], r["partition"]): r for r in _read(spark, result, "partition_state")}
    assert state[("orders", 0)]["log_start_offset"] == 0
    assert state[("orders", 0)]["log_end_offset"] == 100
    assert state[("orders", 0)]["records"] == 100
    assert state[("orders", 0)]["segments"] == 1
    empty = state[("orders", 1)]
    assert (empty["log_end_offset"], empty["records"], empty["batches"]) == (0, 0, 0)
    assert empty["first_timestamp"] is None
    users = state[("users", 0)]
    assert (users["log_end_offset"], users["records"], users["batches"]) == (15, 10, 3)
    assert state[("crashy", 0)]["log_end_offset"] == 3


def test_topic_throughput(spark, report):
    result, facts = report
    rows = [r for r in _read(spark, result, "topic_throughput") if r["topic"] == "orders"]
    assert len(rows) == 10  # one bucket per minute
    size = facts["orders_batch_bytes"]
    for r in rows:
        assert (r["batches"], r["records"], r["bytes"]) == (2, 10, 2 * size)
        assert r["records_per_sec"] == pytest.approx(10 / 60)
        assert r["bytes_per_sec"] == pytest.approx(2 * size / 60)
        assert r["p50_batch_bytes"] == size and r["p99_batch_bytes"] == size
        assert r["p50_batch_records"] == 5 and r["p99_batch_records"] == 5


def test_lag_at_each_commit(spark, report):
    result, _ = report
    rows = _read(spark, result, "group_partition_lag")
    slow = sorted(
        (r for r in rows if r["group"] == "slow" and r["kind"] == "commit"),
        key=lambda r: r["timestamp"],
    )
    assert [r["committed_offset"] for r in slow] == [5 * (m + 1) for m in range(10)]
    # Every batch of minute m is in the log 30 s into minute m: log end 10(m+1).
    assert [r["log_end_offset"] for r in slow] == [10 * (m + 1) for m in range(10)]
    assert [r["lag_records"] for r in slow] == [5 * (m + 1) for m in range(10)]
    # The first unconsumed record opens batch m+1: at minute (m+1)//2, second (m+1)%2.
    assert [r["lag_seconds"] for r in slow] == [
        (m * MIN + 30_000 - ((m + 1) // 2 * MIN + (m + 1) % 2 * 1000)) / 1000 for m in range(10)
    ]
    assert slow[0]["consume_rate"] is None
    assert [r["consume_rate"] for r in slow[1:]] == [pytest.approx(5 / 60)] * 9
    assert [r["produce_rate"] for r in slow[1:]] == [pytest.approx(10 / 60)] * 9
    # Burrow: one commit is a window whose offset never moved (STALL); then lag only grows.
    assert [r["status"] for r in slow] == ["STALL"] + ["WARN"] * 9
    fast = [r for r in rows if r["group"] == "fast" and r["kind"] == "commit"]
    assert {(r["lag_records"], r["lag_seconds"], r["status"]) for r in fast} == {(0, 0.0, "OK")}


def test_lag_and_status_at_report_time(spark, report):
    result, _ = report
    now = _at_report(spark, result)
    fast = now[("fast", "orders", 0)]
    assert (fast["log_end_offset"], fast["lag_records"], fast["lag_seconds"]) == (100, 0, 0.0)
    assert fast["status"] == "OK"
    slow = now[("slow", "orders", 0)]
    # Offset 50 opens minute 5's first batch (T0 + 300 s); report time is T0 + 600 s.
    assert (slow["committed_offset"], slow["lag_records"], slow["lag_seconds"]) == (50, 50, 300.0)
    assert slow["status"] == "WARN"
    quitter = now[("quitter", "orders", 0)]
    # Last commit 15 at T0 + 150 s: offset 15 opens T0 + 61 s's batch.
    assert (quitter["lag_records"], quitter["lag_seconds"]) == (85, 539.0)
    # 450 s since the last commit > 120 s spanned by the window: stopped committing.
    assert quitter["status"] == "STOP"
    stuck = now[("stuck", "orders", 0)]
    assert (stuck["lag_records"], stuck["lag_seconds"], stuck["status"]) == (95, 599.0, "STALL")
    assert now[("rewinder", "orders", 0)]["status"] == "REWIND"


def test_compacted_topic_lag(spark, report):
    result, _ = report
    rows = _read(spark, result, "group_partition_lag")
    commit = next(r for r in rows if r["group"] == "users-reader" and r["kind"] == "commit")
    # At T0 + 250 s the log holds offsets 0-9 (5 records); 5 and 6 were compacted away, so
    # the next record (7) opens the batch stamped T0 + 200 s.
    assert (commit["log_end_offset"], commit["lag_offsets"], commit["lag_records"]) == (10, 5, 2)
    assert commit["lag_seconds"] == 50.0
    now = _at_report(spark, result)[("users-reader", "users", 0)]
    assert (now["log_end_offset"], now["lag_offsets"], now["lag_records"]) == (15, 10, 7)
    assert now["lag_seconds"] == 400.0
    assert now["status"] == "STOP"


def test_group_summary_and_report_files(spark, report):
    result, _ = report
    summary = {r["group"]: r for r in _read(spark, result, "group_summary")}
    assert summary["fast"]["status"] == "OK"
    assert summary["slow"]["status"] == "WARN"
    assert summary["quitter"]["status"] == "ERR"
    assert summary["quitter"]["stopped_partitions"] == 1
    assert summary["stuck"]["stalled_partitions"] == 1
    assert summary["slow"]["total_lag_records"] == 50
    assert summary["slow"]["max_lag_seconds"] == 300.0
    assert str(summary["slow"]["date"]) == "2024-05-01"
    html = result.html_path.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html
    assert "<script" not in html and "http://" not in html.replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )
    assert "quitter" in html and "STOP" in html
    md = result.markdown_path.read_text()
    assert "| slow | WARN | 50 | 300.0 | 0 | 0 |" in md


# -- the command line -----------------------------------------------------------------------


def test_report_subcommand_arguments():
    import argparse

    from trio_broker import report_cli
    from trio_broker.analytics.job import options_from_args

    parser = argparse.ArgumentParser(prog="trio-broker")
    report_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["report", "--log-dirs", "/a,/b", "--out", "/o", "--date", "2024-05-01", "--bucket", "5m"]
    )
    opts = options_from_args(args)
    assert opts.log_dirs == ("/a", "/b")
    assert (opts.since_ms, opts.until_ms, opts.bucket_ms) == (T0, T0 + 86_400_000, 300_000)
    args = parser.parse_args(
        [
            "report",
            "--log-dirs",
            "/a",
            "--out",
            "/o",
            "--since",
            "2024-05-01T00:00:00Z",
            "--until",
            str(UNTIL),
        ]
    )
    assert (options_from_args(args).since_ms, options_from_args(args).until_ms) == (T0, UNTIL)
    yesterday = options_from_args(
        parser.parse_args(["report", "--log-dirs", "/a", "--out", "/o"]), now_ms=T0 + 3_600_000
    )
    assert (yesterday.since_ms, yesterday.until_ms) == (T0 - 86_400_000, T0)


# -- a window that contains the present ---------------------------------------------------


def _write_today(log_dir: Path, now: int) -> None:
    """`live-0`: offsets 0-9 produced 50 s before `now`, 10-19 5 s before; group `today`
    committed 5, 8 and 10 at 40, 20 and 4 s before. The commits go to a
    `__consumer_offsets` partition the live broker left empty (as if another broker led
    it): of a partition found in several log dirs only the fullest replica is read."""
    manager = LogManager([log_dir], node_id=1, cluster_id="report-today")
    manager.open()
    live = manager.create_log("live", 0)
    for start in (now - 50_000, now - 5_000):
        _append(live, build_batch([(None, VALUE, [], start + i) for i in range(10)]))
    offsets = manager.create_log("__consumer_offsets", TODAY_OFFSETS_PARTITION)
    for offset, ago in ((5, 40_000), (8, 20_000), (10, 4_000)):
        _append(offsets, build_batch([_commit_record("today", "live", 0, offset, now - ago)]))
    manager.checkpoint()
    manager.close()


def test_todays_report_measures_lag_now_not_at_the_windows_end(spark, live_report):
    """`report --date <today>`: the window ends at midnight, hours ahead; a group 10
    records behind, produced 5 s ago, is 5 s behind now, and consuming (not STOP). The
    report is `live_report`'s, whose window also ends hours after the present."""
    import argparse
    import datetime as dt

    from trio_broker.analytics.job import options_from_args

    result, _state, facts = live_report
    now = facts["now"]
    # The window `--date <today>` gives: today's UTC day, which contains the present.
    day = dt.datetime.fromtimestamp(now / 1000, dt.UTC).date()
    args = argparse.Namespace(
        log_dirs="/a",
        out="/o",
        date=day.isoformat(),
        since=None,
        until=None,
        bucket=60_000,
        master=None,
        intervals=10,
        no_html=False,
    )
    options = options_from_args(args, now_ms=now)
    assert options.since_ms <= now < options.until_ms and options.now_ms == now
    assert facts["until"] - now >= 3_600_000  # the report's window ends hours ahead too

    row = _at_report(spark, result)[("today", "live", 0)]
    assert (row["committed_offset"], row["log_end_offset"], row["lag_records"]) == (10, 20, 10)
    # Offset 10 was stamped now - 5 s: that is the lag, not the hours until the window's end.
    assert row["lag_seconds"] == 5.0
    assert row["status"] == "OK"
    assert row["timestamp"].timestamp() * 1000 == now
    summary = {r["group"]: r for r in _read(spark, result, "group_summary")}
    assert (summary["today"]["status"], summary["today"]["max_lag_seconds"]) == ("OK", 5.0)
    assert f"lag measured at {dt.datetime.fromtimestamp(now / 1000, dt.UTC):%Y-%m-%d %H:%M}" in (
        result.markdown_path.read_text()
    )


# -- transactions, from a live broker: committed records only, lag to the LSO ---------------


def _committed_and_aborted(bootstrap: str, log_dir: Path) -> None:
    """A real transactional producer (confluent-kafka) commits 3 transactions of 40 records
    and aborts 2 of 25, beside 10 plain records, on `txns`."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from trio_broker.analytics.segments import BATCH_FIELDS, list_segments, scan_batch_headers

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("txns", 1, 1)])["txns"].result(30)
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        plain.produce("txns", b"plain-%d" % i)
    plain.flush(30)
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "report-txn"})
    txn.init_transactions(30)
    for n, commit in enumerate([True, False, True, False, True]):
        txn.begin_transaction()
        for i in range(40 if commit else 25):
            txn.produce("txns", b"t%d-%d" % (n, i))
        txn.flush(30)  # in the log before the abort (else librdkafka drops them unsent)
        txn.commit_transaction(30) if commit else txn.abort_transaction(30)
    txn.flush(30)

    rows = [r for s in list_segments([log_dir]) if s.topic == "txns"
            for r in scan_batch_headers(s)]  # fmt: skip
    count, is_aborted, is_control = (
        BATCH_FIELDS.index(f) for f in ("record_count", "is_aborted", "is_control")
    )
    aborted = sum(r[count] for r in rows if r[is_aborted])
    markers = sum(1 for r in rows if r[is_control])
    assert (aborted, markers) == (50, 5)  # what the log holds besides committed data


def _open_transaction(bootstrap: str) -> tuple[Any, dict[str, int]]:
    """On `pending`: a real transactional producer commits a transaction, then leaves one
    open, with plain records after it; a read_committed group and a read_uncommitted one
    consume what they can and commit. Returns the producer (its transaction still open:
    the caller aborts it after the report) and what the broker and the groups said."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("pending", 1, 1)])["pending"].result(30)
    plain = Producer({"bootstrap.servers": bootstrap})

    def produce_plain(n: int, tag: bytes) -> None:
        for i in range(n):
            plain.produce("pending", b"%s-%d" % (tag, i))
        assert plain.flush(30) == 0

    produce_plain(10, b"plain")  # offsets 0-9
    # The transaction stays open through the report, which a loaded machine can stretch
    # past librdkafka's default 60 s transaction timeout (the broker would abort it).
    txn = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "report-open-txn",
            "transaction.timeout.ms": 900_000,
        }
    )
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(20):
        txn.produce("pending", b"committed-%d" % i)  # 10-29, the COMMIT marker at 30
    txn.commit_transaction(30)
    txn.begin_transaction()
    for i in range(15):
        txn.produce("pending", b"open-%d" % i)  # 31-45, no marker: open
    assert txn.flush(30) == 0
    produce_plain(5, b"after")  # 46-50
    tp = TopicPartition("pending", 0)

    def consume_and_commit(group: str, isolation: str, wanted: int) -> tuple[int, int]:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "isolation.level": isolation,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.assign([TopicPartition("pending", 0, 0)])
            got = 0
            deadline = time.monotonic() + 30
            while got < wanted and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got += 1
            assert got == wanted
            time.sleep(1)  # nothing more comes (a read_committed consumer waits at the LSO)
            assert consumer.poll(0.5) is None
            (position,) = consumer.position([tp])
            consumer.commit(
                offsets=[TopicPartition("pending", 0, position.offset)], asynchronous=False
            )
            marks = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            return position.offset, marks[1]
        finally:
            consumer.close()

    rc_committed, broker_lso = consume_and_commit("rc-group", "read_committed", 30)
    ru_committed, broker_hw = consume_and_commit("ru-group", "read_uncommitted", 50)
    return txn, {
        "rc_committed": rc_committed,
        "ru_committed": ru_committed,
        "broker_lso": broker_lso,
        "broker_hw": broker_hw,
    }


@pytest.fixture(scope="module")
def live_report(spark, tmp_path_factory):
    """Both transactional scenarios on one live broker, and `_write_today`'s log written
    just after them, then one report over both log dirs (a report costs Spark over ten
    seconds here): from an hour ago to six hours ahead, lag measured at `now`."""
    from trio_broker.testing import BrokerThread

    root = tmp_path_factory.mktemp("live")
    config = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(root / "broker")}
    with BrokerThread(config) as broker:
        _committed_and_aborted(broker.bootstrap, broker.log_dir)
        txn, facts = _open_transaction(broker.bootstrap)
        now = int(time.time() * 1000)
        # The report reads the fullest replica of each partition: the live broker's
        # copy of the partition `today` commits to must be empty.
        broker_copy = Path(broker.log_dir) / f"__consumer_offsets-{TODAY_OFFSETS_PARTITION}"
        assert sum(f.stat().st_size for f in broker_copy.glob("*.log")) == 0
        _write_today(root / "today", now)
        options = ReportOptions(
            log_dirs=(str(broker.log_dir), str(root / "today")),
            out=str(root / "out"),
            since_ms=now - 3_600_000,
            until_ms=now + 6 * 3_600_000,
            now_ms=now,
        )
        result = run_report(spark, options)
        state = {(r["topic"], r["partition"]): r for r in _read(spark, result, "partition_state")}
        txn.abort_transaction(30)
        yield result, state, {**facts, "now": now, "until": options.until_ms}


def test_report_counts_committed_records_only(spark, live_report):
    """The log of `txns` holds 50 aborted records and 5 markers besides committed data: the
    report counts 130 records, as a read_committed consumer would read."""
    result, state, _facts = live_report
    assert state[("txns", 0)]["records"] == 130
    assert state[("txns", 0)]["log_end_offset"] == 10 + 3 * 40 + 2 * 25 + 5
    throughput = [r for r in _read(spark, result, "topic_throughput") if r["topic"] == "txns"]
    assert sum(r["records"] for r in throughput) == 130


def test_lag_of_read_committed_groups_is_measured_to_the_lso(spark, live_report):
    """A read_committed group can read only up to the last stable offset; a
    read_uncommitted one reads to the end. The report computes from the log the LSO the
    broker answers to ListOffsets(read_committed), and measures `lag_committed` to it: 0
    for the read_committed group, while its `lag_offsets` counts what the open transaction
    holds back."""
    result, state, facts = live_report
    rc_committed, ru_committed = facts["rc_committed"], facts["ru_committed"]
    broker_lso, broker_hw = facts["broker_lso"], facts["broker_hw"]
    assert (broker_lso, broker_hw) == (31, 51)
    assert rc_committed in (30, 31)  # after the last record read, or past the marker too
    assert ru_committed == 51

    # 31, not 10: the committed transaction (10-29, its marker at 30) is not open.
    assert state[("pending", 0)]["last_stable_offset"] == broker_lso
    assert state[("pending", 0)]["log_end_offset"] == broker_hw
    lag = _read(spark, result, "group_partition_lag")
    for kind in ("commit", "report"):
        rows = {r["group"]: r for r in lag if r["topic"] == "pending" and r["kind"] == kind}
        rc, ru = rows["rc-group"], rows["ru-group"]
        assert (rc["last_stable_offset"], rc["log_end_offset"]) == (31, 51), kind
        assert rc["lag_committed"] == 31 - rc_committed
        assert rc["lag_offsets"] == 51 - rc_committed
        assert (ru["lag_committed"], ru["lag_offsets"]) == (0, 0)
    summary = {r["group"]: r for r in _read(spark, result, "group_summary")}
    assert summary["rc-group"]["total_lag_committed"] == 31 - rc_committed
    assert summary["ru-group"]["total_lag_committed"] == 0


# -- a cluster: every replica's log dir given, each partition read once ---------------------


def test_report_over_a_cluster_reads_each_partition_once(spark, kafka_cluster, tmp_path):
    """Three brokers holding three replicas of every partition: the report over all their
    log dirs counts each record once (not three times), and each partition's end offset is
    its high watermark."""

    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = kafka_cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 30  # every broker registered: RF 3 can be placed
    while len(admin.list_topics(timeout=10).brokers) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    admin.create_topics([NewTopic("replicated", 3, 3)])["replicated"].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(600):
        producer.produce("replicated", b"r-%d" % i, partition=i % 3)
        producer.poll(0)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw"})
    hw = {p: consumer.get_watermark_offsets(TopicPartition("replicated", p), timeout=10)[1]
          for p in range(3)}  # fmt: skip
    consumer.close()
    assert hw == {0: 200, 1: 200, 2: 200}
    # Every follower has caught up (its log holds the leader's batches) before the report.
    dirs = [b.log_dir for b in kafka_cluster.brokers.values()]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        sizes = {
            (d, p): sum(f.stat().st_size for f in (d / f"replicated-{p}").glob("*.log"))
            for d in dirs
            for p in range(3)
        }
        if all(sizes.values()) and all(len({sizes[(d, p)] for d in dirs}) == 1 for p in range(3)):
            break
        time.sleep(0.1)
    result, state = _report_last_hour(spark, dirs, tmp_path / "out")
    for p in range(3):
        assert state[("replicated", p)]["records"] == 200
        assert state[("replicated", p)]["log_end_offset"] == hw[p]
    throughput = [r for r in _read(spark, result, "topic_throughput") if r["topic"] == "replicated"]
    assert sum(r["records"] for r in throughput) == 600


# -- a Spark standalone cluster: the same tables as local[2] --------------------------------


def _rows(spark, out: Path, table: str) -> list[dict]:
    rows = [r.asDict() for r in spark.read.parquet(str(out / table)).collect()]
    return sorted(rows, key=repr)


def test_report_on_a_standalone_cluster_writes_the_same_tables(spark, report, tmp_path):
    """`trio-broker report --master spark://...` against a master and a worker started with
    pyspark's `spark-class` on loopback: the job runs in the worker's executor and writes
    the same rows, in every table, as the local[2] run of the `report` fixture."""
    import subprocess
    import sys

    from trio_broker.analytics.job import TABLES
    from trio_broker.analytics.standalone import StandaloneCluster

    local, facts = report
    out = tmp_path / "out"
    with StandaloneCluster(tmp_path / "spark", cores=2, memory="1g") as cluster:
        command = [sys.executable, "-m", "trio_broker", "report", "--master", cluster.master_url,
                   "--log-dirs", ",".join(str(d) for d in facts["log_dirs"]), "--out", str(out),
                   "--since", str(T0), "--until", str(UNTIL)]  # fmt: skip
        done = subprocess.run(
            command, env=cluster.env(), capture_output=True, text=True, timeout=600
        )
    assert done.returncode == 0, done.stderr[-4000:]
    # The executor ran in the worker (its work dir holds the application's stderr).
    executors = list((tmp_path / "spark" / "work").glob("app-*/*/stderr"))
    assert executors, done.stderr[-4000:]
    for table in TABLES:
        expected = _rows(spark, local.out, table)
        assert expected, table
        assert _rows(spark, out, table) == expected, table
    assert (out / "report-2024-05-01.md").read_text() == local.markdown_path.read_text()
