"""TLS listeners: real clients over SSL get the same bytes as over PLAINTEXT; mTLS."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from security_pki import encrypt_key, make_pki

from trio_broker.config import BrokerConfig, ConfigError


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_broker(factory, pki, **extra):
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.location": str(pki.server),
        "num.partitions": "1",
    }
    props.update(extra)
    broker = factory(props)
    plain, secure = broker.addresses[0], broker.addresses[1]
    return broker, f"{plain[0]}:{plain[1]}", f"{secure[0]}:{secure[1]}"


RECORDS = [
    (f"k{i}".encode(), bytes([i % 251]) * (i * 37 % 5000), [("h", str(i).encode())])
    for i in range(600)
]


def produce(bootstrap, topic, **config):
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    errors = []
    for key, value, headers in RECORDS:
        producer.produce(
            topic, key=key, value=value, headers=headers, on_delivery=lambda e, m: errors.append(e)
        )
    assert producer.flush(30) == 0
    assert [e for e in errors if e is not None] == []


def consume(bootstrap, topic, count, **config):
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False, **config}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 60
    while len(out) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        out.append((msg.offset(), msg.key(), msg.value(), msg.headers()))
    consumer.close()
    return out


def test_confluent_over_ssl_same_bytes_as_plaintext(kafka_broker_factory, pki):
    _, plain, secure = tls_broker(kafka_broker_factory, pki)
    ssl_conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    produce(secure, "tls", **ssl_conf)
    # Large fetches (sendfile's path on plaintext, read-and-send over TLS) and small ones.
    over_tls = consume(secure, "tls", len(RECORDS), **ssl_conf)
    over_plain = consume(plain, "tls", len(RECORDS))
    small_tls = consume(
        secure, "tls", len(RECORDS), **ssl_conf, **{"max.partition.fetch.bytes": 20000}
    )
    assert len(over_tls) == len(RECORDS)
    assert over_tls == over_plain == small_tls
    assert [(k, v) for _, k, v, _ in over_tls] == [(k, v) for k, v, _ in RECORDS]
    assert [o for o, *_ in over_tls] == list(range(len(RECORDS)))


def test_kafka_python_over_ssl(kafka_broker_factory, pki):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    _, plain, secure = tls_broker(kafka_broker_factory, pki)
    producer = KafkaProducer(
        bootstrap_servers=secure, security_protocol="SSL", ssl_cafile=str(pki.ca)
    )
    for key, value, _ in RECORDS[:200]:
        producer.send("kp", key=key, value=value)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=secure,
        security_protocol="SSL",
        ssl_cafile=str(pki.ca),
        enable_auto_commit=False,
        consumer_timeout_ms=10000,
    )
    consumer.assign([KTP("kp", 0)])
    consumer.seek_to_beginning()
    got = []
    for msg in consumer:
        got.append((msg.key, msg.value))
        if len(got) == 200:
            break
    consumer.close()
    assert got == [(k, v) for k, v, _ in RECORDS[:200]]
    assert [(k, v) for _, k, v, _ in consume(plain, "kp", 200)] == got


def test_aiokafka_over_ssl(kafka_broker_factory, pki):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context
    from aiokafka.structs import TopicPartition as ATP

    _, plain, secure = tls_broker(kafka_broker_factory, pki)

    async def main():
        context = create_ssl_context(cafile=str(pki.ca))
        producer = AIOKafkaProducer(
            bootstrap_servers=secure, security_protocol="SSL", ssl_context=context
        )
        await producer.start()
        try:
            for key, value, _ in RECORDS[:200]:
                await producer.send("ak", key=key, value=value)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=secure,
            security_protocol="SSL",
            ssl_context=context,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        got = []
        try:
            consumer.assign([ATP("ak", 0)])
            while len(got) < 200:
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                for messages in batches.values():
                    got.extend((m.key, m.value) for m in messages)
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(main())
    assert got == [(k, v) for k, v, _ in RECORDS[:200]]
    assert [(k, v) for _, k, v, _ in consume(plain, "ak", 200)] == got


def _tls_connect(address, pki, *, client_cert=None, client_key=None):
    """A bare TLS connection and an ApiVersions v0 round trip; returns the response bytes."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    if client_cert:
        context.load_cert_chain(str(client_cert), str(client_key))
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            # ApiVersions v0, correlation id 7, client id "t".
            body = b"\x00\x12\x00\x00\x00\x00\x00\x07\x00\x01t"
            tls.sendall(len(body).to_bytes(4, "big") + body)
            data = tls.recv(4)
            if not data:
                raise ConnectionError("closed")
            return data + tls.recv(65536)


