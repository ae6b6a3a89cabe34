"""The connection's own socket I/O: pipelined produce answers gathered into few writes,
in order; a fetch behind them is not held; garbage after good requests still gets the
good answers; idle connections close; large frames arrive whole."""

import os
import socket
import struct
import time

from wire import encode_request, is_closed, read_response, request_of, roundtrip

from trio_broker.protocol._generated.fetch_request import FetchPartition, FetchRequest, FetchTopic
from trio_broker.protocol._generated.metadata_request import MetadataRequestTopic
from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_broker.protocol.record_codec import build_batch, iter_records
from trio_broker.protocol.records import iter_batches

PRODUCE_V = 9
FETCH_V = 12


def values_of(records) -> list[bytes]:
    """Every record value in a fetched records field (several batches back to back)."""
    buf = bytes(records)
    return [r.value for pos, h in iter_batches(buf) for r in iter_records(buf[pos : pos + h.size])]


def connect(broker) -> socket.socket:
    return socket.create_connection((broker.host, broker.port), timeout=20)


def create_topic(sock: socket.socket, name: str) -> None:
    # The Metadata that auto-creates the topic answers LEADER_NOT_AVAILABLE without
    # partitions, as Kafka's does; the next one lists them.
    codes = []
    while not codes or (codes[-1] == 5 and len(codes) < 2):
        meta = roundtrip(
            sock,
            request_of(3, topics=[MetadataRequestTopic(name=name)], allow_auto_topic_creation=True),
            9,
        )
        codes.append(meta.topics[0].error_code)
    assert codes in ([0], [5, 0])


def produce_frame(topic: str, value: bytes, cid: int, acks: int = 1) -> bytes:
    batch = build_batch([(b"k", value, (), 1_700_000_000_000)])
    request = ProduceRequest(
        acks=acks,
        timeout_ms=5000,
        topic_data=[
            TopicProduceData(
                name=topic, partition_data=[PartitionProduceData(index=0, records=batch)]
            )
        ],
    )
    return encode_request(request, PRODUCE_V, cid)


def fetch_frame(
    topic: str, offset: int, cid: int, max_wait_ms: int = 0, min_bytes: int = 0, max_bytes=50 << 20
):
    request = FetchRequest(
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        session_epoch=-1,
        topics=[
            FetchTopic(
                topic=topic,
                partitions=[
                    FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=10 << 20)
                ],
            )
        ],
    )
    return encode_request(request, FETCH_V, cid)


def test_pipelined_produce_answers_in_order_with_offsets(kafka_broker):
    sock = connect(kafka_broker)
    create_topic(sock, "pipe")
    n = 500  # more than one gathered write (64 answers or 64 KiB each)
    sock.sendall(b"".join(produce_frame("pipe", b"v%d" % i, cid=100 + i) for i in range(n)))
    answers = [read_response(sock, 0, PRODUCE_V) for _ in range(n)]
    assert [cid for cid, _ in answers] == [100 + i for i in range(n)]
    parts = [body.responses[0].partition_responses[0] for _, body in answers]
    assert [p.error_code for p in parts] == [0] * n
    assert [p.base_offset for p in parts] == list(range(n))

    sock.sendall(fetch_frame("pipe", 0, cid=7))
    cid, body = read_response(sock, 1, FETCH_V)
    assert cid == 7
    values = values_of(body.responses[0].partitions[0].records)
    assert values == [b"v%d" % i for i in range(n)]
    sock.close()


def test_waiting_fetch_does_not_hold_the_produce_answers_before_it(kafka_broker):
    sock = connect(kafka_broker)
    create_topic(sock, "hold")
    # Three produces, then a fetch that waits (nothing at offset 10 yet, up to 20 s).
    # The produce answers must arrive while the fetch still waits.
    frames = [produce_frame("hold", b"x", cid=i) for i in range(3)]
    frames.append(fetch_frame("hold", 10, cid=99, max_wait_ms=20_000, min_bytes=1))
    sock.sendall(b"".join(frames))
    sock.settimeout(10)
    answers = [read_response(sock, 0, PRODUCE_V) for _ in range(3)]
    assert [(cid, b.responses[0].partition_responses[0].base_offset) for cid, b in answers] == [
        (0, 0),
        (1, 1),
        (2, 2),
    ]
    sock.close()


def test_garbage_after_good_requests_answers_them_then_closes(kafka_broker):
    sock = connect(kafka_broker)
    create_topic(sock, "junk")
    good = b"".join(produce_frame("junk", b"ok", cid=i) for i in range(5))
    sock.sendall(good + struct.pack(">i", -7) + b"garbage")
    answers = [read_response(sock, 0, PRODUCE_V) for _ in range(5)]
    assert [cid for cid, _ in answers] == list(range(5))
    assert is_closed(sock)
    # The broker goes on serving others, and the five records are there.
    other = connect(kafka_broker)
    other.sendall(fetch_frame("junk", 0, cid=1))
    _, body = read_response(other, 1, FETCH_V)
    assert values_of(body.responses[0].partitions[0].records) == [b"ok"] * 5
    other.close()


