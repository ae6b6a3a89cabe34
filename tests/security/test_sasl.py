"""SASL: PLAIN and SCRAM-SHA-256/512 over SASL_PLAINTEXT and SASL_SSL with real clients;
failures answer SASL_AUTHENTICATION_FAILED (or UNSUPPORTED_SASL_MECHANISM) and close."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from security_pki import make_pki
from wire import encode_request, is_closed, request_of, roundtrip

from trio_broker.errors import ErrorCode

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def start(factory, pki, **extra):
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.location": str(pki.server),
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "sasl.jaas.config": JAAS,
    }
    props.update(extra)
    broker = factory(props)
    names = ["plain", "sasl", "sasl_ssl"]
    return broker, {n: "{}:{}".format(*a[:2]) for n, a in zip(names, broker.addresses, strict=True)}


def add_scram_users(bootstrap, users=PASSWORDS):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    upserts = [
        UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 4096), password.encode())
        for user, password in users.items()
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    ]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(30)
    return admin


def client_conf(address, protocol, mechanism, pki, user="alice", password=None):
    conf = {
        "bootstrap.servers": address,
        "security.protocol": protocol,
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password if password is not None else PASSWORDS[user],
    }
    if protocol == "SASL_SSL":
        conf["ssl.ca.location"] = str(pki.ca)
    return conf


def roundtrip_confluent(conf, topic, n=300):
    producer = Producer({**conf, "linger.ms": 5})
    errors = []
    for i in range(n):
        producer.produce(
            topic,
            key=str(i).encode(),
            value=b"v" * (i % 700),
            on_delivery=lambda e, m: errors.append(e),
        )
    assert producer.flush(30) == 0
    assert [e for e in errors if e] == []
    consumer = Consumer({**conf, "group.id": "g", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        got.append((msg.key(), msg.value()))
    consumer.close()
    assert got == [(str(i).encode(), b"v" * (i % 700)) for i in range(n)]


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_confluent_every_mechanism(kafka_broker_factory, pki, protocol):
    _, addr = start(kafka_broker_factory, pki)
    add_scram_users(addr["plain"])
    address = addr["sasl"] if protocol == "SASL_PLAINTEXT" else addr["sasl_ssl"]
    for mechanism in MECHANISMS:
        conf = client_conf(address, protocol, mechanism, pki)
        roundtrip_confluent(conf, f"t-{mechanism.lower()}")


def test_kafka_python_every_mechanism(kafka_broker_factory, pki):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    _, addr = start(kafka_broker_factory, pki)
    add_scram_users(addr["plain"])
    for protocol, address in (("SASL_PLAINTEXT", addr["sasl"]), ("SASL_SSL", addr["sasl_ssl"])):
        for mechanism in MECHANISMS:
            common = {
                "bootstrap_servers": address,
                "security_protocol": protocol,
                "sasl_mechanism": mechanism,
                "sasl_plain_username": "alice",
                "sasl_plain_password": "alice-secret",
            }
            if protocol == "SASL_SSL":
                common["ssl_cafile"] = str(pki.ca)
            topic = f"kp-{protocol}-{mechanism}".lower()
            producer = KafkaProducer(**common)
            for i in range(50):
                producer.send(topic, value=str(i).encode())
            producer.flush(30)
            producer.close()
            consumer = KafkaConsumer(**common, enable_auto_commit=False, consumer_timeout_ms=10000)
            consumer.assign([KTP(topic, 0)])
            consumer.seek_to_beginning()
            got = []
            for msg in consumer:
                got.append(msg.value)
                if len(got) == 50:
                    break
            consumer.close()
            assert got == [str(i).encode() for i in range(50)], (protocol, mechanism)


def test_aiokafka_every_mechanism(kafka_broker_factory, pki):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context
    from aiokafka.structs import TopicPartition as ATP

    _, addr = start(kafka_broker_factory, pki)
    add_scram_users(addr["plain"])

    async def one(protocol, address, mechanism):
        common = {
            "bootstrap_servers": address,
            "security_protocol": protocol,
            "sasl_mechanism": mechanism,
            "sasl_plain_username": "alice",
            "sasl_plain_password": "alice-secret",
        }
        if protocol == "SASL_SSL":
            common["ssl_context"] = create_ssl_context(cafile=str(pki.ca))
        topic = f"ak-{protocol}-{mechanism}".lower()
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            for i in range(50):
                await producer.send(topic, value=str(i).encode())
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**common, enable_auto_commit=False)
        await consumer.start()
        got = []
        try:
            consumer.assign([ATP(topic, 0)])
            await consumer.seek_to_beginning()
            while len(got) < 50:
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                for messages in batches.values():
                    got.extend(m.value for m in messages)
        finally:
            await consumer.stop()
        return got

    async def main():
        for protocol, address in (("SASL_PLAINTEXT", addr["sasl"]), ("SASL_SSL", addr["sasl_ssl"])):
            for mechanism in MECHANISMS:
                got = await one(protocol, address, mechanism)
                assert got == [str(i).encode() for i in range(50)], (protocol, mechanism)

    asyncio.run(main())


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_password_is_refused(kafka_broker_factory, pki, mechanism):
    _, addr = start(kafka_broker_factory, pki)
    add_scram_users(addr["plain"])
    conf = client_conf(addr["sasl"], "SASL_PLAINTEXT", mechanism, pki, password="wrong")
    errors = []
    producer = Producer(
        {**conf, "error_cb": errors.append, "log_level": 0, "reconnect.backoff.ms": 1000}
    )
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=3)
    producer.poll(1)  # error callbacks are served here
    assert any("uthentication" in e.str() for e in errors), [e.str() for e in errors]


def _connect(address):
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def test_raw_exchange_errors_close_the_connection(kafka_broker_factory, pki):
    _, addr = start(kafka_broker_factory, pki)
    # Wrong PLAIN password: SASL_AUTHENTICATION_FAILED, then closed.
    with _connect(addr["sasl"]) as sock:
        assert roundtrip(sock, request_of(17, mechanism="PLAIN"), 1).error_code == 0
        answer = roundtrip(sock, request_of(36, auth_bytes=b"\0alice\0nope"), 2, correlation_id=2)
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert "Invalid username or password" in answer.error_message
        assert is_closed(sock)
    # An unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the offered list, then closed.
    with _connect(addr["sasl"]) as sock:
        answer = roundtrip(sock, request_of(17, mechanism="GSSAPI"), 1)
        assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert answer.mechanisms == MECHANISMS
        assert is_closed(sock)
    # A request other than ApiVersions/SaslHandshake before authentication: closed.
    with _connect(addr["sasl"]) as sock:
        assert roundtrip(sock, request_of(18), 3).error_code == 0
        sock.sendall(encode_request(request_of(3, topics=None), 9))
        assert is_closed(sock)
    # Cut mid-way: the SCRAM exchange is abandoned after client-first; then a Metadata
    # request in the middle of the exchange is refused.
    with _connect(addr["sasl"]) as sock:
        assert roundtrip(sock, request_of(17, mechanism="SCRAM-SHA-256"), 1).error_code == 0
        sock.sendall(encode_request(request_of(36, auth_bytes=b"n,,n=alice,r=abc"), 2, 2))
    with _connect(addr["sasl"]) as sock:
        assert roundtrip(sock, request_of(17, mechanism="PLAIN"), 1).error_code == 0
        sock.sendall(encode_request(request_of(3, topics=None), 9, 2))
        assert is_closed(sock)
    # A frame over 512 KiB before authentication: closed without reading it.
    with _connect(addr["sasl"]) as sock:
        sock.sendall(struct.pack(">i", 600_000) + b"\0" * 1000)
        assert is_closed(sock)
    # A SaslAuthenticate without a handshake fails too.
    with _connect(addr["sasl"]) as sock:
        answer = roundtrip(sock, request_of(36, auth_bytes=b"\0alice\0alice-secret"), 2)
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert is_closed(sock)
    # SaslHandshake on a PLAINTEXT listener: ILLEGAL_SASL_STATE.
    with _connect(addr["plain"]) as sock:
        answer = roundtrip(sock, request_of(17, mechanism="PLAIN"), 1)
        assert answer.error_code == ErrorCode.ILLEGAL_SASL_STATE
    # The broker is unharmed: a good exchange after all that succeeds.
    with _connect(addr["sasl"]) as sock:
        assert roundtrip(sock, request_of(17, mechanism="PLAIN"), 1).error_code == 0
        answer = roundtrip(sock, request_of(36, auth_bytes=b"\0alice\0alice-secret"), 2, 2)
        assert answer.error_code == 0
        assert roundtrip(sock, request_of(3, topics=None), 9, 3).brokers[0].port == int(
            addr["sasl"].rsplit(":", 1)[1]
        )


def test_handshake_v0_then_unframed_tokens(kafka_broker_factory, pki):
    _, addr = start(kafka_broker_factory, pki)
    with _connect(addr["sasl"]) as sock:
        assert roundtrip(sock, request_of(17, mechanism="PLAIN"), 0).error_code == 0
        token = b"\0alice\0alice-secret"
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert sock.recv(4) == b"\0\0\0\0"  # an empty challenge: success
        assert roundtrip(sock, request_of(3, topics=None), 9, 5).cluster_id
    with _connect(addr["sasl"]) as sock:
        assert roundtrip(sock, request_of(17, mechanism="PLAIN"), 0).error_code == 0
        token = b"\0alice\0bad"
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert is_closed(sock)


def test_scram_credentials_are_stored_hashed_and_survive_restart(kafka_broker_factory, pki):
    broker, addr = start(kafka_broker_factory, pki)
    admin = add_scram_users(addr["plain"])
    described = {
        user: future.result(30)
        for user, future in admin.describe_user_scram_credentials(["alice", "bob"]).items()
    }
    assert {
        user: sorted((i.mechanism, i.iterations) for i in d.scram_credential_infos)
        for user, d in described.items()
    } == {
        "alice": [(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 4096)],
        "bob": [(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 4096)],
    }
    stored = (broker.log_dir / "scram-credentials").read_text()
    assert "alice-secret" not in stored and "bob-secret" not in stored
    assert set(json.loads(stored)["users"]["alice"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    # Deleting one mechanism; deleting it again is RESOURCE_NOT_FOUND.
    deletion = UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_512)
    admin.alter_user_scram_credentials([deletion])["bob"].result(30)
    with pytest.raises(KafkaException, match="RESOURCE_NOT_FOUND|does not exist"):
        admin.alter_user_scram_credentials([deletion])["bob"].result(30)
    with pytest.raises(KafkaException, match="UNACCEPTABLE_CREDENTIAL|terations"):
        admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100), b"pw"
                )
            ]
        )["carol"].result(30)
    # A new broker on the same log directory has them.
    broker.stop()
    _, addr = start(kafka_broker_factory, pki, **{"log.dirs": str(broker.log_dir)})
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        roundtrip_confluent(client_conf(addr["sasl"], "SASL_PLAINTEXT", mechanism, pki), "after")
    conf = client_conf(addr["sasl"], "SASL_PLAINTEXT", "SCRAM-SHA-512", pki, user="bob")
    with pytest.raises(KafkaException):
        Producer(conf).list_topics(timeout=5)
    admin = AdminClient({"bootstrap.servers": addr["plain"]})
    assert sorted(admin.describe_user_scram_credentials().result(30)) == ["alice", "bob"]


def test_reauthentication_within_connections_max_reauth_ms(kafka_broker_factory, pki):
    _, addr = start(kafka_broker_factory, pki, **{"connections.max.reauth.ms": "1500"})
    with _connect(addr["sasl"]) as sock:
        assert roundtrip(sock, request_of(17, mechanism="PLAIN"), 1).error_code == 0
        answer = roundtrip(sock, request_of(36, auth_bytes=b"\0alice\0alice-secret"), 2, 2)
        assert answer.session_lifetime_ms == 1500
        # KIP-368: a re-authentication on the same connection keeps it open.
        time.sleep(1.0)
        assert roundtrip(sock, request_of(17, mechanism="PLAIN"), 1, 3).error_code == 0
        answer = roundtrip(sock, request_of(36, auth_bytes=b"\0alice\0alice-secret"), 2, 4)
        assert answer.error_code == 0
        time.sleep(1.0)  # 2 s after the first authentication, 1 s after the second
        assert roundtrip(sock, request_of(3, topics=None), 9, 5).cluster_id
        # Without another one the session ends, and the connection with it.
        assert is_closed(sock, timeout=10)
    # A client that re-authenticates (librdkafka) keeps working across several lifetimes.
    conf = client_conf(addr["sasl"], "SASL_PLAINTEXT", "PLAIN", pki)
    producer = Producer(conf)
    errors = []
    for i in range(8):
        producer.produce("reauth", value=str(i).encode(), on_delivery=lambda e, m: errors.append(e))
        producer.flush(10)
        time.sleep(0.5)
    assert errors == [None] * 8
