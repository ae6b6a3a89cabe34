"""Our Trio client over SSL, SASL_PLAINTEXT and SASL_SSL (PLAIN, SCRAM-SHA-256/512) against
a secured broker: records produced by it read back by confluent-kafka and by it, and the
errors a user meets: a wrong password, a broker certificate the client does not trust."""

from __future__ import annotations

import pytest
import trio
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from security_pki import make_pki

from trio_broker.client import Consumer, Producer, TopicPartition
from trio_broker.client.admin import Admin
from trio_broker.client.config import ClientConfig
from trio_broker.client.errors import SaslAuthenticationFailedError, SslAuthenticationError
from trio_broker.client.security import PlainClient, ScramClient
from trio_broker.security.sasl import ScramServer, scram_credential

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secured(pki, tmp_path_factory):
    """One broker: PLAINTEXT (for setup), SSL with mTLS requested, SASL_PLAINTEXT, SASL_SSL;
    alice has SCRAM credentials for both hashes and a PLAIN password."""
    from trio_broker.testing import BrokerThread

    broker = BrokerThread(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,"
            "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "log.dirs": str(tmp_path_factory.mktemp("kafka-logs")),
            "ssl.keystore.location": str(pki.server),
            "ssl.truststore.location": str(pki.ca),
            "ssl.client.auth": "requested",
            "sasl.jaas.config": JAAS,
            # Sessions on SASL_PLAINTEXT end after 1.5 s unless re-authenticated (KIP-368).
            "listener.name.sasl_plaintext.connections.max.reauth.ms": "1500",
        }
    ).start()
    try:
        names = ("plain", "ssl", "sasl", "sasl_ssl")
        addresses = {
            n: "{}:{}".format(*a[:2]) for n, a in zip(names, broker.addresses, strict=True)
        }
        admin = AdminClient({"bootstrap.servers": addresses["plain"]})
        upserts = [
            UserScramCredentialUpsertion(
                "alice", ScramCredentialInfo(mechanism, 4096), b"alice-secret"
            )
            for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
        ]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(30)
        yield addresses
    finally:
        broker.stop()


