"""`trio-broker acls|users|quotas`, run as subprocesses against a real secured broker, with
confluent-kafka as the clients whose access the commands change."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import attrs
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from plain_sasl import USERS as PLAIN
from plain_sasl import start


def command_config(tmp_path, user="admin", jaas=False):
    """The --command-config file an operator would write for this broker: librdkafka's
    keys, or the Java tools' sasl.jaas.config."""
    path = tmp_path / f"{user}.properties"
    login = (
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{user}" password="{PLAIN[user]}";\n'
        if jaas
        else f"sasl.username={user}\nsasl.password={PLAIN[user]}\n"
    )
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n" + login)
    return str(path)


def cli(broker, props, *args, stdin=None, check=True):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "trio_broker",
            *args,
            "--bootstrap",
            broker.bootstrap,
            "--command-config",
            props,
        ],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
    )
    if check:
        assert out.returncode == 0, (args, out.returncode, out.stderr)
    return out


def as_json(broker, props, *args):
    return json.loads(cli(broker, props, *args, "--json").stdout)


def conf(broker, user, password=None, mechanism="PLAIN", **extra):
    return {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password if password is not None else PLAIN[user],
        **extra,
    }


def produce(config, topic, n=3):
    producer = Producer({**config, "linger.ms": 1, "message.timeout.ms": 10000})
    results = []
    for i in range(n):
        producer.produce(topic, value=b"v%d" % i, on_delivery=lambda e, m: results.append(e))
    producer.flush(30)
    return results


