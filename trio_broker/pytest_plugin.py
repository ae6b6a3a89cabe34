"""pytest plugin (entry point `pytest11`): a fresh trio-broker for any project's tests.

    def test_roundtrip(kafka_broker):
        producer = confluent_kafka.Producer({"bootstrap.servers": kafka_broker.bootstrap})
        ...

`kafka_broker` is a broker on a free loopback port with its own temporary data directory,
running on a background thread (so blocking and asyncio clients work), stopped after the
test. `kafka_broker_factory(**overrides)` starts more, with configuration overrides given
as Kafka key names: `kafka_broker_factory({"num.partitions": "3"})`.

`zookeeper` is Debian's ZooKeeper on a free port (skipped when not installed), and
`kafka_cluster` three brokers joined through it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest


@pytest.fixture
def kafka_broker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable]:
    from trio_broker.testing import BrokerThread

    started: list[BrokerThread] = []

    def start(overrides: Mapping[str, str] | None = None) -> BrokerThread:
        data: Path = tmp_path_factory.mktemp("kafka-logs")
        props = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data)}
        props.update(overrides or {})
        broker = BrokerThread(props).start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()


@pytest.fixture
def kafka_broker(kafka_broker_factory: Callable):
    """A running broker: `.bootstrap` ("127.0.0.1:PORT"), `.log_dir`, `.restart()`."""
    return kafka_broker_factory()


@pytest.fixture
def zookeeper() -> Iterator:
    """Debian's ZooKeeper on a free loopback port (`.connect` is "127.0.0.1:PORT"), in its
    own temporary directory, stopped after the test. Skips when ZooKeeper is not installed."""
    from trio_broker.testing import ZOOKEEPER_MISSING, ZooKeeperServer, zookeeper_classpath

    if zookeeper_classpath() is None:
        pytest.skip(ZOOKEEPER_MISSING)
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture
def kafka_cluster(zookeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """Three brokers (node ids 1, 2, 3) joined through a fresh ZooKeeper (`zookeeper`),
    running on background threads: `.bootstrap` (all three), `.brokers[node_id]`,
    `.add_broker(node_id)`. Topics are replicated, led and moved as the cluster's
    controller decides. For kill -9 and SIGSTOP, use `trio_broker.testing.KafkaCluster`
    with `processes=True` (brokers as child processes)."""
    from trio_broker.testing import KafkaCluster

    with KafkaCluster(zookeeper, base_dir=tmp_path_factory.mktemp("kafka-cluster")) as cluster:
        yield cluster
