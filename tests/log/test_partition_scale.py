"""Partitions beyond the descriptor limit, and recovery from the recovery point (issue 37).

Real broker processes whose RLIMIT_NOFILE is lowered in the child (`preexec_fn`), spoken to
on the raw Kafka wire: segment files are opened on demand within a budget, so a broker
holds and restarts on more partitions than its descriptor limit; running out of
descriptors fails one request (KAFKA_STORAGE_ERROR), never the log dir. After kill -9,
recovery checks what follows each partition's recovery point and trusts what precedes it.
"""

from __future__ import annotations

import os
import resource
import socket
import time
from pathlib import Path

from wire import encode_request, read_response, request_of, roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.log.checkpoints import read_offset_checkpoint
from trio_broker.protocol._generated.create_topics_request import CreatableTopic
from trio_broker.protocol._generated.create_topics_request import (
    CreateTopicsRequest as CreateTopics,
)
from trio_broker.protocol._generated.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_broker.protocol.record_codec import build_batch
from trio_broker.protocol.records import iter_batches
from trio_broker.testing import BrokerProcess

LIMIT = 256  # descriptors of the child broker, soft and hard
PARTITIONS = 3 * 100  # more than LIMIT: each would hold three files before issue 37


def _low_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def connect(broker: BrokerProcess, timeout: float = 60) -> socket.socket:
    return socket.create_connection((broker.host, broker.port), timeout=timeout)


def create(sock: socket.socket, name: str, partitions: int, **configs: str) -> int:
    body = roundtrip(
        sock,
        CreateTopics(
            topics=[CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)],
            timeout_ms=60_000,
        ),
        5,
    )
    [topic] = body.topics
    return topic.error_code


def produce(sock: socket.socket, topic: str, partitions: range, value: bytes) -> list[int]:
    """Error codes, per partition, of one acks=1 record produced to each."""
    batch = build_batch([(b"k", value, (), int(time.time() * 1000))])
    body = roundtrip(
        sock,
        ProduceRequest(
            acks=1,
            timeout_ms=30_000,
            topic_data=[
                TopicProduceData(
                    name=topic,
                    partition_data=[
                        PartitionProduceData(index=p, records=batch) for p in partitions
                    ],
                )
            ],
        ),
        9,
    )
    return [p.error_code for t in body.responses for p in t.partition_responses]


