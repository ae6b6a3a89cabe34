"""Every broker and topic config key of Kafka 3.9 is accepted, validated as Kafka validates
it, stored and described; the keys the broker does not act on say so (README, DescribeConfigs
documentation, one INFO line); unknown keys are still refused. Kafka's key lists are in
kafka39_config_keys.py, apart from the broker's own table."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kafka39_config_keys import (
    BROKER_KEYS,
    DYNAMIC_BROKER_KEYS,
    INTERNAL_BROKER_KEYS,
    PER_BROKER_KEYS,
    TOPIC_KEYS,
)
from test_admin_configs import admin, create, describe, error_of, raw

from trio_broker.apis.config_entries import INERT_DOC
from trio_broker.cluster.topic_config import TOPIC_CONFIGS
from trio_broker.config import BROKER_CONFIGS, INERT_NOTE, BrokerConfig, ConfigError
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.describe_configs_request import DescribeConfigsResource

TIMEOUT = 30
README = Path(__file__).resolve().parents[2] / "README.md"
OURS = {k.name: k for k in BROKER_CONFIGS}
OUR_TOPIC = {k.name: k for k in TOPIC_CONFIGS}


def _inc(client, kind: ResourceType, name: str, **entries: str):
    resource = ConfigResource(
        kind,
        name,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in entries.items()
        ],
    )
    (future,) = client.incremental_alter_configs([resource]).values()
    return future


def _set_topic(client, topic: str, key: str, value: str):
    return _inc(client, ResourceType.TOPIC, topic, **{key: value})


def _set_broker(client, key: str, value: str):
    return _inc(client, ResourceType.BROKER, "1", **{key: value})


# -- the table against Kafka 3.9 -----------------------------------------------------------


def test_the_table_has_every_kafka_39_key_with_its_type_and_update_mode():
    # broker.id is Kafka's name of node.id here (read as an alias, described under both).
    missing = sorted(set(BROKER_KEYS) - set(OURS) - {"broker.id"})
    assert not missing, missing
    assert {n: OURS[n].type for n in BROKER_KEYS if n in OURS} == {
        n: t for n, t in BROKER_KEYS.items() if n in OURS
    }
    assert {n for n in OURS if OURS[n].internal} == INTERNAL_BROKER_KEYS
    assert {n for n in OURS if OURS[n].dynamic} == DYNAMIC_BROKER_KEYS
    assert {n for n in OURS if OURS[n].dynamic == "per-broker"} == PER_BROKER_KEYS
    assert {k.name: k.type for k in TOPIC_CONFIGS} == TOPIC_KEYS


def _valid_text(name: str, kind: str) -> str:
    """A value Kafka accepts for the key: its default where it has one."""
    if name == "replica.selector.class":
        # Kafka loads the class; this broker knows Kafka's two selectors.
        return "org.apache.kafka.common.replica.LeaderSelector"
    spec = OURS[name]
    default = spec.default
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, tuple):
        return ",".join(str(v) for v in default)
    if default is not None:
        return str(default)
    return {
        "INT": "7",
        "SHORT": "7",
        "LONG": "7",
        "DOUBLE": "0.5",
        "BOOLEAN": "true",
        "LIST": "",
        "CLASS": "org.example.Plugin",
        "PASSWORD": "secret",
        "STRING": "x",
    }[kind]


def test_every_kafka_39_broker_key_is_accepted_in_the_properties():
    props = {n: _valid_text(n, t) for n, t in BROKER_KEYS.items() if n != "broker.id"}
    props["log.dirs"] = "/tmp/unused"
    config = BrokerConfig.from_properties(props)
    assert not config.unknown
    for name, text in props.items():
        assert config.value(name) == OURS[name].convert(text), name
    # Deprecated keys Kafka 3.9 still accepts, among them.
    for name, text in {
        "log.message.format.version": "0.10.2",
        "delegation.token.master.key": "k",
        "auto.include.jmx.reporter": "false",
        "offsets.commit.required.acks": "-1",
        "log.message.timestamp.difference.max.ms": "1000",
    }.items():
        assert BrokerConfig.from_properties({name: text}).value(name) == OURS[name].convert(text)


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("inter.broker.protocol.version", "3.10"),  # MetadataVersionValidator
        ("inter.broker.protocol.version", "4.0"),  # not a production version of 3.9
        ("log.message.format.version", "0.7.0"),
        ("process.roles", "broker,worker"),  # ValidList.in(broker, controller)
        ("controller.quorum.voters", "1@host"),  # id@host:port
        ("controller.quorum.bootstrap.servers", "host"),
        ("group.share.max.size", "5"),  # between(10, 1000)
        ("group.share.record.lock.duration.ms", "999"),
        ("group.consumer.migration.policy", "sideways"),  # case-insensitive ValidString
        ("password.encoder.iterations", "1023"),  # atLeast(1024)
        ("fetch.max.bytes", "1023"),  # atLeast(1024)
        ("remote.log.manager.copier.thread.pool.size", "0"),  # -1 or > 0
        ("remote.log.manager.task.retry.jitter", "0.6"),  # between(0, 0.5)
        ("remote.log.storage.manager.impl.prefix", ""),  # NonEmptyString
        ("log.local.retention.ms", "-3"),  # atLeast(-2)
        ("compression.type", "brotli"),
        ("compression.gzip.level", "0"),  # 1..9 or -1
        ("compression.lz4.level", "18"),
        ("compression.zstd.level", "23"),
        ("sasl.login.refresh.buffer.seconds", "40000"),  # SHORT
        ("reserved.broker.max.id", "2147483648"),  # INT
        ("metadata.max.retention.ms", "9223372036854775808"),  # LONG
        ("sasl.kerberos.ticket.renew.jitter", "lots"),  # DOUBLE
        ("zookeeper.ssl.client.enable", "yes"),  # BOOLEAN
        ("principal.builder.class", "not a class"),  # CLASS
        ("log.roll.hours", "0"),
        ("log.cleaner.min.cleanable.ratio", "1.5"),  # between(0, 1)
    ],
)
def test_bad_values_of_typed_broker_keys_stop_the_broker_naming_the_key(key, text):
    with pytest.raises(ConfigError, match=re.escape(key)):
        BrokerConfig.from_properties({key: text})


def test_kafkas_other_names_for_the_log_times_and_dir_are_read():
    config = BrokerConfig.from_properties(
        {"log.retention.hours": "2", "log.roll.hours": "3", "log.dir": "/data/k"}
    )
    assert config.log_retention_ms == 2 * 3600_000
    assert config.log_roll_ms == 3 * 3600_000
    assert config.log_dirs == ("/data/k",)
    # Minutes win over hours, milliseconds over both, log.dirs over log.dir.
    config = BrokerConfig.from_properties(
        {"log.retention.hours": "2", "log.retention.minutes": "5", "log.dirs": "/a,/b"}
    )
    assert config.log_retention_ms == 300_000 and config.log_dirs == ("/a", "/b")
    assert (
        BrokerConfig.from_properties(
            {"log.retention.minutes": "5", "log.retention.ms": "10"}
        ).log_retention_ms
        == 10
    )
    # This broker's earlier name of log.segment.delete.delay.ms still works.
    assert (
        BrokerConfig.from_properties({"file.delete.delay.ms": "5"}).value(
            "log.segment.delete.delay.ms"
        )
        == 5
    )


# -- described ------------------------------------------------------------------------------


def test_describe_lists_every_kafka_39_key_read_only_as_kafka(kafka_broker_factory):
    # An internal key is described only when set, as Kafka's are.
    broker = kafka_broker_factory({"log.initial.task.delay.ms": "1000"})
    client = admin(broker)
    configs = describe(client, ResourceType.BROKER, "1")
    public = set(BROKER_KEYS) - INTERNAL_BROKER_KEYS
    assert not public - set(configs)
    assert configs["log.initial.task.delay.ms"].value == "1000"
    assert configs["log.initial.task.delay.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert not (INTERNAL_BROKER_KEYS - {"log.initial.task.delay.ms"}) & set(configs)
    wrong = sorted(n for n in public if configs[n].is_read_only == (n in DYNAMIC_BROKER_KEYS))
    assert not wrong, wrong
    # Typed and documented as Kafka's; a key the broker only stores says so.
    sasl = configs["sasl.kerberos.min.time.before.relogin"]
    assert (sasl.value, sasl.is_default) == ("60000", True)
    response = raw(
        broker, 32, 4,
        resources=[DescribeConfigsResource(
            resource_type=4, resource_name="1",
            configuration_keys=["sasl.kerberos.min.time.before.relogin", "log.retention.ms"],
        )],
        include_synonyms=False, include_documentation=True,
    )  # fmt: skip
    docs = {c.name: (c.config_type, c.documentation) for c in response.results[0].configs}
    assert docs["sasl.kerberos.min.time.before.relogin"][0] == 5  # LONG
    assert docs["sasl.kerberos.min.time.before.relogin"][1].endswith(INERT_DOC)
    assert not docs["log.retention.ms"][1].endswith(INERT_DOC)

    create(client, "every")
    topic = describe(client, ResourceType.TOPIC, "every")
    assert set(TOPIC_KEYS) <= set(topic)
    assert topic["message.format.version"].value == "3.0-IV1"
    assert topic["segment.jitter.ms"].value == "0"
    assert topic["remote.storage.enable"].value == "false"
    assert topic["compression.type"].value == "producer"


# -- librdkafka's cases ---------------------------------------------------------------------


def test_librdkafka_0081_alters_a_kerberos_broker_key(kafka_broker, caplog):
    # rd_kafka_AlterConfigs (the legacy API) with a topic and this broker, as test 0081 does.
    caplog.set_level(logging.INFO, logger="trio_broker.config")
    client = admin(kafka_broker)
    create(client, "rdkafka-0081")
    resources = [
        ConfigResource(
            ResourceType.TOPIC,
            "rdkafka-0081",
            set_config={"compression.type": "gzip", "flush.ms": "12345678"},
        ),
        ConfigResource(
            ResourceType.BROKER, "1", set_config={"sasl.kerberos.min.time.before.relogin": "58000"}
        ),
    ]
    for future in client.alter_configs(resources).values():
        future.result(TIMEOUT)
    entry = describe(client, ResourceType.BROKER, "1")["sasl.kerberos.min.time.before.relogin"]
    assert entry.value == "58000"
    assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert not entry.is_read_only
    topic = describe(client, ResourceType.TOPIC, "rdkafka-0081")
    assert (topic["compression.type"].value, topic["flush.ms"].value) == ("gzip", "12345678")
    notes = [r.getMessage() for r in caplog.records if "does not act on it" in r.getMessage()]
    assert any("sasl.kerberos.min.time.before.relogin" in n for n in notes), notes
    assert any("topic config compression.type" in n for n in notes), notes
    # Once: setting it again says nothing more.
    before = len(caplog.records)
    _set_broker(client, "sasl.kerberos.min.time.before.relogin", "59000").result(TIMEOUT)
    assert not [r for r in caplog.records[before:] if "does not act on it" in r.getMessage()]
    # Kafka keeps per-broker keys out of the cluster default.
    kafka_broker.restart()
    entry = describe(admin(kafka_broker), ResourceType.BROKER, "1")[
        "sasl.kerberos.min.time.before.relogin"
    ]
    assert (entry.value, entry.source) == ("59000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)


def test_librdkafka_0092_sets_message_format_version(kafka_broker):
    # Test 0092 sets the deprecated message.format.version on a topic; Kafka 3 accepts it
    # and writes the newest record format all the same, as this broker does.
    client = admin(kafka_broker)
    create(client, "rdkafka-0092", {"message.format.version": "0.10.0.0"})
    _set_topic(client, "rdkafka-0092", "message.format.version", "0.10.2-IV0").result(TIMEOUT)
    entry = describe(client, ResourceType.TOPIC, "rdkafka-0092")["message.format.version"]
    assert (entry.value, entry.source) == ("0.10.2-IV0", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    producer.produce("rdkafka-0092", key=b"k", value=b"v", headers=[("h", b"1")])
    assert producer.flush(TIMEOUT) == 0
    consumer = Consumer(
        {"bootstrap.servers": kafka_broker.bootstrap, "group.id": "g0092",
         "auto.offset.reset": "earliest"}
    )  # fmt: skip
    try:
        consumer.subscribe(["rdkafka-0092"])
        msg = None
        for _ in range(40):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                break
        assert msg is not None and msg.value() == b"v" and msg.headers() == [("h", b"1")]
    finally:
        consumer.close()


# -- refused as Kafka refuses ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("segment.jitter.ms", "-1"),
        ("max.compaction.lag.ms", "0"),
        ("compression.gzip.level", "10"),
        ("compression.lz4.level", "0"),
        ("compression.zstd.level", "23"),
        ("message.format.version", "0.7.0"),
        ("message.format.version", "4.0"),
        ("preallocate", "yes"),
        ("local.retention.ms", "-3"),
        ("local.retention.bytes", "-3"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("message.timestamp.before.max.ms", "-1"),
        ("message.downconversion.enable", "sometimes"),
        ("max.message.bytes", "2147483648"),  # INT
        ("retention.ms", "9223372036854775808"),  # LONG
        ("segment.ms", "1.5"),
        ("remote.storage.enable", "true"),  # tiered storage is off in the broker
        ("remote.log.copy.disable", "true"),  # refused in ZooKeeper mode
    ],
)
def test_bad_topic_values_are_invalid_config(kafka_broker, key, text):
    client = admin(kafka_broker)
    if "bad-values" not in client.list_topics(timeout=TIMEOUT).topics:
        create(client, "bad-values")
    assert error_of(_set_topic(client, "bad-values", key, text)) == ErrorCode.INVALID_CONFIG
    assert describe(client, ResourceType.TOPIC, "bad-values")[key].source != (
        ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    )


def test_topic_keys_are_checked_together(kafka_broker):
    client = admin(kafka_broker)
    create(client, "lags")
    future = _inc(
        client, ResourceType.TOPIC, "lags",
        **{"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
    )  # fmt: skip
    assert error_of(future) == ErrorCode.INVALID_CONFIG
    _inc(
        client, ResourceType.TOPIC, "lags",
        **{"min.compaction.lag.ms": "5", "max.compaction.lag.ms": "10"},
    ).result(TIMEOUT)  # fmt: skip


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("log.cleaner.threads", "-1"),
        ("background.threads", "0"),
        ("compression.gzip.level", "0"),
        ("log.local.retention.ms", "-3"),
        ("sasl.kerberos.min.time.before.relogin", "soon"),
        ("sasl.login.refresh.buffer.seconds", "40000"),
        ("transaction.partition.verification.enable", "maybe"),
        ("remote.fetch.max.wait.ms", "0"),
    ],
)
def test_bad_dynamic_broker_values_are_refused_as_kafka_39_does(kafka_broker, key, text):
    # Kafka 3.9 answers a bad broker value with INVALID_REQUEST (KAFKA-13609 keeps it so).
    client = admin(kafka_broker)
    with pytest.raises(KafkaException) as info:
        _set_broker(client, key, text).result(TIMEOUT)
    assert info.value.args[0].code() == ErrorCode.INVALID_REQUEST
    # Refused for its value, not as an unknown key.
    assert f"Invalid value {text} for configuration {key}" in info.value.args[0].str()


def test_dynamic_keys_the_broker_only_stores_are_stored_and_survive_a_restart(kafka_broker):
    client = admin(kafka_broker)
    stored = {
        "log.cleaner.threads": "2",
        "compression.type": "zstd",
        "background.threads": "4",
        "log.message.timestamp.after.max.ms": "3600000",
    }
    _inc(client, ResourceType.BROKER, "1", **stored).result(TIMEOUT)
    kafka_broker.restart()
    client = admin(kafka_broker)
    configs = describe(client, ResourceType.BROKER, "1")
    assert {k: configs[k].value for k in stored} == stored
    assert all(configs[k].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value for k in stored)
    # Kafka changes the TLS stores only per listener (listener.name.<l>.ssl...).
    with pytest.raises(KafkaException) as info:
        _set_broker(client, "ssl.keystore.location", "/k.pem").result(TIMEOUT)
    assert "only per-listener" in info.value.args[0].str()


def test_retention_hours_set_dynamically_moves_retention_ms(kafka_broker):
    client = admin(kafka_broker)
    _set_broker(client, "log.retention.hours", "2").result(TIMEOUT)
    configs = describe(client, ResourceType.BROKER, "1")
    assert configs["log.retention.ms"].value == str(2 * 3600_000)
    create(client, "hours")
    assert describe(client, ResourceType.TOPIC, "hours")["retention.ms"].value == "7200000"


def test_unknown_keys_are_still_refused(kafka_broker):
    client = admin(kafka_broker)
    create(client, "known")
    assert error_of(_set_topic(client, "known", "no.such.key", "1")) == ErrorCode.INVALID_CONFIG
    with pytest.raises(KafkaException) as info:
        _set_broker(client, "no.such.key", "1").result(TIMEOUT)
    assert info.value.args[0].code() == ErrorCode.INVALID_REQUEST
    assert "Unknown broker config" in info.value.args[0].str()
    # A topic key is not a broker key, nor the other way round.
    assert error_of(_set_broker(client, "retention.ms", "1")) == ErrorCode.INVALID_REQUEST
    assert error_of(_set_topic(client, "known", "log.retention.ms", "1")) == (
        ErrorCode.INVALID_CONFIG
    )


def test_inert_keys_set_in_properties_are_noted_once(kafka_broker_factory, caplog):
    caplog.set_level(logging.INFO, logger="trio_broker.config")
    kafka_broker_factory({"log.cleaner.threads": "3", "log.preallocate": "true"})
    noted = [r.getMessage() for r in caplog.records if r.msg == INERT_NOTE]
    assert sum("log.cleaner.threads" in n for n in noted) == 1
    assert sum("log.preallocate" in n for n in noted) == 1
    assert all(r.levelno == logging.INFO for r in caplog.records if r.msg == INERT_NOTE)


# -- the README ------------------------------------------------------------------------------


def test_readme_lists_exactly_the_keys_the_broker_does_not_act_on():
    text = README.read_text(encoding="utf-8")
    section = text.split("### Keys the broker stores but does not act on", 1)[1]
    section = section.split("\n#", 1)[0]
    # The list starts at its first item ("- server: ..."), after the paragraph about it.
    broker_part, topic_part = section[section.index("\n- ") :].split("Topic keys:", 1)
    listed_broker = set(re.findall(r"`([a-zA-Z0-9.]+)`", broker_part))
    listed_topic = set(re.findall(r"`([a-zA-Z0-9.]+)`", topic_part))
    assert listed_broker == {k.name for k in BROKER_CONFIGS if not k.acts}
    assert listed_topic == {k.name for k in TOPIC_CONFIGS if not k.acts}