def read(config, topic, want):
    """Records of partition 0 from the start, or the error the fetch got. The consumer's
    group is "billing", which alice may use."""
    consumer = Consumer({**config, "group.id": "billing", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    try:
        deadline = time.monotonic() + 15
        while len(got) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                return msg.error().code()
            got.append(msg.value())
    finally:
        consumer.close()
    return got


def acl(resource_type, name, operation, pattern="LITERAL", principal="User:alice"):
    return {
        "resource_type": resource_type,
        "resource_name": name,
        "pattern_type": pattern,
        "principal": principal,
        "host": "*",
        "operation": operation,
        "permission_type": "ALLOW",
    }


def refused_login(config):
    """Whether the broker refuses this SASL login (as a client sees it: an error)."""
    errors = []
    producer = Producer({**config, "error_cb": errors.append, "log_level": 0})
    try:
        producer.list_topics(timeout=2)
    except KafkaException:
        producer.poll(0.5)  # error callbacks are served here
        return any("uthentication" in e.str() for e in errors)
    return False


def test_acls_add_list_remove_change_what_a_client_may_do(kafka_broker_factory, tmp_path):
    broker = start(kafka_broker_factory)
    admin = command_config(tmp_path)
    for topic in ("orders", "payments", "logs-app", "secret"):
        cli(broker, admin, "topics", "create", topic, "-p", "1")
    assert produce(conf(broker, "admin"), "orders") == [None] * 3

    added = cli(
        broker,
        admin,
        *("acls", "add", "--allow-principal", "User:alice"),
        *("--operation", "Read", "--operation", "describe", "--topic", "orders"),
    )
    assert added.stdout.splitlines()[0] == "Added 2 ACL(s):"
    cli(
        broker,
        admin,
        *("acls", "add", "--allow-principal", "User:alice", "--operation", "Describe"),
        *("--topic", "logs-", "--resource-pattern-type", "prefixed"),
    )
    cli(
        broker,
        admin,
        *("acls", "add", "--allow-principal", "User:alice", "--consumer"),
        *("--topic", "payments", "--group", "billing"),
    )
    everything = [
        acl("GROUP", "billing", "READ"),
        acl("TOPIC", "logs-", "DESCRIBE", "PREFIXED"),
        acl("TOPIC", "orders", "DESCRIBE"),
        acl("TOPIC", "orders", "READ"),
        acl("TOPIC", "payments", "DESCRIBE"),
        acl("TOPIC", "payments", "READ"),
    ]
    assert as_json(broker, admin, "acls", "list") == everything
    assert as_json(broker, admin, "acls", "list", "--topic", "orders") == everything[2:4]
    # Every binding that applies to logs-app: the prefixed one.
    matched = as_json(
        broker, admin, "acls", "list", "--topic", "logs-app", "--resource-pattern-type", "match"
    )
    assert matched == [everything[1]]
    table = cli(broker, admin, "acls", "list", "--group", "billing").stdout.splitlines()
    assert table[0].split() == [
        "RESOURCE-TYPE",
        "RESOURCE-NAME",
        "PATTERN-TYPE",
        "PRINCIPAL",
        "HOST",
        "OPERATION",
        "PERMISSION-TYPE",
    ]
    assert table[1].split() == ["GROUP", "billing", "LITERAL", "User:alice", "*", "READ", "ALLOW"]

    alice = conf(broker, "alice")
    assert read(alice, "orders", 3) == [b"v0", b"v1", b"v2"]
    visible = Producer(alice).list_topics(timeout=10).topics
    assert sorted(visible) == ["logs-app", "orders", "payments"]  # not "secret"
    refused = produce(alice, "orders", 2)
    assert [e.code() for e in refused] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 2
    # --consumer gave her the group: she commits an offset for it.
    consumer = Consumer({**alice, "group.id": "billing"})
    consumer.commit(offsets=[TopicPartition("payments", 0, 0)], asynchronous=False)
    consumer.close()

    # Alice is no admin: the ACL commands are refused to her.
    hers = cli(broker, command_config(tmp_path, "alice"), "acls", "list", check=False)
    assert hers.returncode == 1
    assert "CLUSTER_AUTHORIZATION_FAILED" in hers.stderr

    removed = as_json(
        broker,
        admin,
        *("acls", "remove", "--allow-principal", "User:alice"),
        *("--operation", "READ", "--topic", "orders"),
    )
    assert removed == [acl("TOPIC", "orders", "READ")]
    assert as_json(broker, admin, "acls", "list") == everything[:3] + everything[4:]
    assert read(alice, "orders", 3) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    nothing = cli(broker, admin, "acls", "remove", "--topic", "orders", "--operation", "Write")
    assert "nothing was removed" in nothing.stdout
    # A filter without principal or operation takes every ACL of the resource.
    assert len(as_json(broker, admin, "acls", "remove", "--topic", "payments")) == 2
    assert as_json(broker, admin, "acls", "list", "--topic", "payments") == []

    bad = cli(
        broker, admin, "acls", "add", "--allow-principal", "alice", "--topic", "t", check=False
    )
    assert bad.returncode == 2 and "User:alice" in bad.stderr
    bad = cli(
        broker,
        admin,
        *("acls", "add", "--allow-principal", "User:alice", "--group", "g"),
        *("--operation", "Write"),
        check=False,
    )
    assert bad.returncode == 2 and "GROUP ACLs take" in bad.stderr


def test_scram_users_set_list_delete_and_log_in(kafka_broker_factory, tmp_path):
    broker = start(
        kafka_broker_factory,
        **{
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "allow.everyone.if.no.acl.found": "true",
        },
    )
    admin = command_config(tmp_path)
    secret = tmp_path / "alice.password"
    secret.write_text("alice-scram-pw\n")
    cli(
        broker,
        admin,
        *("users", "set", "alice", "--mechanism", "SCRAM-SHA-256"),
        *("--password-file", str(secret), "--iterations", "8192"),
    )
    cli(broker, admin, "users", "set", "bob", "--mechanism", "scram-sha-256", stdin="bob-pw\n")
    assert as_json(broker, admin, "users", "list") == [
        {"user": "alice", "mechanism": "SCRAM-SHA-256", "iterations": 8192},
        {"user": "bob", "mechanism": "SCRAM-SHA-256", "iterations": 4096},
    ]
    assert as_json(broker, admin, "users", "list", "bob") == [
        {"user": "bob", "mechanism": "SCRAM-SHA-256", "iterations": 4096}
    ]
    assert cli(broker, admin, "users", "list", "carol", check=False).returncode == 3
    # The broker keeps no password, only what SCRAM needs to check one.
    stored = (broker.log_dir / "scram-credentials").read_text()
    assert "alice-scram-pw" not in stored and "iterations=8192" in stored

    alice = conf(broker, "alice", "alice-scram-pw", "SCRAM-SHA-256")
    assert produce(alice, "scram-topic") == [None] * 3
    assert read(conf(broker, "bob", "bob-pw", "SCRAM-SHA-256"), "scram-topic", 3) == [
        b"v0",
        b"v1",
        b"v2",
    ]
    assert refused_login({**alice, "sasl.password": "wrong"})

    cli(broker, admin, "users", "delete", "alice", "--mechanism", "SCRAM-SHA-256")
    assert as_json(broker, admin, "users", "list") == [
        {"user": "bob", "mechanism": "SCRAM-SHA-256", "iterations": 4096}
    ]
    assert refused_login(alice)
    again = cli(
        broker, admin, "users", "delete", "alice", "--mechanism", "SCRAM-SHA-256", check=False
    )
    assert again.returncode == 3 and "RESOURCE_NOT_FOUND" in again.stderr
    low = cli(
        broker,
        admin,
        *("users", "set", "carol", "--mechanism", "SCRAM-SHA-512"),
        *("--password", "pw", "--iterations", "100"),
        check=False,
    )
    assert low.returncode == 1 and "UNACCEPTABLE_CREDENTIAL" in low.stderr


def test_quotas_set_describe_delete(kafka_broker_factory, tmp_path):
    broker = start(kafka_broker_factory)
    admin = command_config(tmp_path, jaas=True)
    cli(broker, admin, "quotas", "set", "--user", "alice", "producer_byte_rate=1024")
    cli(broker, admin, "quotas", "set", "--user-default", "consumer_byte_rate=2048")
    cli(
        broker,
        admin,
        *("quotas", "set", "--user", "alice", "--client", "c1", "request_percentage=50"),
    )
    alice = {"entity": {"user": "alice"}, "values": {"producer_byte_rate": 1024.0}}
    default = {"entity": {"user": None}, "values": {"consumer_byte_rate": 2048.0}}
    both = {"entity": {"client-id": "c1", "user": "alice"}, "values": {"request_percentage": 50.0}}
    assert as_json(broker, admin, "quotas", "describe") == [both, alice, default]
    assert as_json(broker, admin, "quotas", "describe", "--user", "alice") == [alice]
    assert as_json(broker, admin, "quotas", "describe", "--user-default") == [default]
    table = cli(broker, admin, "quotas", "describe").stdout.splitlines()
    assert table[0].split() == ["USER", "CLIENT-ID", "QUOTA", "VALUE"]
    assert ["<default>", "-", "consumer_byte_rate", "2048.0"] in [r.split() for r in table]

    cli(broker, admin, "quotas", "delete", "--user", "alice", "producer_byte_rate")
    assert as_json(broker, admin, "quotas", "describe", "--user", "alice") == []
    assert as_json(broker, admin, "quotas", "describe") == [both, default]

    unknown = cli(broker, admin, "quotas", "set", "--user", "bob", "nonsense=1", check=False)
    assert unknown.returncode == 1 and "INVALID_REQUEST" in unknown.stderr
    nobody = cli(broker, admin, "quotas", "set", "producer_byte_rate=1", check=False)
    assert nobody.returncode == 2


async def test_admin_client_calls_behind_the_commands(kafka_broker_factory):
    from trio_broker.client.admin import (
        AclBinding,
        AclBindingFilter,
        Admin,
        AdminError,
        ClientQuotaEntity,
        ClientQuotaFilterComponent,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )
    from trio_broker.errors import ErrorCode

    broker = kafka_broker_factory(
        {
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:ANONYMOUS",  # what a PLAINTEXT client is
        }
    )
    read = AclBinding(
        resource_type="Topic", resource_name="t", principal="User:a", operation="Read"
    )
    # Names and Kafka's int codes make the same value.
    assert read == AclBinding(
        resource_type=2,
        resource_name="t",
        pattern_type=3,
        principal="User:a",
        host="*",
        operation=3,
        permission_type=3,
    )
    deny = AclBinding(
        resource_type="group",
        resource_name="g-",
        pattern_type="prefixed",
        principal="User:b",
        host="10.0.0.1",
        operation="all",
        permission_type="deny",
    )
    async with Admin(broker.bootstrap) as admin:
        await admin.create_acls([read, deny])
        assert sorted(await admin.describe_acls(), key=str) == sorted([read, deny], key=str)
        assert await admin.describe_acls(AclBindingFilter(principal="User:b")) == [deny]
        by_match = AclBindingFilter(
            resource_type="group", resource_name="g-1", pattern_type="match"
        )
        assert await admin.describe_acls(by_match) == [deny]
        with pytest.raises(AdminError) as refused:
            await admin.create_acls([attrs.evolve(read, principal="nobody")])
        assert refused.value.code == ErrorCode.INVALID_REQUEST
        assert await admin.delete_acls([read.to_filter()]) == {read.to_filter(): [read]}
        assert await admin.describe_acls() == [deny]

        await admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion("a", "SCRAM-SHA-512", "pw", iterations=5000),
                UserScramCredentialUpsertion("b", "SCRAM-SHA-256", b"pw"),
            ]
        )
        assert await admin.describe_user_scram_credentials() == {
            "a": [("SCRAM-SHA-512", 5000)],
            "b": [("SCRAM-SHA-256", 4096)],
        }
        await admin.alter_user_scram_credentials(
            deletions=[UserScramCredentialDeletion("b", "SCRAM-SHA-256")]
        )
        with pytest.raises(AdminError) as missing:
            await admin.describe_user_scram_credentials(["a", "b"])
        assert set(missing.value.errors) == {"b"}
        assert missing.value.results == {"a": [("SCRAM-SHA-512", 5000)]}

        alice = ClientQuotaEntity({"user": "alice"})
        await admin.alter_client_quotas(
            {
                alice: {"producer_byte_rate": 1024},
                (("client-id", None),): {"request_percentage": 20},
            }
        )
        await admin.alter_client_quotas({alice: {"consumer_byte_rate": 1.0}}, validate_only=True)
        assert await admin.describe_client_quotas({"user": "alice"}) == {
            alice: {"producer_byte_rate": 1024.0}
        }
        default_client = ClientQuotaEntity({"client-id": None})
        assert await admin.describe_client_quotas(
            [ClientQuotaFilterComponent.of_default_entity("client-id")]
        ) == {default_client: {"request_percentage": 20.0}}
        assert set(await admin.describe_client_quotas()) == {alice, default_client}
        await admin.alter_client_quotas({alice: {"producer_byte_rate": None}})
        assert await admin.describe_client_quotas({"user": "alice"}) == {}