def test_mtls_required_refuses_a_client_without_certificate(kafka_broker_factory, pki):
    _, _, secure = tls_broker(
        kafka_broker_factory,
        pki,
        **{"ssl.client.auth": "required", "ssl.truststore.location": str(pki.ca)},
    )
    answer = _tls_connect(secure, pki, client_cert=pki.client_cert, client_key=pki.client_key)
    assert answer[8:10] == b"\x00\x00"  # correlation id 7 then error code NONE
    assert answer[4:8] == (7).to_bytes(4, "big")
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        _tls_connect(secure, pki)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        _tls_connect(
            secure, pki, client_cert=pki.other_ca_client_cert, client_key=pki.other_ca_client_key
        )
    # A real client with its certificate works; without, it never gets metadata.
    conf = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
        "ssl.certificate.location": str(pki.client_cert),
        "ssl.key.location": str(pki.client_key),
    }
    produce(secure, "mtls", **conf)
    assert len(consume(secure, "mtls", len(RECORDS), **conf)) == len(RECORDS)
    producer = Producer(
        {"bootstrap.servers": secure, "security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    )
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=3)


def test_inline_pem_and_encrypted_key(kafka_broker_factory, pki, tmp_path):
    encrypted = encrypt_key(pki.server_key.read_bytes(), "s3cret")
    key_file = tmp_path / "both.pem"
    key_file.write_bytes(encrypted + pki.server_chain.read_bytes())
    # One PEM file, key encrypted with ssl.key.password.
    _, _, secure = tls_broker(
        kafka_broker_factory,
        pki,
        **{"ssl.keystore.location": str(key_file), "ssl.key.password": "s3cret"},
    )
    assert _tls_connect(secure, pki)[4:8] == (7).to_bytes(4, "big")
    # Inline, written the Kafka way on one logical line (newlines turned into spaces).
    inline_key = encrypted.decode().replace("\n", " ")
    inline_chain = pki.server_chain.read_text().replace("\n", " ")
    props = {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.key": inline_key,
        "ssl.key.password": "s3cret",
        "ssl.keystore.certificate.chain": inline_chain,
        "ssl.enabled.protocols": "TLSv1.2",
        "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    }
    broker = kafka_broker_factory(props)
    context = ssl.create_default_context(cafile=str(pki.ca))
    with socket.create_connection(broker.addresses[0][:2], timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.version() == "TLSv1.2"
            assert tls.cipher()[0] == "ECDHE-ECDSA-AES128-GCM-SHA256"


def test_listener_names_map_to_protocols(kafka_broker_factory, pki):
    props = {
        "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SSL",
        "inter.broker.listener.name": "INTERNAL",
        "listener.name.external.ssl.keystore.location": str(pki.server),
    }
    broker = kafka_broker_factory(props)
    secure = "{}:{}".format(*broker.addresses[1][:2])
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    # Metadata on the SSL listener advertises the SSL listener's port.
    md = Producer({"bootstrap.servers": secure, **conf}).list_topics(timeout=10)
    assert [(b.host, b.port) for b in md.brokers.values()] == [broker.addresses[1][:2]]
    produce(secure, "named", **conf)
    assert len(consume(secure, "named", len(RECORDS), **conf)) == len(RECORDS)


def test_bad_tls_configs_name_the_problem(tmp_path):
    from trio_broker.security.listener import ListenerSecurity
    from trio_broker.server.socket_server import SocketServer

    def secure(name, protocol):
        return ListenerSecurity.build(config, name, protocol, None).connection_factory()

    with pytest.raises(ConfigError, match="listener.security.protocol.map"):
        BrokerConfig.from_properties({"listener.security.protocol.map": "A:NOPE"})
    config = BrokerConfig.from_properties(
        {"listeners": "WEIRD://127.0.0.1:0", "log.dirs": str(tmp_path)}
    )
    with pytest.raises(ConfigError, match="WEIRD"):
        SocketServer(config, None, {}, secure=secure)._secure("WEIRD")
    config = BrokerConfig.from_properties({"listeners": "SSL://127.0.0.1:0"})
    with pytest.raises(ConfigError, match="ssl.keystore.location"):
        SocketServer(config, None, {}, secure=secure)._secure("SSL")


def test_plaintext_broker_imports_no_security_module(tmp_path):
    # (ssl itself is imported by trio and the standard library already.)
    import subprocess
    import sys

    code = (
        "import sys, trio\n"
        "from trio_broker.broker import serve\n"
        "async def main():\n"
        "    async with trio.open_nursery() as n:\n"
        f"        await n.start(serve, {{'listeners': 'PLAINTEXT://127.0.0.1:0', 'log.dirs': {str(tmp_path)!r}}})\n"
        "        n.cancel_scope.cancel()\n"
        "trio.run(main)\n"
        "print(sorted(m for m in sys.modules if m.startswith('trio_broker') and any("
        "w in m for w in ('security', 'sasl', 'acl', 'scram', 'tls'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_mtls_principal_is_the_certificate_subject(kafka_broker_factory, pki):
    from cryptography import x509

    subject = x509.load_pem_x509_certificate(pki.client_cert.read_bytes()).subject
    principal = "User:" + subject.rfc4514_string()  # CN=alice,OU=...,O=...
    props = {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.location": str(pki.server),
        "ssl.truststore.location": str(pki.ca),
        "ssl.client.auth": "required",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": principal,
    }
    broker = kafka_broker_factory(props)
    conf = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
        "ssl.certificate.location": str(pki.client_cert),
        "ssl.key.location": str(pki.client_key),
    }
    address = "{}:{}".format(*broker.addresses[0][:2])
    produce(address, "by-cert", **conf)  # a super user by its certificate's DN
    assert len(consume(address, "by-cert", len(RECORDS), **conf)) == len(RECORDS)


def test_serve_refuses_a_tls_listener_without_keys(tmp_path):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "trio_broker", "serve", "--override", "listeners=SSL://127.0.0.1:0",
         "--override", f"log.dirs={tmp_path}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert "ssl.keystore.location" in out.stderr
    assert "Traceback" not in out.stderr


def test_principal_mapping_rules_name_the_client(kafka_broker_factory, pki):
    props = {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.location": str(pki.server),
        "ssl.truststore.location": str(pki.ca),
        "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/U,DEFAULT",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ALICE",
    }
    broker = kafka_broker_factory(props)
    conf = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
        "ssl.certificate.location": str(pki.client_cert),
        "ssl.key.location": str(pki.client_key),
    }
    address = "{}:{}".format(*broker.addresses[0][:2])
    produce(address, "mapped", **conf)  # User:ALICE, a super user
    assert len(consume(address, "mapped", len(RECORDS), **conf)) == len(RECORDS)


def test_client_auth_requested_takes_a_certificate_when_offered(kafka_broker_factory, pki):
    props = {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.location": str(pki.server),
        "ssl.truststore.location": str(pki.ca),
        "ssl.client.auth": "requested",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:" + x509_subject(pki.client_cert),
    }
    broker = kafka_broker_factory(props)
    address = "{}:{}".format(*broker.addresses[0][:2])
    # Without a certificate the client is let in, as User:ANONYMOUS: it sees no topic.
    anonymous = Producer(
        {"bootstrap.servers": address, "security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    )
    assert anonymous.list_topics(timeout=10).topics == {}
    # With one, it is its subject: here a super user.
    conf = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
        "ssl.certificate.location": str(pki.client_cert),
        "ssl.key.location": str(pki.client_key),
    }
    produce(address, "requested", **conf)
    assert (
        "requested"
        in Producer({"bootstrap.servers": address, **conf}).list_topics(timeout=10).topics
    )


def x509_subject(path):
    from cryptography import x509

    return x509.load_pem_x509_certificate(path.read_bytes()).subject.rfc4514_string()