def end_offsets(sock: socket.socket, topics: dict[str, int]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> latest offset; partitions in error map to -error code."""
    body = roundtrip(
        sock,
        ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=[
                ListOffsetsTopic(
                    name=name,
                    partitions=[
                        ListOffsetsPartition(
                            partition_index=p, current_leader_epoch=-1, timestamp=-1
                        )
                        for p in range(count)
                    ],
                )
                for name, count in topics.items()
            ],
        ),
        7,
    )
    return {
        (t.name, p.partition_index): p.offset if p.error_code == 0 else -p.error_code
        for t in body.topics
        for p in t.partitions
    }


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def fill_descriptors(broker: BrokerProcess) -> list[socket.socket]:
    """Connections (each answered once) until the broker cannot accept one more: its
    descriptors are all in use. The last one waits unaccepted in the listen backlog."""
    held: list[socket.socket] = []
    for _ in range(2 * LIMIT):
        sock = connect(broker, timeout=3)
        held.append(sock)
        sock.sendall(encode_request(request_of(18), 3))
        try:
            read_response(sock, 18, 3)
            continue
        except TimeoutError:
            if open_fds(broker.proc.pid) >= LIMIT:
                return held
        sock.settimeout(60)  # only slow (a busy machine): it is answered
        read_response(sock, 18, 3)
    raise AssertionError(f"the broker accepted {2 * LIMIT} connections under a limit of {LIMIT}")


def test_partitions_beyond_the_descriptor_limit_and_emfile_fails_one_request(tmp_path):
    topics = {f"wide{i}": 100 for i in range(PARTITIONS // 100)}
    broker = BrokerProcess(
        {"log.dirs": str(tmp_path / "logs"), "auto.create.topics.enable": "false"},
        preexec_fn=_low_limit,
    )
    try:
        with connect(broker) as admin:
            for name, count in topics.items():
                assert create(admin, name, count) == ErrorCode.NONE
                assert set(produce(admin, name, range(count), b"first")) == {ErrorCode.NONE}
            assert set(end_offsets(admin, topics).values()) == {1}
            assert open_fds(broker.proc.pid) < LIMIT

            # Out of descriptors: the new topic fails, with an error code; those that
            # exist keep serving (their files stay open in the cache), on the same dir.
            held = fill_descriptors(broker)
            assert create(admin, "late", 4) == ErrorCode.KAFKA_STORAGE_ERROR
            assert set(produce(admin, "wide0", range(100), b"second")) == {ErrorCode.NONE}
            for sock in held:
                sock.close()
            deadline = time.monotonic() + 30
            while create(admin, "late", 4) != ErrorCode.NONE:
                assert time.monotonic() < deadline, "the log dir did not take new partitions"
                time.sleep(0.2)
            assert set(produce(admin, "late", range(4), b"late")) == {ErrorCode.NONE}
        assert not [line for line in broker.lines if "offline" in line]
        topics["late"] = 4
        expected = {
            (name, p): (2 if name == "wide0" else 1) for name, n in topics.items() for p in range(n)
        }

        # Restarts on those partitions, under the same limit, after kill -9 and SIGTERM.
        for stop in (broker.kill, broker.stop):
            stop()
            broker.start_again()
            with connect(broker) as admin:
                assert end_offsets(admin, topics) == expected
                assert set(produce(admin, "wide2", range(100), b"again")) == {ErrorCode.NONE}
            for key in expected:
                if key[0] == "wide2":
                    expected[key] += 1
            assert open_fds(broker.proc.pid) < LIMIT
    finally:
        broker.close()


def _segments(part_dir: Path) -> list[Path]:
    return sorted(part_dir.glob("*.log"))


def test_kill_9_recovers_after_the_recovery_point_and_trusts_before_it(tmp_path):
    logs = tmp_path / "logs"
    broker = BrokerProcess(
        {
            "log.dirs": str(logs),
            "auto.create.topics.enable": "false",
            "log.segment.bytes": "2000",
            "log.flush.offset.checkpoint.interval.ms": "200",
        }
    )
    part_dir = logs / "rp-0"
    try:
        with connect(broker) as admin:
            assert create(admin, "rp", 1) == ErrorCode.NONE
            acked = 0
            for i in range(40):
                assert produce(admin, "rp", range(1), b"early-%03d" % i + b"x" * 200) == [0]
                acked += 1
            # Rolled segments are flushed and the recovery point checkpointed after them.
            deadline = time.monotonic() + 30
            while (
                read_offset_checkpoint(logs / "recovery-point-offset-checkpoint").get(("rp", 0), 0)
                < 20
            ):
                assert time.monotonic() < deadline, "no recovery point checkpointed"
                time.sleep(0.1)
            for i in range(5):
                assert produce(admin, "rp", range(1), b"late-%03d" % i) == [0]
                acked += 1
        broker.kill()
    except BaseException:
        broker.close()
        raise
    recovery_point = read_offset_checkpoint(logs / "recovery-point-offset-checkpoint")[("rp", 0)]
    segments = _segments(part_dir)
    trusted = [
        s for s, nxt in zip(segments, segments[1:], strict=False) if int(nxt.stem) <= recovery_point
    ]
    checked = [s for s in segments if s not in trusted]
    assert trusted and checked
    # Before the recovery point: one byte of a record changed (no recovery would keep it,
    # were the batch's CRC checked). After it: a torn write at the end of the log.
    victim = trusted[0]
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF
    victim.write_bytes(data)
    tail = checked[-1]
    whole = tail.stat().st_size
    with tail.open("ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x2d\x00\x00\x01\x00garbage")

    broker.start_again()
    try:
        with connect(broker) as admin:
            assert end_offsets(admin, {"rp": 1}) == {("rp", 0): acked}
        assert tail.stat().st_size == whole  # the torn tail is gone
        assert victim.read_bytes() == data  # trusted: not read, not truncated
        # The cut is reported, naming the segment after the recovery point.
        cut = [line for line in broker.lines if "truncated" in line]
        assert any(tail.name in line for line in cut)
        assert not any(s.name in line for s in trusted for line in cut)
        # Every batch of the segments after the recovery point is whole and in order.
        offsets = [
            h.base_offset for s in checked for _, h in iter_batches(bytearray(s.read_bytes()))
        ]
        assert offsets == list(range(int(checked[0].stem), acked))
    finally:
        broker.close()
