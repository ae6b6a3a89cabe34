"""Frames that arrive together: several requests written in one send, pipelined, are read
in one go and small produces among them go to a handler as one batch (server/requests.py
Batch). Their answers must still leave in request order, each with its own correlation
id, none missing (acks=0 has none) and none added."""

import socket
import struct

from wire import encode_request, is_closed, read_response, recv_exact, request_of, roundtrip

from trio_broker.protocol._generated import response_class
from trio_broker.protocol._generated.alter_client_quotas_request import (
    EntityData,
    EntryData,
    OpData,
)
from trio_broker.protocol._generated.fetch_request import FetchPartition, FetchRequest, FetchTopic
from trio_broker.protocol._generated.metadata_request import MetadataRequestTopic
from trio_broker.protocol._generated.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_broker.protocol._generated.response_header import ResponseHeader
from trio_broker.protocol.record_codec import build_batch, iter_records
from trio_broker.protocol.records import iter_batches
from trio_broker.testing import free_port

PRODUCE_V = 9
FETCH_V = 12
METADATA_V = 9


def connect(broker) -> socket.socket:
    sock = socket.create_connection((broker.host, broker.port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def create_topics(sock: socket.socket, *names: str) -> None:
    # The Metadata that auto-creates the topics answers LEADER_NOT_AVAILABLE without
    # partitions, as Kafka's does; the next one lists them.
    for expected in (5, 0):
        meta = roundtrip(
            sock,
            request_of(
                3,
                topics=[MetadataRequestTopic(name=name) for name in names],
                allow_auto_topic_creation=True,
            ),
            METADATA_V,
        )
        assert [t.error_code for t in meta.topics] == [expected] * len(names)


def produce_frame(
    topic: str, value: bytes, cid: int, acks: int = 1, batch: bytes | None = None
) -> bytes:
    if batch is None:
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


def metadata_frame(topic: str, cid: int) -> bytes:
    return encode_request(request_of(3, topics=[MetadataRequestTopic(name=topic)]), 9, cid)


def fetch_values(sock: socket.socket, topic: str, cid: int) -> list[bytes]:
    request = FetchRequest(
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=50 << 20,
        session_epoch=-1,
        topics=[
            FetchTopic(
                topic=topic,
                partitions=[
                    FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=10 << 20)
                ],
            )
        ],
    )
    sock.sendall(encode_request(request, FETCH_V, cid))
    got, body = read_response(sock, 1, FETCH_V)
    assert got == cid
    buf = bytes(body.responses[0].partitions[0].records)
    return [r.value for pos, h in iter_batches(buf) for r in iter_records(buf[pos : pos + h.size])]


def read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    return recv_exact(sock, size)


def decode(frame: bytes, api_key: int, version: int):
    cls = response_class(api_key)
    flexible = cls.FLEXIBLE_MIN_VERSION is not None and version >= cls.FLEXIBLE_MIN_VERSION
    # ApiVersions answers with header v0 in every version (KIP-511).
    header, pos = ResponseHeader.decode(frame, 1 if flexible and api_key != 18 else 0)
    body, _ = cls.decode(frame, version, pos)
    return body


def test_frames_sent_together_are_answered_in_request_order(kafka_broker):
    sock = connect(kafka_broker)
    create_topics(sock, "order-a", "order-b")
    check_answers_in_order(sock)
    sock.close()


def test_answers_in_order_with_metrics_request_log_and_quotas_on(kafka_broker_factory):
    # Every request timed (metrics, the request log) and metered (a client quota on this
    # client id, far above what it sends): the dispatch is wrapped, so a batch's produces
    # go through the handlers' coroutines instead of being answered at once, and their
    # answers are timed one by one. Same order, same answers.
    port = free_port()
    broker = kafka_broker_factory(
        {"metrics.listener": f"http://127.0.0.1:{port}", "request.log.enable": "true"}
    )
    sock = connect(broker)
    quota = request_of(
        49,
        entries=[
            EntryData(
                entity=[EntityData(entity_type="client-id", entity_name="test")],
                ops=[OpData(key="producer_byte_rate", value=1e12)],
            )
        ],
    )
    assert [e.error_code for e in roundtrip(sock, quota, 1).entries] == [0]
    create_topics(sock, "order-a", "order-b")
    check_answers_in_order(sock)
    sock.close()


def check_answers_in_order(sock: socket.socket) -> None:
    # One send: produces to two topics (more than one batch's worth in a row), acks=0
    # produces among them (no answer), a Metadata request and an ApiVersions request
    # between them (never batched), then more produces. Expected answers, in order:
    # (correlation id, api key, topic) for each request that gets one.
    frames: list[bytes] = []
    expected: list[tuple[int, int, str | None]] = []
    sent: dict[str, list[bytes]] = {"order-a": [], "order-b": []}
    cid = 1000
    for step in range(120):
        cid += 1
        topic = "order-a" if step % 3 else "order-b"
        value = b"%s-%d" % (topic.encode(), step)
        if step == 50:
            frames.append(metadata_frame("order-a", cid))
            expected.append((cid, 3, None))
        elif step == 51:
            frames.append(encode_request(request_of(18), 3, cid))
            expected.append((cid, 18, None))
        elif step % 7 == 3:
            frames.append(produce_frame(topic, value, cid, acks=0))
            sent[topic].append(value)
        else:
            frames.append(produce_frame(topic, value, cid))
            expected.append((cid, 0, topic))
            sent[topic].append(value)
    sock.sendall(b"".join(frames))

    answers = [read_frame(sock) for _ in expected]
    got_cids = [struct.unpack_from(">i", frame)[0] for frame in answers]
    assert got_cids == [cid for cid, _, _ in expected]

    # Each produce answer carries its own record's offset: the records of a topic were
    # appended in request order (acks=0 ones too), so the answered offsets are the
    # positions of the answered records among all of that topic's records.
    offsets: dict[str, list[int]] = {"order-a": [], "order-b": []}
    for frame, (_, api_key, topic) in zip(answers, expected, strict=True):
        if api_key == 0:
            body = decode(frame, 0, PRODUCE_V)
            assert body.responses[0].name == topic
            part = body.responses[0].partition_responses[0]
            assert part.error_code == 0
            offsets[topic].append(part.base_offset)
        elif api_key == 3:
            assert decode(frame, 3, METADATA_V).topics[0].name == "order-a"
        else:
            assert decode(frame, 18, 3).error_code == 0
    for topic, values in sent.items():
        answered = [
            i
            for i, value in enumerate(values)
            if int(value.rsplit(b"-", 1)[1]) % 7 != 3  # not an acks=0 record
        ]
        assert offsets[topic] == answered
        # And nothing more came back: the next bytes answer the fetch, with every record.
        assert fetch_values(sock, topic, cid=7) == values


def test_a_bad_request_behind_a_batch_closes_after_the_answers(kafka_broker):
    sock = connect(kafka_broker)
    create_topics(sock, "order-bad")
    good = [produce_frame("order-bad", b"g%d" % i, cid=i) for i in range(10)]
    # A well-sized frame for an api key no broker serves: a bad request, not bad bytes.
    bad = struct.pack(">hhi", 9999, 0, 77) + b"\x00\x00"
    sock.sendall(b"".join(good) + struct.pack(">i", len(bad)) + bad)
    answers = [read_response(sock, 0, PRODUCE_V) for _ in range(10)]
    assert [cid for cid, _ in answers] == list(range(10))
    assert [b.responses[0].partition_responses[0].base_offset for _, b in answers] == list(
        range(10)
    )
    assert is_closed(sock)


def test_acks_all_produces_sent_together_on_a_lone_broker_answer_in_order(kafka_broker):
    # A lone broker is its own ISR: acks=all is answered at once and batched like acks=1.
    sock = connect(kafka_broker)
    create_topics(sock, "order-all")
    n = 100
    sock.sendall(
        b"".join(produce_frame("order-all", b"a%d" % i, cid=500 + i, acks=-1) for i in range(n))
    )
    answers = [read_response(sock, 0, PRODUCE_V) for _ in range(n)]
    assert [cid for cid, _ in answers] == [500 + i for i in range(n)]
    parts = [body.responses[0].partition_responses[0] for _, body in answers]
    assert [(p.error_code, p.base_offset) for p in parts] == [(0, i) for i in range(n)]
    assert fetch_values(sock, "order-all", cid=9) == [b"a%d" % i for i in range(n)]
    sock.close()


def test_produces_appended_together_answer_as_if_appended_one_by_one(kafka_broker):
    # Consecutive produces of a batch to one partition are appended as one write on a lone
    # broker (apis/produce.py handle_batch_now). Each answer must be what appending each
    # request alone gives: offsets that follow the record counts before them, a bad batch
    # answered with its error and skipped, an idempotent producer's resent batch answered
    # as a duplicate with the first one's offset (the combined append finds it and falls
    # back to one by one), and the records in the log in request order.
    sock = connect(kafka_broker)
    create_topics(sock, "together")
    ts = 1_700_000_000_000

    def records(*values: bytes) -> list:
        return [(b"k", v, (), ts) for v in values]

    corrupt = bytearray(build_batch(records(b"bad")))
    corrupt[-1] ^= 0xFF  # the CRC no longer matches
    idempotent = build_batch(records(b"i0"), producer_id=4000, producer_epoch=0, base_sequence=0)
    batches = [
        build_batch(records(b"a0")),
        build_batch(records(b"b0", b"b1", b"b2")),
        bytes(corrupt),
        build_batch(records(b"c0", b"c1")),
        idempotent,
        idempotent,  # resent: a duplicate
        build_batch(records(b"d0")),
        build_batch(records(b"e0", b"e1")),
        # the producer's next batches, pipelined, then one that skips a sequence
        build_batch(records(b"i1"), producer_id=4000, producer_epoch=0, base_sequence=1),
        build_batch(records(b"i2", b"i3"), producer_id=4000, producer_epoch=0, base_sequence=2),
        build_batch(records(b"i9"), producer_id=4000, producer_epoch=0, base_sequence=9),
        build_batch(records(b"f0")),
    ]
    sock.sendall(
        b"".join(
            produce_frame("together", b"", cid=300 + i, batch=batch)
            for i, batch in enumerate(batches)
        )
    )
    answers = [read_response(sock, 0, PRODUCE_V) for _ in batches]
    assert [cid for cid, _ in answers] == [300 + i for i in range(len(batches))]
    parts = [body.responses[0].partition_responses[0] for _, body in answers]
    assert [(p.error_code, p.base_offset) for p in parts] == [
        (0, 0),
        (0, 1),
        (2, -1),  # CORRUPT_MESSAGE
        (0, 4),
        (0, 6),
        (0, 6),  # the duplicate: the first one's offset, nothing appended
        (0, 7),
        (0, 8),
        (0, 10),
        (0, 11),
        (45, -1),  # OUT_OF_ORDER_SEQUENCE_NUMBER
        (0, 13),
    ]
    assert fetch_values(sock, "together", cid=9) == [
        b"a0", b"b0", b"b1", b"b2", b"c0", b"c1", b"i0", b"d0", b"e0", b"e1", b"i1", b"i2",
        b"i3", b"f0",
    ]  # fmt: skip
    sock.close()


def test_acks_all_produces_sent_together_respect_min_insync_replicas(kafka_broker_factory):
    # A lone broker is an ISR of one: with min.insync.replicas=2 every acks=all produce is
    # refused (NOT_ENOUGH_REPLICAS) and nothing of it appended, read together or not,
    # while the acks=1 ones among them are appended in order.
    broker = kafka_broker_factory({"min.insync.replicas": "2"})
    sock = connect(broker)
    create_topics(sock, "order-isr")
    acks = [-1, -1, 1, -1, 1, 1, -1, -1]
    sock.sendall(
        b"".join(
            produce_frame("order-isr", b"r%d" % i, cid=700 + i, acks=a) for i, a in enumerate(acks)
        )
    )
    answers = [read_response(sock, 0, PRODUCE_V) for _ in acks]
    assert [cid for cid, _ in answers] == [700 + i for i in range(len(acks))]
    parts = [body.responses[0].partition_responses[0] for _, body in answers]
    assert [(p.error_code, p.base_offset) for p in parts] == [
        (19, -1),
        (19, -1),
        (0, 0),
        (19, -1),
        (0, 1),
        (0, 2),
        (19, -1),
        (19, -1),
    ]
    assert fetch_values(sock, "order-isr", cid=9) == [b"r2", b"r4", b"r5"]
    sock.close()
