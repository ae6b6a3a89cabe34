"""ZooKeeper gone: killed (kill -9) under a 3-broker cluster carrying idempotent acks=all
load, down for longer than the brokers' session timeout, then started again on the same
port and data (as after a crash).

What Kafka promises, checked here: brokers keep serving while ZooKeeper is down (the
partitions' leaders and ISRs do not need it while nothing changes), so producers go on
being acknowledged, even while requests that need ZooKeeper (topic creation, here more
of them than a broker has handler tasks) wait for it; nothing stops a broker; once ZooKeeper is back every broker is
registered again, a controller is elected, and the cluster takes metadata changes again
(a new topic gets leaders); nothing acknowledged is lost or duplicated.
"""

from __future__ import annotations

import logging
import socket
import time

from clustertest_helpers import (
    FAST_SESSION,
    KAFKA_SHUTDOWN_RETRIES,
    ZooKeeperView,
    eventually,
    view,
)
from failover_helpers import (
    CountingProducer,
    assert_every_ack_read_once,
    create_topic,
    high_watermarks,
    read_all,
    wait_for_leaders,
)
from wire import encode_request, read_response, request_of, roundtrip

from trio_broker.errors import ErrorCode
from trio_broker.testing import KafkaCluster

OUTAGE_S = 6  # longer than FAST_SESSION's 4 s session timeout


def _send_create_topic(broker, name: str):
    """A CreateTopics sent on a socket of its own; returns (socket, read its error code)."""
    from trio_broker.protocol._generated.create_topics_request import CreatableTopic

    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    topic = CreatableTopic(name=name, num_partitions=1, replication_factor=1)
    sock.sendall(encode_request(request_of(19, topics=[topic], timeout_ms=60_000), 5))

    def read(s):
        _, response = read_response(s, 19, 5)
        return response.topics[0].error_code

    return sock, read


def _send_auto_create(broker, name: str):
    """A Metadata that may auto-create `name`, on a socket of its own."""
    from trio_broker.protocol._generated.metadata_request import MetadataRequestTopic

    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    request = request_of(
        3, topics=[MetadataRequestTopic(name=name)], allow_auto_topic_creation=True
    )
    sock.sendall(encode_request(request, 9))

    def read(s):
        _, response = read_response(s, 3, 9)
        return response.topics[0].error_code

    return sock, read


def test_the_cluster_serves_through_a_zookeeper_outage_and_recovers(zookeeper, tmp_path):
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=3, overrides=FAST_SESSION) as cluster:
        bootstrap = cluster.bootstrap
        create_topic(bootstrap, "through", 3, 3, config={"min.insync.replicas": "2"})
        wait_for_leaders(bootstrap, "through", 3, isr_size=3)
        with CountingProducer(bootstrap, "through") as producer:
            eventually(lambda: len(producer.acked) > 500, budget_s=30, what="first acks")
            zookeeper.kill()
            down_at = time.monotonic()
            # Requests that need ZooKeeper, more of them than broker 1 has handler tasks:
            # they wait for it, and hold none of the tasks produces and fetches need.
            waiting = [_send_create_topic(cluster.brokers[1], f"made-{i}") for i in range(12)]
            waiting += [_send_auto_create(cluster.brokers[1], f"auto-{i}") for i in range(6)]
            time.sleep(1)
            with socket.create_connection(("127.0.0.1", cluster.brokers[1].port), 5) as sock:
                assert roundtrip(sock, request_of(18), 3).error_code == 0  # ApiVersions
            time.sleep(OUTAGE_S - 1)
            during = producer.acks_after(down_at + 1)
            zookeeper.start_again()
            up_at = time.monotonic()
            # Acknowledged while ZooKeeper was down: the leaders and ISRs held.
            assert during > 200, f"{during} acks while ZooKeeper was down"
            for n, broker in cluster.brokers.items():
                assert broker._thread.is_alive(), f"broker {n} stopped"
            zk_view = ZooKeeperView(zookeeper.connect)
            try:
                eventually(
                    lambda: zk_view.broker_ids() == [1, 2, 3],
                    budget_s=30,
                    what="every broker registered again",
                )
                controller = eventually(zk_view.controller, budget_s=30, what="a controller")
            finally:
                zk_view.close()
            for broker in cluster.brokers.values():
                eventually(
                    lambda b=broker: (
                        view(b.bootstrap)[1] == controller
                        and [n for n, _, _ in view(b.bootstrap)[2]] == [1, 2, 3]
                    ),
                    budget_s=30,
                    what=f"{broker.bootstrap} sees the controller and every broker",
                )
            # What waited on ZooKeeper is done now: every topic was created.
            for sock, read in waiting:
                sock.settimeout(60)
                assert read(sock) in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE)
                sock.close()
            wait_for_leaders(bootstrap, "made-11", 1)
            create_topic(bootstrap, "after", 2, 3)
            wait_for_leaders(bootstrap, "after", 2, isr_size=3)
            producer.wait_for_acks_after(time.monotonic(), budget_s=30, what="acks after")
        assert not producer.errors, producer.errors[:3]
        print(
            f"{during} acks during the {OUTAGE_S} s outage; back {up_at - down_at:.1f} s "
            f"after the kill; {len(producer.acked)} acknowledged in all"
        )
        hw = high_watermarks(bootstrap, "through", range(3))
        assert_every_ack_read_once(producer.acked, read_all(bootstrap, "through", hw))


