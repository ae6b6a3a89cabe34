"""max.incremental.fetch.session.cache.slots: how many incremental fetch sessions (KIP-227)
the broker keeps, on the wire. With no slots every fetch is answered without a session (id
0, as Kafka's); when the slots are full, a new session takes the least recently used one's
place, whose owner is told FETCH_SESSION_ID_NOT_FOUND and starts a new session."""

import socket

from wire import roundtrip, session_fetch

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.metadata_request import MetadataRequest, MetadataRequestTopic

FETCH_V = 12


def _fetch(sock, session_id: int, epoch: int, cid: int):
    return session_fetch(sock, session_id, epoch, [("slots", 0)], cid, FETCH_V)


def _connect_with_topic(broker):
    sock = socket.create_connection((broker.host, broker.port), timeout=20)
    for cid in range(2):  # the first answer creates it (LEADER_NOT_AVAILABLE), as Kafka's
        meta = roundtrip(
            sock,
            MetadataRequest(
                topics=[MetadataRequestTopic(name="slots")], allow_auto_topic_creation=True
            ),
            9,
            cid,
        )
    assert meta.topics[0].error_code == ErrorCode.NONE
    return sock


def test_no_slots_answers_every_fetch_without_a_session(kafka_broker_factory):
    broker = kafka_broker_factory({"max.incremental.fetch.session.cache.slots": "0"})
    with _connect_with_topic(broker) as sock:
        answer = _fetch(sock, 0, 0, 10)  # asks for a new session
        assert (answer.error_code, answer.session_id) == (ErrorCode.NONE, 0)
        assert [t.topic for t in answer.responses] == ["slots"]


def test_full_slots_give_the_least_recently_used_sessions_place(kafka_broker_factory):
    broker = kafka_broker_factory({"max.incremental.fetch.session.cache.slots": "2"})
    with _connect_with_topic(broker) as sock:
        first = _fetch(sock, 0, 0, 10).session_id
        second = _fetch(sock, 0, 0, 11).session_id
        assert first > 0 and second > 0 and first != second
        # The first is used again (now the most recent); a third session takes the
        # second's place.
        assert _fetch(sock, first, 1, 12).error_code == ErrorCode.NONE
        third = _fetch(sock, 0, 0, 13).session_id
        assert third > 0
        assert _fetch(sock, second, 1, 14).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        assert _fetch(sock, first, 2, 15).error_code == ErrorCode.NONE
        assert _fetch(sock, third, 1, 16).error_code == ErrorCode.NONE
