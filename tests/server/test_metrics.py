"""The Prometheus endpoint (`metrics.listener`), read with prometheus_client's own parser,
while real clients produce and consume."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families
from wire import roundtrip

from trio_broker.protocol._generated.metadata_request import MetadataRequest
from trio_broker.testing import free_port

TIMEOUT = 30


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=TIMEOUT) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def broker_with_metrics(kafka_broker_factory):
    port = free_port()
    broker = kafka_broker_factory({"metrics.listener": f"http://127.0.0.1:{port}"})
    return broker, f"http://127.0.0.1:{port}/metrics"


def test_counters_move_by_what_clients_produced_and_consumed(broker_with_metrics):
    broker, url = broker_with_metrics
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic("metered", 2, 1)]).values():
        f.result(TIMEOUT)
    before = scrape(url)
    assert value(before, "kafka_server_brokertopicmetrics_messagesin_total", topic="metered") == 0

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(500):
        producer.produce("metered", value=b"v%05d" % i, partition=i % 2)
    assert producer.flush(TIMEOUT) == 0
    after = scrape(url)
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic="metered") == 500
    size = sum(
        value(after, "kafka_log_log_size", topic="metered", partition=str(p)) for p in (0, 1)
    )
    assert size > 500 * 6
    # Batches are stored as sent: bytes in are exactly the bytes now in the log.
    assert value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic="metered") == size
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total") >= 500
    for p in (0, 1):
        assert value(after, "kafka_log_log_logendoffset", topic="metered", partition=str(p)) == 250
        assert value(after, "kafka_log_log_logstartoffset", topic="metered", partition=str(p)) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "metered-readers",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["metered"])
    got = 0
    while got < 500:
        msg = consumer.poll(TIMEOUT)
        assert msg is not None and msg.error() is None
        got += 1
        if got == 400:
            consumer.commit(asynchronous=False)
    consumer.close()
    final = scrape(url)
    # Every batch was sent to the consumer exactly once.
    assert value(final, "kafka_server_brokertopicmetrics_bytesout_total", topic="metered") == size
    # The group's lag as the coordinator sees it: 100 records behind in all.
    lag = sum(
        value(
            final,
            "kafka_consumergroup_lag",
            consumergroup="metered-readers",
            topic="metered",
            partition=str(p),
        )
        for p in (0, 1)
    )
    assert lag == 100
    assert value(final, "kafka_coordinator_group_groupmetadatamanager_numgroupsempty") == 1
    assert value(final, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(final, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(final, "kafka_server_replicamanager_leadercount") >= 2


def test_every_request_counted_once_in_counts_and_histograms(broker_with_metrics):
    broker, url = broker_with_metrics
    before = scrape(url)
    with socket.create_connection((broker.host, broker.port), timeout=TIMEOUT) as sock:
        for i in range(7):
            roundtrip(sock, MetadataRequest(topics=[]), 9, correlation_id=i + 1)
        after = scrape(url)
        connections = value(
            after,
            "kafka_server_socket_server_metrics_connection_count",
            listener="PLAINTEXT",
            networkProcessor="0",
        ) + sum(
            value(
                after,
                "kafka_server_socket_server_metrics_connection_count",
                listener="PLAINTEXT",
                networkProcessor=str(n),
            )
            for n in (1, 2)
        )
        assert connections == 1
    name = "kafka_network_requestmetrics_requests_total"

    def metadata_v9(samples: dict) -> float:
        return value(samples, name, request="Metadata", version="9")

    # A request is counted once its answer is written, which the client may see first.
    deadline = time.monotonic() + TIMEOUT
    while metadata_v9(after) - metadata_v9(before) < 7 and time.monotonic() < deadline:
        time.sleep(0.05)
        after = scrape(url)
    assert metadata_v9(after) - metadata_v9(before) == 7
    # Each time histogram counts every answered request of its API once.
    apis = {dict(labels)["request"] for (n, labels) in after if n == name}
    assert "Metadata" in apis
    for api in apis:
        answered = sum(
            v for (n, labels), v in after.items() if n == name and dict(labels)["request"] == api
        )
        for metric in (
            "requestqueuetimems",
            "localtimems",
            "remotetimems",
            "responsequeuetimems",
            "responsesendtimems",
            "totaltimems",
        ):
            count = value(after, f"kafka_network_requestmetrics_{metric}_count", request=api)
            assert count == answered, (api, metric)
            inf = value(
                after, f"kafka_network_requestmetrics_{metric}_bucket", request=api, le="+Inf"
            )
            assert inf == answered
    for gauge in (
        "kafka_network_socketserver_networkprocessoravgidlepercent",
        "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
    ):
        assert 0.0 <= value(after, gauge) <= 1.0
    assert (
        value(
            after, "kafka_server_delayedoperationpurgatory_purgatorysize", delayedOperation="Fetch"
        )
        == 0
    )


def test_a_parked_fetch_has_remote_time(broker_with_metrics):
    broker, url = broker_with_metrics
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("waiting", value=b"x")
    producer.flush(TIMEOUT)
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "g",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 200,
        }
    )
    consumer.subscribe(["waiting"])
    assert consumer.poll(TIMEOUT) is not None
    consumer.poll(1.0)  # nothing more: fetches wait in the purgatory for max wait
    consumer.close()
    after = scrape(url)
    remote = value(after, "kafka_network_requestmetrics_remotetimems_sum", request="Fetch")
    assert remote >= 150  # at least one fetch waited ~200 ms for data that never came


def test_unknown_path_is_404_and_broker_without_listener_has_no_metrics(
    broker_with_metrics, kafka_broker
):
    broker, url = broker_with_metrics
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(url.replace("/metrics", "/nope"), timeout=TIMEOUT)
    assert info.value.code == 404
    # A lone broker without metrics.listener neither serves nor imports them.
    code = (
        "import trio, trio_broker, sys, tempfile\n"
        "async def main():\n"
        "    async with trio_broker.open_broker({'listeners': 'PLAINTEXT://127.0.0.1:0',"
        " 'log.dirs': tempfile.mkdtemp()}):\n"
        "        pass\n"
        "trio.run(main)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('prometheus', 'trio_broker.metrics'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_bad_metrics_listener_is_refused():
    from trio_broker.config import BrokerConfig, ConfigError

    with pytest.raises(ConfigError, match="metrics.listener"):
        BrokerConfig.from_properties({"metrics.listener": "tcp://x:1"})


def test_idle_percents_of_a_quiet_broker(broker_with_metrics):
    _broker, url = broker_with_metrics
    scrape(url)
    time.sleep(1.2)  # one window of more than a second with nothing to do
    samples = scrape(url)
    # The Trio thread slept through almost all of it, and no handler worked.
    assert value(samples, "kafka_network_socketserver_networkprocessoravgidlepercent") > 0.5
    assert value(samples, "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent") > 0.9


def test_log_flushes_are_timed(kafka_broker_factory):
    port = free_port()
    broker = kafka_broker_factory(
        {"metrics.listener": f"http://127.0.0.1:{port}", "log.flush.interval.messages": "1"}
    )
    url = f"http://127.0.0.1:{port}/metrics"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(3):
        producer.produce("flushed", value=b"%d" % i)
        producer.flush(TIMEOUT)
    name = "kafka_log_logflushstats_logflushrateandtimems_count"
    deadline = time.monotonic() + TIMEOUT
    while value(samples := scrape(url), name) < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert value(samples, "kafka_log_logflushstats_logflushrateandtimems_sum") > 0


def test_a_deleted_topic_leaves_its_series_but_not_the_total(broker_with_metrics):
    broker, url = broker_with_metrics
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):
        producer.produce("doomed", value=b"%d" % i)
    assert producer.flush(TIMEOUT) == 0
    before = scrape(url)
    assert value(before, "kafka_server_brokertopicmetrics_messagesin_total", topic="doomed") == 5
    total = value(before, "kafka_server_brokertopicmetrics_messagesin_total")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics(["doomed"])["doomed"].result(TIMEOUT)
    after = scrape(url)
    assert (
        "kafka_server_brokertopicmetrics_messagesin_total",
        (("topic", "doomed"),),
    ) not in after
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total") == total