def test_acks0_pipeline_then_a_request_that_answers(kafka_broker):
    sock = connect(kafka_broker)
    create_topic(sock, "fire")
    frames = [produce_frame("fire", b"f%d" % i, cid=i, acks=0) for i in range(20)]
    frames.append(fetch_frame("fire", 0, cid=500))
    sock.sendall(b"".join(frames))
    cid, body = read_response(sock, 1, FETCH_V)  # the first bytes back answer the fetch
    assert cid == 500
    values = values_of(body.responses[0].partitions[0].records)
    assert values == [b"f%d" % i for i in range(20)]
    sock.close()


def test_large_frame_in_small_writes(kafka_broker):
    sock = connect(kafka_broker)
    create_topic(sock, "big")
    value = bytes(range(256)) * 3500  # 896 KB: many receive chunks, under max.message.bytes
    frame = produce_frame("big", value, cid=3)
    for start in range(0, len(frame), 7_777):
        sock.sendall(frame[start : start + 7_777])
    cid, body = read_response(sock, 0, PRODUCE_V)
    assert (cid, body.responses[0].partition_responses[0].error_code) == (3, 0)
    sock.sendall(fetch_frame("big", 0, cid=4))
    _, body = read_response(sock, 1, FETCH_V)
    [record] = list(iter_records(body.responses[0].partitions[0].records))
    assert record.value == value
    sock.close()


def test_idle_connection_is_closed(kafka_broker_factory):
    broker = kafka_broker_factory({"connections.max.idle.ms": "300"})
    idle = connect(broker)
    create_topic(idle, "quiet")
    assert is_closed(idle, timeout=10)
    # A connection that keeps asking is not idle: ten answers, 100 ms apart.
    busy = connect(broker)
    for _ in range(10):
        assert roundtrip(busy, request_of(18), 3).error_code == 0
        time.sleep(0.1)
    busy.close()


def test_a_request_sent_slowly_is_not_cut_off_by_the_idle_timeout(kafka_broker_factory):
    # Issue 34: connections.max.idle.ms counted from the last completed request, so a
    # client sending a large request slowly was closed in the middle of it. As in Kafka's
    # selector, any byte read is activity: 2 KB over 1.8 s, with a 500 ms idle timeout.
    broker = kafka_broker_factory({"connections.max.idle.ms": "500"})
    slow = connect(broker)
    frame = encode_request(request_of(18), 3, 21, client_id="slow-" + "x" * 2000)
    step = len(frame) // 12 + 1
    for at in range(0, len(frame), step):
        slow.sendall(frame[at : at + step])
        time.sleep(0.15)
    cid, body = read_response(slow, 18, 3)
    assert (cid, body.error_code) == (21, 0)
    assert is_closed(slow, timeout=10)  # and once quiet, it is idle as before


def test_record_data_leaves_by_sendfile_unless_tiny(kafka_broker, monkeypatch):
    # The broker runs on a thread of this process: count its os.sendfile calls.
    calls = []
    real = os.sendfile

    def counting(out_fd, in_fd, offset, count):
        sent = real(out_fd, in_fd, offset, count)
        calls.append(sent)
        return sent

    monkeypatch.setattr(os, "sendfile", counting)
    sock = connect(kafka_broker)
    create_topic(sock, "zc")
    small, large = b"s" * 100, bytes(range(256)) * 400  # 100 B and 100 KiB values
    for cid, value in enumerate((small, large)):
        sock.sendall(produce_frame("zc", value, cid=cid))
        assert (
            read_response(sock, 0, PRODUCE_V)[1].responses[0].partition_responses[0].error_code == 0
        )

    sock.sendall(fetch_frame("zc", 0, cid=10, max_bytes=1))  # the first batch only: tiny
    _, body = read_response(sock, 1, FETCH_V)
    assert values_of(body.responses[0].partitions[0].records) == [small]
    assert calls == []  # a tiny answer goes out in one write

    sock.sendall(fetch_frame("zc", 1, cid=11))
    _, body = read_response(sock, 1, FETCH_V)
    assert values_of(body.responses[0].partitions[0].records) == [large]
    assert sum(calls) > len(large)  # the batch, headers and all, straight from the file
    sock.close()


async def test_send_bytes_writes_more_buffers_than_one_writev_takes():
    import trio

    from trio_broker.server.sendfile import send_bytes

    a, b = trio.socket.socketpair()
    parts = [b"%05d" % i for i in range(3000)]  # 3,000 buffers: IOV_MAX is 1,024
    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_bytes, a, *parts)
        got = b""
        while len(got) < 15_000:
            got += await b.recv(65536)
    assert got == b"".join(parts)
    a.close()
    b.close()
