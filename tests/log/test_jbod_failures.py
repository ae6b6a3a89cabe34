"""Several log dirs when things go wrong (issue 17 item 5): a log dir removed under the
broker takes only its partitions offline; AlterReplicaLogDirs answers Kafka's error codes;
a move cut short by kill -9 (or a crash between the swap's renames) leaves the partition
whole after a restart."""

from __future__ import annotations

import shutil
import socket
import time

from test_jbod import consume, create_topics, describe_log_dirs_raw, produce
from wire import request_of, roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.alter_replica_log_dirs_request import (
    AlterReplicaLogDir,
    AlterReplicaLogDirTopic,
)
from trio_broker.protocol._generated.fetch_request import FetchPartition, FetchTopic
from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    TopicProduceData,
)
from trio_broker.protocol.record_codec import build_batch
from trio_broker.testing import BrokerProcess, BrokerThread


class Raw:
    """Kafka requests on one socket, answering the partition's error code."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.cid = 0

    def send(self, request, version: int):
        self.cid += 1
        return roundtrip(self.sock, request, version, correlation_id=self.cid)

    def produce(self, topic: str, value: bytes) -> int:
        batch = build_batch([(b"k", value, (), int(time.time() * 1000))])
        data = [
            TopicProduceData(
                name=topic, partition_data=[PartitionProduceData(index=0, records=batch)]
            )
        ]
        response = self.send(request_of(0, acks=1, timeout_ms=5000, topic_data=data), 9)
        return response.responses[0].partition_responses[0].error_code

    def fetch(self, topic: str) -> int:
        topics = [
            FetchTopic(
                topic=topic, partitions=[FetchPartition(partition=0, partition_max_bytes=1 << 20)]
            )
        ]
        response = self.send(request_of(1, max_wait_ms=0, topics=topics), 4)
        return response.responses[0].partitions[0].error_code

    def alter_log_dir(self, topic: str, path: str, version: int = 1) -> int:
        dirs = [
            AlterReplicaLogDir(
                path=path, topics=[AlterReplicaLogDirTopic(name=topic, partitions=[0])]
            )
        ]
        response = self.send(request_of(34, dirs=dirs), version)
        (result,) = response.results
        assert result.topic_name == topic
        return result.partitions[0].error_code

    def close(self) -> None:
        self.sock.close()


def test_failed_log_dir_takes_only_its_partitions_offline(tmp_path):
    dirs = [tmp_path / "disk0", tmp_path / "disk1"]
    config = {
        "log.dirs": ",".join(str(d) for d in dirs),
        "log.segment.bytes": "4000",  # the next big batch rolls, and the roll needs the dir
        "offsets.topic.num.partitions": "1",
    }
    with BrokerThread(config) as broker:
        create_topics(broker.bootstrap, {"a": 1})
        create_topics(broker.bootstrap, {"b": 1})
        assert (dirs[0] / "a-0").is_dir() and (dirs[1] / "b-0").is_dir()
        raw = Raw(broker.port)
        try:
            assert raw.produce("a", b"a0") == ErrorCode.NONE
            assert raw.produce("b", b"b0") == ErrorCode.NONE
            shutil.rmtree(dirs[1])
            assert raw.produce("b", b"x" * 5000) == ErrorCode.KAFKA_STORAGE_ERROR
            assert raw.produce("b", b"b1") == ErrorCode.KAFKA_STORAGE_ERROR
            assert raw.fetch("b") == ErrorCode.KAFKA_STORAGE_ERROR
            # The partition in the other dir goes on, rolls included.
            assert raw.produce("a", b"y" * 5000) == ErrorCode.NONE
            assert raw.produce("a", b"a2") == ErrorCode.NONE
            assert raw.fetch("a") == ErrorCode.NONE
            # AlterReplicaLogDirs, as Kafka answers it.
            assert raw.alter_log_dir("a", str(dirs[1])) == ErrorCode.KAFKA_STORAGE_ERROR
            assert raw.alter_log_dir("b", str(dirs[0])) == ErrorCode.KAFKA_STORAGE_ERROR
            assert (
                raw.alter_log_dir("a", str(tmp_path / "elsewhere")) == ErrorCode.LOG_DIR_NOT_FOUND
            )
            assert raw.alter_log_dir("a", "disk0", version=2) == ErrorCode.LOG_DIR_NOT_FOUND
            assert (
                raw.alter_log_dir("nope", str(dirs[0]), 2) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            assert raw.alter_log_dir("a", str(dirs[0])) == ErrorCode.NONE  # already there
        finally:
            raw.close()
        by_dir = {d["log_dir"]: d for d in describe_log_dirs_raw(broker.bootstrap)}
        assert by_dir[str(dirs[1])]["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
        assert by_dir[str(dirs[1])]["topics"] == []
        assert by_dir[str(dirs[0])]["error_code"] == ErrorCode.NONE
        assert "a" in {t["name"] for t in by_dir[str(dirs[0])]["topics"]}
        assert consume(broker.bootstrap, "a", 0, 3) == [b"a0", b"y" * 5000, b"a2"]


def _values(n: int, tag: bytes = b"") -> list[bytes]:
    return [tag + b"%06d-" % i + b"." * 300 for i in range(n)]


def test_leftover_future_dirs_after_a_crash(tmp_path):
    """A `-future` dir beside its current dir is dropped; one whose current dir the swap
    already retired (`-delete`) is completed."""
    dirs = [tmp_path / "disk0", tmp_path / "disk1"]
    config = {"log.dirs": ",".join(str(d) for d in dirs), "offsets.topic.num.partitions": "1"}
    with BrokerThread(config) as broker:
        create_topics(broker.bootstrap, {"kept": 1, "swapped": 1})
        produce(broker.bootstrap, "kept", 0, _values(500, b"k"))
        produce(broker.bootstrap, "swapped", 0, _values(500, b"s"))
    kept = next(d / "kept-0" for d in dirs if (d / "kept-0").exists())
    swapped = next(d / "swapped-0" for d in dirs if (d / "swapped-0").exists())
    other = {d: dirs[1 - i] for i, d in enumerate(dirs)}
    # An unfinished copy of kept-0, and a swap of swapped-0 cut between its two renames.
    shutil.copytree(kept, other[kept.parent] / ("kept-0." + "a" * 32 + "-future"))
    shutil.copytree(swapped, other[swapped.parent] / ("swapped-0." + "b" * 32 + "-future"))
    swapped.rename(swapped.parent / ("swapped-0." + "c" * 32 + "-delete"))
    with BrokerThread(config) as broker:
        assert consume(broker.bootstrap, "kept", 0, 500) == _values(500, b"k")
        assert consume(broker.bootstrap, "swapped", 0, 500) == _values(500, b"s")
    leftovers = [
        p.name for d in dirs for p in d.iterdir() if p.name.endswith(("-future", "-delete"))
    ]
    assert leftovers == []
    assert kept.is_dir() and not (other[kept.parent] / "kept-0").exists()
    assert (other[swapped.parent] / "swapped-0").is_dir() and not swapped.exists()


def test_kill_during_a_move_leaves_the_partition_whole(tmp_path):
    dirs = [tmp_path / "disk0", tmp_path / "disk1"]
    config = {
        "log.dirs": ",".join(str(d) for d in dirs),
        "log.segment.bytes": str(256 << 10),
        "offsets.topic.num.partitions": "1",
    }
    broker = BrokerProcess(config)
    try:
        create_topics(broker.bootstrap, {"big": 1})
        values = _values(60_000)
        produce(broker.bootstrap, "big", 0, values)
        source = next(d for d in dirs if (d / "big-0").exists())
        target = next(d for d in dirs if d != source)
        raw = Raw(broker.port)
        try:
            assert raw.alter_log_dir("big", str(target)) == ErrorCode.NONE
            deadline = time.monotonic() + 30
            while not any(p.name.endswith("-future") for p in target.iterdir()):
                assert time.monotonic() < deadline
            broker.kill()  # while the copy is under way
        finally:
            raw.close()
        broker.proc.wait(30)
        broker = BrokerProcess(config)
        assert consume(broker.bootstrap, "big", 0, len(values)) == values
        names = [p.name for d in dirs for p in d.iterdir() if p.name.startswith("big-0")]
        assert names == ["big-0"]
        assert (source / "big-0").is_dir()
    finally:
        if broker.proc.poll() is None:
            broker.stop()
