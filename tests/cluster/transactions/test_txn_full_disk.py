"""Transactions on a full disk (issue 34): a transaction marker, or the `.txnindex` entry of
an abort, that the disk refuses.

The partition's directory is a small tmpfs of its own (the broker's other files, the
transaction log among them, stay on the ordinary disk), filled to the last byte while a
transaction is open, with the segment's last page arranged so that the marker fits in it
or not. The client ends the transaction; the disk is freed a few seconds later. Then:

- an abort whose marker fitted but whose new `.txnindex` did not: read_committed used to
  return the aborted records (the marker was in the log without its index entry), before
  and after a restart. Now the append is undone whole and retried until it fits;
- a commit whose marker did not fit: commit_transaction returned OK and the records stayed
  invisible for good (the coordinator wrote CompleteCommit anyway). Now the transaction
  stays prepared and the marker is retried until written.

A read_committed consumer then reads exactly the committed records, before and after a
clean restart.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from disk import fill_disk, small_tmpfs
from failover_helpers import read_committed
from wire import request_of, roundtrip

from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    TopicProduceData,
)
from trio_broker.protocol.record_codec import build_batch
from trio_broker.testing import BrokerProcess

TOPIC = "t"
PAGE = 4096
MARKER = 78  # bytes of a marker batch


def overrides(data: Path) -> dict[str, str]:
    return {
        "log.dirs": str(data),
        "num.partitions": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        # Small preallocated indexes: the partition's tmpfs holds them.
        "log.index.size.max.bytes": "65536",
    }


def _producer(bootstrap: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "full-disk-writer",
            "linger.ms": 5,
            "log_level": 0,
        }
    )
    producer.init_transactions(30)
    return producer


def _end(producer: Producer, commit: bool) -> None:
    """End the transaction as the client's contract says: call again while retriable."""
    deadline = time.monotonic() + 60
    while True:
        try:
            (producer.commit_transaction if commit else producer.abort_transaction)(30)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _transaction(producer: Producer, values: list[bytes], commit: bool | None) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(TOPIC, value, partition=0)
    producer.flush(30)
    if commit is not None:
        _end(producer, commit)


def _pad(broker: BrokerProcess, segment: Path, wanted: range) -> None:
    """Plain records into the partition until the segment's last page has room for
    `wanted` bytes (room = what is left of the page the file ends in)."""

    def room() -> int:
        size = os.path.getsize(segment)
        return PAGE - size % PAGE if size % PAGE else 0

    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        cid = 0
        overhead = None
        for _attempt in range(10):
            left = room()
            if left in wanted:
                return
            target = (wanted.start + wanted.stop) // 2
            length = (left - target - (overhead or 70)) % PAGE or PAGE
            before = os.path.getsize(segment)
            batch = build_batch([(None, b"p" * length, (), int(time.time() * 1000))])
            data = [
                TopicProduceData(
                    name=TOPIC, partition_data=[PartitionProduceData(index=0, records=batch)]
                )
            ]
            cid += 1
            answer = roundtrip(
                sock, request_of(0, acks=1, timeout_ms=5000, topic_data=data), 9, cid
            )
            assert answer.responses[0].partition_responses[0].error_code == 0
            overhead = os.path.getsize(segment) - before - length
    raise AssertionError(f"could not leave {wanted} bytes in the last page: {room()}")


@pytest.fixture
def partition_on_tmpfs(tmp_path):
    """A broker whose topic's partition directory is a 1 MiB tmpfs of its own."""
    data = tmp_path / "data"
    broker = BrokerProcess(overrides(data))
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        producer.produce(TOPIC, b"first")  # the topic, auto-created
        assert producer.flush(30) == 0
        broker.stop()
        directory = data / f"{TOPIC}-0"
        saved = tmp_path / "saved"
        shutil.copytree(directory, saved)
        with small_tmpfs(directory, "1m") as disk:
            for f in saved.iterdir():
                shutil.copy2(f, disk / f.name)
            broker.start_again()
            yield broker, disk
            broker.close()
    finally:
        broker.close()


def _check_read_committed(broker: BrokerProcess, committed: list[bytes], aborted: list[bytes]):
    visible = read_committed(broker.bootstrap, TOPIC, 1, set(committed), budget_s=30)[0]
    values = [v for v in visible if v not in (b"first",) and not v.startswith(b"p")]
    shown = [v for v in values if v in set(aborted)]
    assert not shown, f"{len(shown)} aborted records read by read_committed: {shown[:3]}"
    assert sorted(values) == sorted(committed), (
        f"read_committed read {len(values)} records, expected the {len(committed)} "
        "committed:\n" + "".join(broker.lines[-40:])
    )


def test_an_abort_whose_index_entry_did_not_fit(partition_on_tmpfs):
    broker, disk = partition_on_tmpfs
    producer = _producer(broker.bootstrap)
    first = [b"c1-%d" % i for i in range(300)]
    _transaction(producer, first, commit=True)
    doomed = [b"a2-%d" % i for i in range(300)]
    _transaction(producer, doomed, commit=None)
    # The marker fits in the segment's last page; a new .txnindex needs a page of its own.
    _pad(broker, disk / f"{0:020d}.log", range(MARKER + 40, PAGE))
    assert not (disk / f"{0:020d}.txnindex").exists()
    filler = fill_disk(disk, leave=0)
    threading.Timer(3, filler.unlink).start()
    _end(producer, commit=False)
    third = [b"c3-%d" % i for i in range(300)]
    _transaction(producer, third, commit=True)
    _check_read_committed(broker, first + third, doomed)
    broker.stop()
    broker.start_again()
    _check_read_committed(broker, first + third, doomed)


def test_a_commit_whose_marker_did_not_fit(partition_on_tmpfs):
    broker, disk = partition_on_tmpfs
    producer = _producer(broker.bootstrap)
    values = [b"c1-%d" % i for i in range(300)]
    _transaction(producer, values, commit=None)
    # No room for the marker in the segment's last page, and no page free.
    _pad(broker, disk / f"{0:020d}.log", range(1, MARKER - 20))
    filler = fill_disk(disk, leave=0)
    freed = threading.Timer(3, filler.unlink)
    freed.start()
    _end(producer, commit=True)
    freed.join()
    _check_read_committed(broker, values, [])
    broker.stop()
    broker.start_again()
    _check_read_committed(broker, values, [])


def test_a_commit_whose_marker_did_not_fit_survives_a_restart(partition_on_tmpfs):
    """Stopped while the marker is still refused: the decision is in __transaction_state
    (PrepareCommit), and the restarted coordinator writes the marker."""
    broker, disk = partition_on_tmpfs
    producer = _producer(broker.bootstrap)
    values = [b"c1-%d" % i for i in range(300)]
    _transaction(producer, values, commit=None)
    _pad(broker, disk / f"{0:020d}.log", range(1, MARKER - 20))
    filler = fill_disk(disk, leave=0)
    _end(producer, commit=True)
    producer.flush(1)
    broker.stop()
    filler.unlink()
    broker.start_again()
    _check_read_committed(broker, values, [])
