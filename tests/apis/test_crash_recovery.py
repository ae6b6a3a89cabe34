"""kill -9 while producers stream with acks=1; after restart every acknowledged record is
there exactly once, at its acknowledged offset, and the offsets are contiguous."""

import os
import signal
import struct
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from trio_broker.testing import BrokerProcess, free_port


def start_broker(port, log_dir):
    broker = BrokerProcess(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": str(log_dir),
            "num.partitions": "2",
            "log.segment.bytes": "262144",
        }
    )
    return broker.proc, broker.lines


def test_kill_9_loses_no_acknowledged_record(tmp_path):
    port = free_port()
    log_dir = tmp_path / "data"
    proc, _ = start_broker(port, log_dir)
    acked = {}  # (partition, offset) -> value
    stop = threading.Event()

    def stream():
        producer = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{port}",
                "acks": 1,
                "linger.ms": 2,
                "message.timeout.ms": 3000,
                "retries": 0,
                "reconnect.backoff.max.ms": 100,
                "log_level": 0,
            }
        )

        def on_delivery(err, msg):
            if err is None:
                acked[(msg.partition(), msg.offset())] = msg.value()

        i = 0
        while not stop.is_set():
            try:
                producer.produce(
                    "crash", value=b"record-%08d" % i + b"." * (i % 500), on_delivery=on_delivery
                )
                i += 1
            except BufferError:
                producer.poll(0.01)
            producer.poll(0)
        producer.flush(5)

    thread = threading.Thread(target=stream)
    thread.start()
    deadline = time.monotonic() + 20
    while len(acked) < 20000 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    stop.set()
    thread.join(30)
    assert len(acked) > 1000

    proc, lines = start_broker(port, log_dir)
    try:
        assert any("not shut down cleanly" in line for line in lines)
        consumer = Consumer(
            {
                "bootstrap.servers": f"127.0.0.1:{port}",
                "group.id": "check",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition("crash", p, 0) for p in (0, 1)])
        got = {}
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < 3:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            idle_since = time.monotonic()
            key = (msg.partition(), msg.offset())
            assert key not in got
            got[key] = msg.value()
        consumer.close()
        for partition in (0, 1):
            offsets = sorted(o for p, o in got if p == partition)
            assert offsets == list(range(len(offsets)))  # contiguous from 0
        missing = {k for k in acked if k not in got}
        assert not missing, f"{len(missing)} acknowledged records lost"
        assert all(got[k] == v for k, v in acked.items())
        # Every offset index entry points at the start of a batch holding that offset.
        for part_dir in log_dir.glob("crash-*"):
            for index in part_dir.glob("*.index"):
                base = int(index.stem)
                data = index.read_bytes()
                log = (part_dir / f"{index.stem}.log").read_bytes()
                for i in range(0, len(data) - 7, 8):
                    rel, pos = struct.unpack_from(">ii", data, i)
                    if rel == 0 and pos == 0 and (i > 0 or not log):
                        break  # preallocated tail
                    assert pos + 12 <= len(log)
                    batch_base, _ = struct.unpack_from(">qi", log, pos)
                    assert batch_base <= base + rel
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
