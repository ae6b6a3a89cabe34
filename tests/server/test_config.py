import logging
import subprocess
import sys

import pytest

from trio_broker.config import BrokerConfig, ConfigError, Listener, parse_properties


def test_properties_syntax():
    text = r"""
# a comment
! another
listeners = PLAINTEXT://127.0.0.1:0
log.dirs:/data/a,\
    /data/b
broker.id 7
path=C:\\kafka\tx
"""
    props = parse_properties(text)
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:0"
    assert props["log.dirs"] == "/data/a,/data/b"
    assert props["broker.id"] == "7"
    assert props["path"] == "C:\\kafka\tx"


def test_kafka_keys_become_typed_values():
    config = BrokerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://[::1]:9093",
            "broker.id": "7",
            "log.dirs": "/a, /b",
            "num.io.threads": "2",
            "auto.create.topics.enable": "false",
        }
    )
    assert config.listeners == (
        Listener(name="PLAINTEXT", host="127.0.0.1", port=0),
        Listener(name="INTERNAL", host="::1", port=9093),
    )
    assert config.node_id == 7
    assert config.log_dirs == ("/a", "/b")
    assert config.num_io_threads == 2
    assert config.auto_create_topics_enable is False
    assert config.value("num.io.threads") == 2


@pytest.mark.parametrize(
    "key,value",
    [
        ("num.io.threads", "zero"),
        ("num.io.threads", "0"),
        ("listeners", "127.0.0.1:9092"),
        ("auto.create.topics.enable", "yes"),
        ("log.message.timestamp.type", "Whenever"),
    ],
)
def test_bad_value_names_the_key(key, value):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        BrokerConfig.from_properties({key: value})


def test_unknown_key_is_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        config = BrokerConfig.from_properties({"no.such.key": "1"})
    assert "no.such.key" in caplog.text
    assert config.unknown == {"no.such.key": "1"}


def test_cli_refuses_bad_value_naming_the_key(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("num.network.threads=-1\n")
    result = subprocess.run(
        [sys.executable, "-m", "trio_broker", "serve", "--config", str(props)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "num.network.threads" in result.stderr
