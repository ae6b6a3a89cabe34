"""Hostile requests that decode, sent to one broker of a cluster: besides the client APIs,
the controller's own (LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown) and
the admin requests that become ZooKeeper paths. None may fail a handler or stop a broker.

Like Kafka without an authorizer, the cluster obeys controller requests whose epochs are
new enough, so its state afterwards is whatever they asked for; this test checks that each
request got its answer and that every broker still serves. A fixed seed reproduces a run.
"""

from __future__ import annotations

import logging
import socket
import time

from clustertest_helpers import eventually
from confluent_kafka.admin import AdminClient, NewTopic
from fuzz_requests import realistic_seeds, run_fuzz, seeds
from wire import encode_request, read_response

from trio_broker.protocol._generated.api_versions_request import ApiVersionsRequest
from trio_broker.testing import KafkaCluster

# Where a cluster differs from a lone broker (tests/server/test_fuzz_requests.py sends
# every API): the controller's RPCs, AlterPartition, admin requests that become ZooKeeper
# paths and writes, leader epochs, coordinators and producer id blocks.
CLUSTER_APIS = {1, 3, 4, 5, 6, 7, 10, 19, 20, 22, 23, 33, 37, 43, 44, 45, 46, 56}
OVERRIDES = {
    "offsets.topic.num.partitions": "2",
    "transaction.state.log.num.partitions": "2",
    "group.initial.rebalance.delay.ms": "0",
}


def test_hostile_requests_to_a_cluster_never_fail_a_handler(zookeeper, tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="trio_broker")
    with KafkaCluster(zookeeper, base_dir=tmp_path, overrides=OVERRIDES) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("fuzz", 3, 3)])["fuzz"].result(30)
        target = cluster.brokers[1]

        outcome = run_fuzz(
            target.host, target.port, seeds(realistic_seeds("fuzz"), CLUSTER_APIS), 1000, seed=1
        )

        failures = [r.getMessage() for r in caplog.records if "failed on api" in r.getMessage()]
        unencodable = [r.getMessage() for r in caplog.records if "cannot encode" in r.getMessage()]
        assert failures == [] and unencodable == []
        assert outcome["answered"] > 700, outcome
        for broker in cluster.brokers.values():
            with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
                sock.sendall(encode_request(ApiVersionsRequest(), 3))
                _, answer = read_response(sock, 18, 3)
                assert answer.error_code == 0 and answer.api_keys


def test_a_follower_fed_mutated_answers_keeps_replicating(zookeeper, tmp_path, caplog):
    """Broker 2 follows broker 1 through a proxy that mutates a third of broker 1's
    answers (fetches, OffsetForLeaderEpoch, and the controller's requests, broker 2 being
    the controller). Bad answers may cost retries, but the fetcher and the broker go on:
    once the answers are clean again a new topic replicates, acks=all works and the
    follower's copy is the leader's, byte for byte; nothing logged a traceback."""
    from confluent_kafka import Producer
    from failover_helpers import create_topic, log_bytes, wait_for_leaders
    from fuzz_requests import MutatingProxy

    from trio_broker.testing import free_port

    caplog.set_level(logging.INFO, logger="trio_broker")
    ports = {n: {"INTERNAL": free_port(), "CLIENT": free_port()} for n in (1, 2)}
    proxy = MutatingProxy(("127.0.0.1", ports[1]["INTERNAL"]), seed=3, share=0.0)
    common = {
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,CLIENT:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "replica.fetch.backoff.ms": "100",
        "offsets.topic.replication.factor": "1",
    }
    try:
        with KafkaCluster(zookeeper, base_dir=tmp_path, size=0, overrides=common) as cluster:
            for n in (2, 1):  # broker 2 first: the controller
                listeners = {name: f"{name}://127.0.0.1:{port}" for name, port in ports[n].items()}
                overrides = {"listeners": ",".join(listeners.values())}
                if n == 1:
                    overrides["advertised.listeners"] = (
                        f"INTERNAL://127.0.0.1:{proxy.port},{listeners['CLIENT']}"
                    )
                cluster.add_broker(n, overrides)
            cluster.wait_all_see()
            bootstrap = f"127.0.0.1:{ports[1]['CLIENT']}"
            create_topic(bootstrap, "mutated", replica_assignment=[[1, 2], [1, 2]])
            wait_for_leaders(bootstrap, "mutated", 2, isr_size=2)

            proxy.share = 0.3
            producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5})
            deadline = time.monotonic() + 20
            i = 0
            while proxy.mutated < 200 and time.monotonic() < deadline:
                for _ in range(50):
                    producer.produce("mutated", b"%d" % i, partition=i % 2)
                    i += 1
                producer.poll(0.02)
            producer.flush(30)
            proxy.share = 0.0
            assert proxy.mutated >= 200, proxy.mutated
            assert all(b._thread.is_alive() for b in cluster.brokers.values())

            create_topic(
                bootstrap,
                "after",
                replica_assignment=[[1, 2]],
                config={"min.insync.replicas": "2"},
            )
            wait_for_leaders(bootstrap, "after", 1, isr_size=2, budget_s=60)
            errors = []
            producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
            for i in range(200):
                producer.produce(
                    "after", b"a-%d" % i, on_delivery=lambda err, _m: err and errors.append(err)
                )
            assert producer.flush(60) == 0 and errors == []

            def identical() -> bool:
                copies = [log_bytes(b.log_dir, "after", 0) for b in cluster.brokers.values()]
                return copies[0] == copies[1] != b""

            eventually(identical, budget_s=20, what="the follower's copy of 'after'")
    finally:
        proxy.close()
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info]
    assert tracebacks == []