def test_brokers_stopped_while_zookeeper_is_down_stop_promptly(zookeeper, tmp_path):
    """SIGTERM (here: serve() cancelled) while ZooKeeper is down: the controller cannot move
    leaderships without it, so it answers ControlledShutdown at once instead of holding
    each request until it times out (controller.socket.timeout.ms, 30 s, times four
    attempts); the brokers give up their controlled shutdown after the retries and stop,
    and nothing acknowledged is lost."""
    with KafkaCluster(zookeeper, base_dir=tmp_path, size=3, overrides=FAST_SESSION) as cluster:
        bootstrap = cluster.bootstrap
        create_topic(bootstrap, "stopping", 3, 3)
        wait_for_leaders(bootstrap, "stopping", 3, isr_size=3)
        with CountingProducer(bootstrap, "stopping") as producer:
            eventually(lambda: len(producer.acked) > 300, budget_s=30, what="first acks")
        acked = list(producer.acked)
        zookeeper.kill()
        began = time.monotonic()
        for n in (3, 2, 1):
            cluster.brokers.pop(n).stop()
        stopped_s = time.monotonic() - began
        # Not a timing claim: the budget only tells a broker that waited out its requests
        # (4 x 30 s each) from one that gave up after the retries (3 x 0.2 s here).
        assert stopped_s < 45, f"three brokers took {stopped_s:.1f} s to stop"
        print(f"three brokers stopped in {stopped_s:.1f} s with ZooKeeper down")
        zookeeper.start_again()
        for n in (1, 2, 3):
            cluster.add_broker(n)
        cluster.wait_all_see()
        wait_for_leaders(cluster.bootstrap, "stopping", 3, budget_s=60)
        hw = high_watermarks(cluster.bootstrap, "stopping", range(3))
        assert_every_ack_read_once(acked, read_all(cluster.bootstrap, "stopping", hw))


def test_the_last_broker_stopped_while_zookeeper_is_down_asks_once(zookeeper, tmp_path, caplog):
    """Brokers 3 and 2 stopped, then ZooKeeper killed: broker 1, controller and alone,
    cannot have its leaderships moved (nobody could take them, and the controller refuses
    without ZooKeeper). Its controlled shutdown asks once and stops, instead of asking
    again controlled.shutdown.max.retries times, 5 s apart (Kafka's defaults); what it
    acknowledged is there when it comes back."""
    with KafkaCluster(
        zookeeper, base_dir=tmp_path, size=3, overrides=KAFKA_SHUTDOWN_RETRIES
    ) as cluster:
        create_topic(cluster.bootstrap, "alone", 2, 3)
        wait_for_leaders(cluster.bootstrap, "alone", 2, isr_size=3)
        with CountingProducer(cluster.bootstrap, "alone") as producer:
            eventually(lambda: len(producer.acked) > 100, budget_s=30, what="first acks")
        acked = list(producer.acked)
        cluster.brokers.pop(3).stop()
        cluster.brokers.pop(2).stop()
        last = cluster.brokers[1]
        eventually(
            lambda: [n for n, _, _ in view(last.bootstrap)[2]] == [1],
            budget_s=15,
            what="broker 1 alone in its metadata",
        )
        zookeeper.kill()
        caplog.set_level(logging.INFO)
        cluster.brokers.pop(1).stop()
        messages = [r.getMessage() for r in caplog.records]
        refused = [m for m in messages if m.startswith("controlled shutdown refused by")]
        assert refused == ["controlled shutdown refused by broker 1: BROKER_NOT_AVAILABLE"]
        assert any("broker 1: no other broker is alive; stopping" in m for m in messages)
        zookeeper.start_again()
        cluster.add_broker(1)
        wait_for_leaders(cluster.bootstrap, "alone", 2, budget_s=60)
        hw = high_watermarks(cluster.bootstrap, "alone", range(2))
        assert_every_ack_read_once(acked, read_all(cluster.bootstrap, "alone", hw))