CASES = {
    "ssl": ("ssl", {"security.protocol": "SSL"}),
    "ssl-mtls": ("ssl", {"security.protocol": "SSL", "ssl.certificate.location": "CLIENT"}),
    "sasl_plaintext-plain": (
        "sasl",
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
    ),
    "sasl_ssl-plain": ("sasl_ssl", {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}),
    "sasl_ssl-scram-sha-256": (
        "sasl_ssl",
        {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256"},
    ),
    "sasl_ssl-scram-sha-512": (
        "sasl_ssl",
        {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"},
    ),
}


def _config(pki, case: str) -> tuple[str, dict]:
    listener, config = CASES[case]
    config = dict(config)
    if "SSL" in config["security.protocol"]:
        config["ssl.ca.location"] = str(pki.ca)
    if config.get("ssl.certificate.location") == "CLIENT":
        config["ssl.certificate.location"] = str(pki.client_cert)
        config["ssl.key.location"] = str(pki.client_key)
    if "SASL" in config["security.protocol"]:
        config["sasl.username"] = "alice"
        config["sasl.password"] = "alice-secret"
    return listener, config


@pytest.mark.parametrize("case", list(CASES))
async def test_produce_and_consume(secured, pki, case):
    listener, config = _config(pki, case)
    bootstrap = secured[listener]
    topic = f"secure-{case}"
    async with Admin(bootstrap, config=config) as admin:
        await admin.create_topics({topic: 2})
    sent = []
    async with Producer(bootstrap, config=config, linger_ms=1) as producer:
        for i in range(50):
            meta = await producer.send(
                topic, f"value-{i}".encode(), key=f"k{i}".encode(), partition=i % 2
            )
            sent.append((meta.partition, meta.offset, f"k{i}".encode(), f"value-{i}".encode()))
    assert sorted(o for p, o, _, _ in sent if p == 0) == list(range(25))
    async with Consumer(bootstrap, config=config, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        got = []
        with trio.fail_after(20):
            while len(got) < len(sent):
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend((r.partition, r.offset, r.key, r.value) for r in records)
    assert sorted(got) == sorted(sent)
    # confluent-kafka reads the same records over plaintext.
    ck = CKConsumer({"bootstrap.servers": secured["plain"], "group.id": f"g-{case}"})
    try:
        ck.assign([CKTopicPartition(topic, p, 0) for p in (0, 1)])
        seen = []
        for _ in range(200):
            msg = ck.poll(0.1)
            if msg is not None and not msg.error():
                seen.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
            if len(seen) == len(sent):
                break
        assert sorted(seen) == sorted(sent)
    finally:
        ck.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_wrong_password_is_a_clear_error(secured, pki, mechanism):
    config = {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca),
        "sasl.mechanism": mechanism,
        "sasl.username": "alice",
        "sasl.password": "not-her-password",
    }
    with trio.fail_after(20):
        with pytest.raises(SaslAuthenticationFailedError) as info:
            async with Producer(secured["sasl_ssl"], config=config) as producer:
                await producer.send("never", b"x")
    message = str(info.value)
    assert message.startswith("SASL_AUTHENTICATION_FAILED")
    assert "alice" in message and mechanism in message
    assert "not-her-password" not in message
    with pytest.raises(SaslAuthenticationFailedError):
        async with Admin(secured["sasl_ssl"], config=config) as admin:
            await admin.list_topics()
    with trio.fail_after(20), pytest.raises(SaslAuthenticationFailedError, match="alice"):
        async with Consumer(secured["sasl_ssl"], config=config) as consumer:
            consumer.assign([TopicPartition("never", 0)])
            while True:  # raised by a poll, as Kafka's consumer does
                await consumer.getmany(timeout_ms=500)


async def test_unoffered_mechanism_and_missing_credentials(secured, pki):
    config = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256"}
    with pytest.raises(SaslAuthenticationFailedError, match="needs sasl.username"):
        async with Admin(secured["sasl"], config=config) as admin:
            await admin.list_topics()


async def test_untrusted_broker_certificate(secured, pki, tmp_path):
    other = make_pki(tmp_path)  # a CA that did not sign the broker's certificate
    config = {"security.protocol": "SSL", "ssl.ca.location": str(other.ca)}
    with pytest.raises(SslAuthenticationError, match="does not trust") as info:
        async with Admin(secured["ssl"], config=config) as admin:
            await admin.list_topics()
    assert secured["ssl"] in str(info.value)
    # The broker's name is checked too: its certificate is for 127.0.0.1 and localhost.
    config = {"security.protocol": "SSL", "ssl_cafile": str(pki.ca)}
    port = secured["ssl"].rsplit(":", 1)[1]
    async with Admin(f"localhost:{port}", config=config) as admin:
        assert isinstance(await admin.list_topics(), list)
    # A plaintext client on a TLS port is cut off, not left hanging.
    with trio.fail_after(30):
        with pytest.raises(Exception):  # noqa: B017, PT011
            async with Admin(secured["ssl"], request_timeout_ms=3000) as admin:
                await admin.list_topics()


def test_config_spellings(pki):
    kafka = ClientConfig.build(
        config={
            "security.protocol": "sasl_ssl",
            "ssl.truststore.location": "/ca.pem",
            "ssl.keystore.location": "/me.pem",
            "ssl.key.password": "kp",
            "ssl.endpoint.identification.algorithm": "",
            "sasl.mechanism": "scram-sha-512",
            "sasl.jaas.config": 'ScramLoginModule required username="u" password="p\\"w";',
        }
    )
    assert kafka.security_protocol == "SASL_SSL" and kafka.ssl_cafile == "/ca.pem"
    assert kafka.ssl_certfile == "/me.pem" and kafka.ssl_password == "kp"
    assert kafka.ssl_check_hostname is False and kafka.sasl_mechanism == "SCRAM-SHA-512"
    assert (kafka.sasl_username, kafka.sasl_password) == ("u", 'p"w')
    underscores = ClientConfig.build(
        security_protocol="SSL",
        ssl_cafile="/ca.pem",
        ssl_certfile="/c.pem",
        ssl_keyfile="/k.pem",
        sasl_plain_username="u",
        sasl_plain_password="p",
    )
    assert (underscores.ssl_keyfile, underscores.sasl_username) == ("/k.pem", "u")
    assert "sasl_password" not in repr(underscores)
    with pytest.raises(ValueError, match="security_protocol"):
        ClientConfig.build(security_protocol="TLS")
    with pytest.raises(ValueError, match="sasl_mechanism"):
        ClientConfig.build(sasl_mechanism="GSSAPI")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_against_the_broker_scram_server(mechanism):
    import hashlib
    import os

    salt = os.urandom(16)
    name = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    salted = hashlib.pbkdf2_hmac(name, b"pw,=x", salt, 4096)
    credential = scram_credential(mechanism, salted, salt, 4096)
    for password, ok in (("pw,=x", True), ("other", False)):
        server = ScramServer(mechanism, lambda u, m: credential if u == "a=b,c" else None)
        client = ScramClient(mechanism, "a=b,c", password)
        challenge = None
        try:
            while not client.complete:
                token = client.step(challenge)
                if token is None:
                    break
                challenge = server.step(token)
        except Exception as exc:  # noqa: BLE001
            assert not ok, exc
            continue
        assert ok and client.complete and server.complete
    assert PlainClient("u", "p").step(None) == b"\x00u\x00p"


def test_plaintext_client_and_broker_load_no_security_code(tmp_path):
    """A plaintext broker, our producer and a broker's inter-broker config import neither
    the client's TLS/SASL module nor the broker's."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        f"""
        import sys, trio
        from trio_broker.client import Producer
        from trio_broker.config import BrokerConfig
        from trio_broker.security.inter_broker import inter_broker_client_config
        from trio_broker.testing import BrokerThread

        broker = BrokerThread({{"listeners": "PLAINTEXT://127.0.0.1:0",
                               "log.dirs": {str(tmp_path)!r}}}).start()
        async def main():
            async with Producer(broker.bootstrap) as producer:
                await producer.send("plain", b"x")
        trio.run(main)
        inter_broker_client_config(BrokerConfig.from_properties(
            {{"listeners": "PLAINTEXT://127.0.0.1:0", "zookeeper.connect": "zk:2181"}}))
        broker.stop()
        print(sorted(m for m in sys.modules if m.startswith(
            ("trio_broker.client.security", "trio_broker.security.sasl",
             "trio_broker.security.tls", "trio_broker.security.listener"))))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
async def test_reauthentication_keeps_the_connection(secured, mechanism):
    """The broker ends a session after connections.max.reauth.ms; the client authenticates
    again on the same connection before that, while requests keep flowing."""
    from trio_broker.client.network_client import NetworkClient
    from trio_broker.protocol._generated.metadata_request import MetadataRequest

    address = secured["sasl"]
    config = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_username": "alice",
        "sasl_password": "alice-secret",
    }
    async with NetworkClient(bootstrap_servers=address, **config) as client:
        first = await client.connection(address)
        with trio.fail_after(30):
            for _ in range(25):  # 5 s: more than three session lifetimes
                response = await client.send(address, MetadataRequest(topics=[]))
                assert response.brokers
                await trio.sleep(0.2)
        assert (await client.connection(address)) is first
        assert not first.closed
