"""One record at a time through the broker, as (d) at a quiet machine's pace: the broker's
CPU per record when nothing batches.

    .venv/bin/python benchmarks/lone_record.py [--records 5000] [--gap-us 300]

One client process with two connections, in lockstep: a consumer's Fetch (v16, one
partition, max_wait 100 ms) is sent and left to park in the purgatory; `--gap-us` later a
Produce (v9, acks=1, one 100-byte record, LogAppendTime topic) is sent; the client reads
the produce's answer and the woken fetch's answer, and goes on with the next offset. So
every record is exactly one Produce and one Fetch woken by it, each alone on its
connection: the requests (d)'s librdkafka clients send when the broker keeps up. Prints
the broker's CPU microseconds (all its threads' run time, /proc schedstat) per
record and the client's round
trip time (fetch answer after produce sent) median and p99.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd() / "benchmarks"))
import run  # noqa: E402  (benchmarks/run.py of the tree in the working directory)

from trio_broker.protocol._generated.fetch_request import (  # noqa: E402
    FetchPartition,
    FetchRequest,
    FetchTopic,
)
from trio_broker.protocol._generated.metadata_request import (  # noqa: E402
    MetadataRequest,
    MetadataRequestTopic,
)
from trio_broker.protocol._generated.metadata_response import MetadataResponse  # noqa: E402
from trio_broker.protocol._generated.produce_request import (  # noqa: E402
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_broker.protocol._generated.request_header import RequestHeader  # noqa: E402
from trio_broker.protocol.record_codec import build_batch  # noqa: E402

TOPIC = "lone"


def frame(request, api_key: int, version: int, correlation_id: int) -> bytes:
    buf = bytearray(4)
    RequestHeader(
        request_api_key=api_key,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id="lone",
    ).encode(2, buf)
    request.encode(version, buf)
    struct.pack_into(">i", buf, 0, len(buf) - 4)
    return bytes(buf)


def read_frame(sock: socket.socket) -> bytes:
    data = b""
    while len(data) < 4:
        data += sock.recv(65536)
    want = 4 + struct.unpack_from(">i", data)[0]
    while len(data) < want:
        data += sock.recv(65536)
    return data


def topic_id(sock: socket.socket) -> object:
    sock.sendall(frame(MetadataRequest(topics=[MetadataRequestTopic(name=TOPIC)]), 3, 12, 1))
    data = read_frame(sock)
    # Response header v1: correlation id, then an empty tagged-field section.
    response, _ = MetadataResponse.decode(memoryview(data)[9:], 12)
    return response.topics[0].topic_id


def measure(records: int, gap_us: int, spy: str = "") -> dict:
    work = Path(tempfile.mkdtemp(prefix="lone-"))
    broker = run.start_broker(run.TRIO, work, None)
    try:
        run.perf("produce", broker, *run.produce_args(
            TOPIC, 1, 100, 1, topic_config="message.timestamp.type=LogAppendTime"))  # fmt: skip
        producer = socket.create_connection(("127.0.0.1", broker.port))
        consumer = socket.create_connection(("127.0.0.1", broker.port))
        for s in (producer, consumer):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tid = topic_id(consumer)
        batch = build_batch([(None, b"x" * 100, [], int(time.time() * 1000))])
        produce = frame(
            ProduceRequest(
                acks=1,
                timeout_ms=30000,
                topic_data=[
                    TopicProduceData(
                        name=TOPIC, partition_data=[PartitionProduceData(index=0, records=batch)]
                    )
                ],
            ),
            0,
            9,
            7,
        )

        def fetch(offset: int) -> bytes:
            return frame(
                FetchRequest(
                    max_wait_ms=100,
                    min_bytes=1,
                    max_bytes=1 << 20,
                    topics=[
                        FetchTopic(
                            topic_id=tid,
                            partitions=[
                                FetchPartition(fetch_offset=offset, partition_max_bytes=1 << 20)
                            ],
                        )
                    ],
                ),
                1,
                16,
                9,
            )

        if spy:  # py-spy on the broker while the measured records go
            import subprocess

            spy_proc = subprocess.Popen(
                [str(Path(sys.executable).parent / "py-spy"), "record", "--pid",
                 str(broker.proc.pid), "-r", "500", "-f", "raw", "-o", spy, "--nonblocking",
                 "--gil"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
            time.sleep(1)
        gap = gap_us / 1e6
        offset = 1
        times = []
        warm = records // 10
        cpu0 = 0
        for i in range(warm + records):
            if i == warm:
                cpu0 = run.cpu_ns(broker.proc.pid)
                start = time.perf_counter()
            consumer.sendall(fetch(offset))
            time.sleep(gap)  # the fetch parks
            sent = time.perf_counter()
            producer.sendall(produce)
            read_frame(producer)
            read_frame(consumer)
            times.append(time.perf_counter() - sent)
            offset += 1
        elapsed = time.perf_counter() - start
        cpu = (run.cpu_ns(broker.proc.pid) - cpu0) / 1e9
        if spy:
            spy_proc.send_signal(2)
            spy_proc.wait(30)
        times = sorted(times[warm:])
        return {
            "broker_us_per_record": round(cpu / records * 1e6, 1),
            "records_s": round(records / elapsed),
            "rt_p50_ms": round(times[len(times) // 2] * 1e3, 3),
            "rt_p99_ms": round(times[int(len(times) * 0.99)] * 1e3, 3),
            "load": round(os.getloadavg()[0], 1),
        }
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--gap-us", type=int, default=300)
    parser.add_argument("--tag", default="")
    parser.add_argument("--spy", default="", help="py-spy raw output file (broker, --gil)")
    args = parser.parse_args()
    result = measure(args.records, args.gap_us, args.spy)
    print(json.dumps({"tag": args.tag, **result}), flush=True)


if __name__ == "__main__":
    main()
